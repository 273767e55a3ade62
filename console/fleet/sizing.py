"""What a pod of ``deploy k8s`` asks of its node, and how long its stop may take: each bound derived here once.

Memory of the tritonserver container: :data:`SERVER_MEMORY`, and per model instance a Python backend stub
(:data:`STUB_MEMORY`) plus, on the engines that run on the host (cpu, onnx), the weights and static KV cache that
the memory check estimates (:func:`repo_gen.memory.estimate`) times :data:`HEADROOM` (activations, the allocator's
slack); on a card (engine qaic, or auto) they live in the card's memory. Its CPUs: one for the server, and per
instance the model's ``cpu_threads`` on the CPU engines (:data:`AUTO_THREADS` where 0 lets the engine pick), one
feeding a card. The front: :data:`FRONT_CPU` and :data:`FRONT_MEMORY`. Requests equal limits, in whole CPUs: the
pod is Guaranteed (evicted last), and the kubelet's static CPU manager may give it cores of its own, the ones an
engine's automatic thread count then sees.

The stop: the longest stream the models allow is the consoles' and the front's timeout for their kind
(:func:`console.clients.default_timeout`: 600 s for a KV-cache model, 6000 s for a causal one). Both containers get
that long to drain (tritonserver's ``--exit-timeout-secs``, the front's ``--drain``) after a preStop of
:data:`ROUTING_DELAY` s that lets the Service stop routing to the pod; the grace period adds :data:`UNLOAD_MARGIN`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from console.clients import default_timeout
from repo_gen.memory import estimate, size
from repo_gen.spec import local_config
from repo_gen.writer import ModelSpec

HOST_ENGINES = ("cpu", "onnx")  # the backend's engines on the host (backend_model/contract/parameters.py ENGINES)
SERVER_MEMORY = 256 * 2**20  # tritonserver itself (measured: 41 MB resident) and its shared-memory regions
STUB_MEMORY = 1536 * 2**20  # a Python backend stub: Python, torch, transformers, a tokenizer (measured: 1.19 GB
#                             resident for the embedded SmolLM2 at int4, whose weights and cache are 73 MB)
HEADROOM = 1.25  # over the estimate of a model on the host: activations, the allocator's slack
AUTO_THREADS = 4  # CPUs asked for an instance whose cpu_threads is 0 (automatic)
FRONT_CPU = 1
FRONT_MEMORY = 1024 * 2**20  # the OpenAI front: FastAPI, gRPC, the tokenizers (measured: 416 MB resident after a
#                               chat with the embedded model; more for larger tokenizers and many open streams)
ROUTING_DELAY = 10  # s the preStop waits: the endpoints' removal reaching every proxy and balancer
UNLOAD_MARGIN = 30  # s after the streams: the models' unload and the processes' exit


class SizingError(Exception):
    """A model whose memory cannot be estimated (one line)."""


@dataclass(frozen=True)
class Model:
    """One model folder as a pod's sizing reads it: its generator spec and its instance count."""

    spec: ModelSpec
    instances: int

    @property
    def on_host(self) -> bool:
        return self.spec.engine in HOST_ENGINES


def model_spec(name: str, parameters: dict[str, str], compile_config: dict[str, Any]) -> ModelSpec:
    """The generator's spec of a model folder, from its config.pbtxt ``parameters`` and its compile config."""
    threads = parameters.get("cpu_threads", "0").strip()
    kind = "kv_cache" if parameters.get("use_kv_cache", "true").lower() == "true" else "causal"
    return ModelSpec(name, parameters.get("task") or kind,
                     compile=compile_config, engine=parameters.get("engine", "auto") or "auto",
                     hf_model_name=parameters.get("hf_model_name", ""),
                     precision=parameters.get("precision", "fp32") or "fp32",
                     cpu_threads=int(threads) if threads.isdigit() else 0)


def host_bytes(model: Model) -> float:
    """The host memory of one instance of ``model``: its stub, and on the host engines its estimate with headroom;
    SizingError when the model's config.json is not here to estimate it."""
    if not model.on_host:
        return STUB_MEMORY
    found = estimate(model.spec, local_config(model.spec.hf_model_name))
    if found is None:
        raise SizingError(f"{model.spec.model_name}: its memory cannot be estimated: the config.json of "
                          f"{model.spec.hf_model_name!r} is not in the local Hugging Face cache")
    return STUB_MEMORY + found.total * HEADROOM


def cpus(model: Model) -> int:
    """CPUs one instance of ``model`` computes with."""
    return (model.spec.cpu_threads or AUTO_THREADS) if model.on_host else 1


def _quantities(cpu: int, memory: float) -> dict[str, dict[str, str]]:
    amount = {"cpu": str(cpu), "memory": f"{math.ceil(memory / 2**20)}Mi"}
    return {"requests": dict(amount), "limits": dict(amount)}


@dataclass(frozen=True)
class Sizing:
    """A pod's CPUs and memory for tritonserver, and the seconds its streams get to finish when it stops."""

    cpu: int
    memory: float
    drain: int

    @property
    def grace_period(self) -> int:
        """The pod's terminationGracePeriodSeconds."""
        return ROUTING_DELAY + self.drain + UNLOAD_MARGIN

    def server_resources(self) -> dict[str, dict[str, str]]:
        return _quantities(self.cpu, self.memory)

    @staticmethod
    def front_resources() -> dict[str, dict[str, str]]:
        return _quantities(FRONT_CPU, FRONT_MEMORY)

    def __str__(self) -> str:
        return (f"tritonserver asks {self.cpu} CPUs and {size(self.memory)}, the front {FRONT_CPU} and "
                f"{size(FRONT_MEMORY)}; streams get {self.drain} s to finish (grace period {self.grace_period} s)")


def sizing(models: Iterable[Model]) -> Sizing:
    """The sizing of a pod serving ``models`` (SizingError when one cannot be estimated)."""
    models = list(models)
    return Sizing(1 + sum(cpus(m) * m.instances for m in models),
                  SERVER_MEMORY + sum(host_bytes(m) * m.instances for m in models),
                  max(int(default_timeout(m.spec.model_type == "kv_cache")) for m in models))
