"""The fleet as a Prometheus that scrapes every server sees it: each model's figures in total and per instance
(Prometheus's ``instance`` target label, or the ``pod`` label where Kubernetes scrapes add it, shown as it is),
and the targets whose last scrape failed. Asked through Prometheus's HTTP API (``/api/v1/query``) with the PromQL
of :mod:`.promql`; every query of one read is evaluated at the same instant.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import httpx

from console.metrics.figures import Figures

from . import promql

TIMEOUT_S = 5.0
WINDOW = "1m"


class PrometheusError(Exception):
    """Prometheus cannot be asked, or refused a query (one line)."""


def api_url(address: str) -> str:
    """``host:port`` or a URL -> Prometheus's base URL."""
    address = address.strip().rstrip("/")
    return address if "://" in address else f"http://{address}"


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float | None  # None: NaN (e.g. a mean over no requests)


class Prometheus:
    """A Prometheus's query API."""

    def __init__(self, address: str, timeout: float = TIMEOUT_S) -> None:
        self.url = api_url(address)
        self._client = httpx.Client(base_url=self.url, timeout=timeout, trust_env=False)

    def query(self, expr: str, at: float | None = None) -> list[Sample]:
        """An instant query (at ``at``, Unix seconds; default now): its vector's samples."""
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        try:
            answer = self._client.get("/api/v1/query", params=params)
            body = answer.json()
        except httpx.HTTPError as exc:
            raise PrometheusError(f"no Prometheus at {self.url} ({type(exc).__name__}: {exc})") from None
        except ValueError:
            raise PrometheusError(f"{self.url} answered HTTP {answer.status_code}, not Prometheus's JSON") from None
        if body.get("status") != "success":
            raise PrometheusError(f"Prometheus at {self.url} refused a query: {body.get('error', body)}")
        data = body["data"]
        if data.get("resultType") != "vector":
            raise PrometheusError(f"Prometheus at {self.url} answered a {data.get('resultType')}, not a vector")
        return [Sample(r["metric"], _number(r["value"][1])) for r in data["result"]]

    def close(self) -> None:
        self._client.close()


def _number(text: str) -> float | None:
    value = float(text)
    return None if math.isnan(value) or math.isinf(value) else value


def instance(labels: dict[str, str]) -> str:
    """What names a server: its pod where Kubernetes says it, else Prometheus's target."""
    return labels.get("pod") or labels.get("instance", "?")


@dataclass(frozen=True)
class Fleet:
    """One read: per model its totals (``instance`` ""), then per instance; the targets that are down."""

    figures: tuple[Figures, ...]
    down: tuple[str, ...]
    at: float


def read(prometheus: Prometheus, window: str = WINDOW, selector: str = "", at: float | None = None,
         names: tuple[str, ...] = promql.VIEW) -> Fleet:
    """The fleet's figures over ``window`` ending ``at`` (default now)."""
    at = time.time() if at is None else at
    values: dict[tuple[str, str], dict[str, float | None]] = {}
    for name in names:
        for by in (promql.MODEL, promql.POD):
            for sample in prometheus.query(promql.expr(name, by, selector, window), at):
                model = sample.labels.get("model", "?")
                key = (model, instance(sample.labels) if by == promql.POD else "")
                values.setdefault(key, dict.fromkeys(names))[name] = sample.value
    down = tuple(sorted(instance(s.labels) for s in prometheus.query(promql.down(selector), at)))
    seconds = _seconds(window)
    figures = tuple(Figures(model, row, seconds, at, where) for (model, where), row in sorted(values.items()))
    return Fleet(figures, down, at)


def _seconds(window: str) -> float | None:
    """A PromQL duration of one unit (``90s``, ``1m``) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in sorted(units, key=len, reverse=True):
        if window.endswith(unit) and window[: -len(unit)].replace(".", "", 1).isdigit():
            return float(window[: -len(unit)]) * units[unit]
    return None
