"""What model instances buy (``make bench``'s ``instances_2_over_1_16_streams``): one server serving the embedded
model twice, with one device group (``"0"``: one instance) and with two (``"0;1"``: two instances), each instance one
engine thread (``cpu_threads`` 1) and 16 slots; 16 concurrent streams against each, alternately. Every answer must
equal the prompt's answer sent alone, and the backend's metrics split the two-instance model's tokens by instance.

On a machine whose cores other work keeps busy, a second engine thread may get no more CPU than one: the context
also gives each instance's CPU seconds over a run (its stub process's, from /proc) and the ratio they imply if each
instance had a core of its own (``instances_2_over_1_if_a_core_each``: one instance's CPU seconds ÷ the busier of
the two instances'), labelled as such.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from console.clients import GenerationParams, Reply, Timeouts, stream
from console.metrics import scrape
from console.server import TritonServer
from repo_gen.writer import ModelSpec, write_model

from .engine import Timed
from .streams import bench_prompts, triton_streams
from .verdicts import best_rate, ratio, rounded

STREAMS = 16
MODELS = {"instances_1": "0", "instances_2": "0;1"}  # model -> device groups
COMPILE = {"prefill_seq_len": 32, "ctx_len": 512, "full_batch_size": STREAMS}
TOKENS_FAMILY = "qaic_generation_tokens"
INSTANCES_TARGETS = {"instances_2_over_1_16_streams": (">=", 1.4)}  # key -> (comparison, threshold)
INSTANCES_LABELS = {
    "instances_2_over_1_16_streams": "2 model instances (device groups 0;1) ÷ 1, 16 streams, 1 thread each"}


@contextlib.contextmanager
def served_instances(timeout: float = 600.0) -> Iterator[Any]:
    """A tritonserver serving both models (the embedded model at fp32, decoupled, one thread per instance)."""

    with tempfile.TemporaryDirectory(prefix="qaic-report-instances-") as tmp:
        for name, groups in MODELS.items():
            write_model(ModelSpec(name, "kv_cache", True, hf_model_name="embedded", compile=COMPILE, engine="cpu",
                                  cpu_threads=1, device_groups=groups), tmp)
        server = TritonServer(Path(tmp), models=tuple(MODELS))
        server.start(timeout=timeout)
        try:
            yield server
        finally:
            server.stop()


def cpu_seconds(marker: str) -> dict[str, float]:
    """The CPU seconds (user + system) of each process (by pid) whose command line holds ``marker`` (a model's
    stub: ``<repository>/<model>/1/model.py``), read from /proc."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                if marker.encode() not in file.read():
                    continue
            found[pid] = _stat(pid)[1]
        except OSError:  # gone meanwhile
            continue
    return found


def group_cpu_seconds(group: int) -> float:
    """The CPU seconds (user + system) of the processes in process group ``group`` (a server started in a session
    of its own and the processes it started), read from /proc."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            in_group, seconds = _stat(pid)
        except OSError:  # gone meanwhile
            continue
        total += seconds if in_group == group else 0.0
    return total


def _stat(pid: str) -> tuple[int, float]:
    """Process ``pid``'s group and CPU seconds; OSError when it is gone."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return int(fields[2]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # pgrp; utime, stime


def _tokens_by_instance(metrics_url: str) -> dict[str, float]:
    return scrape(metrics_url).instances(TOKENS_FAMILY, "instances_2")


def instances_section(report: Any, opts: Any, progress: Callable[[str], None]) -> None:
    """One instance against two, alternately, best of ``opts.repeats``; the answers checked against each prompt
    sent alone (to the one-instance model, one at a time)."""
    progress(f"model instances: a server with the embedded model on 1 and 2 device groups, {STREAMS} streams ...")
    with served_instances() as server:
        url, metrics = server.grpc_url, f"http://127.0.0.1:{server.metrics_port}/metrics"
        alone = [_alone(url, prompt, opts.tokens) for prompt in bench_prompts(STREAMS)]
        runs: dict[str, list[Timed]] = {name: [] for name in MODELS}
        cpu: dict[str, list[list[float]]] = {name: [] for name in MODELS}
        differ: list[str] = []
        before = _tokens_by_instance(metrics)
        for i in range(opts.repeats):
            progress(f"model instances round {i + 1}/{opts.repeats}: 1 and 2 instances x{STREAMS} ...")
            for name in MODELS:
                texts: list[str] = []
                marker = f"{server.model_repository}/{name}/1/model.py"
                start = cpu_seconds(marker)
                runs[name].append(triton_streams(url, STREAMS, opts.tokens, name, texts=texts))
                cpu[name].append([spent - start.get(pid, 0.0) for pid, spent in cpu_seconds(marker).items()])
                differ += [f"{name}: {bench_prompts(STREAMS)[j]!r}" for j, (a, b) in enumerate(zip(texts, alone))
                           if a != b]
        after = _tokens_by_instance(metrics)
    best = {name: best_rate(timed) for name, timed in runs.items()}
    equal = not differ
    one, two = (min(max(run) for run in cpu[name] if run) if any(cpu[name]) else None for name in MODELS)
    report.ratios["instances_2_over_1_16_streams"] = ratio(best["instances_2"], best["instances_1"]) if equal else None
    report.context.update({
        "instances_1_16_tokens_per_s": round(best["instances_1"], 1),
        "instances_2_16_tokens_per_s": round(best["instances_2"], 1),
        "instances_tokens_per_s_runs": {name: [round(t.tokens_per_s, 1) for t in timed]
                                        for name, timed in runs.items()},
        "instances_2_tokens_by_instance": {i: after[i] - before.get(i, 0.0) for i in after},
        "instances_cpu_seconds_per_run": {name: [[round(s, 1) for s in run] for run in runs_cpu]
                                          for name, runs_cpu in cpu.items()},
        "instances_2_over_1_if_a_core_each": rounded(ratio(one, two)),
        "instances_answers_equal_alone": equal,
    })
    if differ:
        report.context["instances_answers_differing"] = differ[:10]


def _alone(url: str, prompt: str, tokens: int) -> str:
    """The answer to ``prompt`` sent alone to the one-instance model."""

    events = stream(url, "instances_1", [prompt], GenerationParams(max_tokens=tokens), Timeouts(network=600.0))
    return next(event.text for event in events if isinstance(event, Reply))
