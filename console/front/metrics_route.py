"""``GET /metrics`` on the front: its own request counts and latencies, and its models' engine figures under vLLM's
names, read from Triton's metrics page at each scrape.

The front's own are ``qaic_front_requests_total`` (by route and status) and ``qaic_front_request_seconds`` (by route,
until the answer's last byte: a stream's whole length), kept by :class:`Measured`, an ASGI middleware, in the
front's own registry. The bundled backend publishes its figures on Triton's metrics page as ``qaic_*`` (see
``backend_model.engine.metrics``) with vLLM's meaning, labelled ``model``; they are passed on as ``vllm:*`` with the
``model_name`` label vLLM uses, of the same types (buckets included), so the tools that read vLLM's page (AIPerf's
server metrics, the Gateway API Inference Extension's endpoint picker, vLLM's Grafana boards) read these unchanged.
``qaic_front_backend_metrics_up`` says whether Triton's page was read.

Where the served models have LoRA adapters, ``vllm:lora_requests_info`` says which, as the Gateway API Inference
Extension's model-server protocol asks (its endpoint picker routes a request for an adapter by it): one gauge whose
value is the time it was made and whose labels are ``max_lora`` (the adapters the served models' batches mix at
once: their ``max_loras`` summed), ``running_lora_adapters`` (the adapters loaded and ready to serve: every
adapter served, as each model holds all of its own) and ``waiting_lora_adapters`` (those with a request sent
through this front that has had no response yet), the lists comma-separated.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterable
from typing import Any

import httpx
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from console.clients import ModelInfo
from console.metrics.names import LORA_INFO, VLLM_NAMES

MODEL_LABEL, VLLM_MODEL_LABEL = "model", "model_name"
DROPPED_LABELS = ("version",)  # Triton's model version: vLLM's page has none (versions are summed)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TIMEOUT_S = 3.0


class FrontMetrics:
    """The front's own counters, in a registry of its own (several fronts may live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("qaic_front_requests", "HTTP requests answered by the front, by route and status.",
                                ["route", "code"], registry=self.registry)
        self.seconds = Histogram("qaic_front_request_seconds",
                                 "Time from a request's arrival to its answer's last byte (a stream's whole length).",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.backend_up = Gauge("qaic_front_backend_metrics_up",
                                "1 when Triton's metrics page was read at this scrape, 0 when it was not.",
                                registry=self.registry)
        self.waiting: Tally[str] = Tally()  # requests sent that have had no response yet, by LoRA adapter


class Measured:
    """ASGI middleware counting each HTTP request by its route's path (``other`` for a path no route serves) and
    status, and timing it to its last byte."""

    def __init__(self, app: Any, metrics: FrontMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "other")
            self.metrics.requests.labels(route, str(status[0])).inc()
            self.metrics.seconds.labels(route).observe(time.perf_counter() - start)


def vllm_families(text: str, served: set[str] | None = None) -> list[Metric]:
    """The backend's figures on a Triton metrics page as vLLM's families (``served``: only these models)."""
    out: dict[str, Metric] = {}
    values: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}  # (family, sample, labels) -> summed
    for family in text_string_to_metric_families(text):
        name = VLLM_NAMES.get(family.name)
        if name is None:
            continue
        out.setdefault(name, Metric(name, family.documentation, family.type))
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k not in DROPPED_LABELS}
            if served is not None and labels.get(MODEL_LABEL) not in served:
                continue
            labels[VLLM_MODEL_LABEL] = labels.pop(MODEL_LABEL, "")
            key = (name, name + sample.name[len(family.name):], tuple(sorted(labels.items())))
            values[key] = values.get(key, 0.0) + sample.value
    for (name, sample_name, pairs), value in values.items():
        out[name].add_sample(sample_name, dict(pairs), value)
    return [m for m in out.values() if m.samples]


def lora_family(infos: Iterable[ModelInfo], waiting: Tally[str]) -> Metric | None:
    """``vllm:lora_requests_info`` of the served models (None: they have no adapter)."""
    infos = list(infos)
    adapters = [name for info in infos for name in info.adapters]
    if not adapters:
        return None
    family = Metric(LORA_INFO, "Running stats on LoRA requests.", "gauge")
    family.add_sample(LORA_INFO, {"max_lora": str(sum(info.max_loras for info in infos)),
                                  "running_lora_adapters": ",".join(adapters),
                                  "waiting_lora_adapters": ",".join(a for a in adapters if waiting[a] > 0)},
                      time.time())
    return family


class _Families:
    """A one-scrape collector of ready-made families."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


async def triton_page(url: str | None) -> str | None:
    """Triton's metrics page, or None when there is none to read (no URL, or it does not answer)."""
    if not url:
        return None
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            response = await client.get(url)
            response.raise_for_status()
    except httpx.HTTPError:
        return None
    return response.text


def gauge_by_model(text: str, family: str) -> dict[str, float]:
    """One gauge of a metrics page, by its ``model`` label (ValueError: not Prometheus text)."""
    return {s.labels[MODEL_LABEL]: s.value for f in text_string_to_metric_families(text) if f.name == family
            for s in f.samples if MODEL_LABEL in s.labels}


def render(metrics: FrontMetrics, text: str | None, served: list[ModelInfo] | None) -> tuple[bytes, str]:
    """The page: the front's own figures, then the ``served`` models' (None: not known) under vLLM's names from the
    upstream's page ``text`` (None: not read), and their adapters'."""
    families: list[Metric] = []
    names = None if served is None else {info.name for info in served}
    try:
        families = vllm_families(text, names) if text is not None else []
    except ValueError:  # not Prometheus text
        text = None
    lora = lora_family(served or (), metrics.waiting)
    families += [lora] if lora is not None else []
    metrics.backend_up.set(0 if text is None else 1)
    backend = CollectorRegistry(auto_describe=False)
    backend.register(_Families(families))
    return generate_latest(metrics.registry) + generate_latest(backend), CONTENT_TYPE_LATEST
