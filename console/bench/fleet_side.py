"""The server side of each bench level from a Prometheus that scrapes every server behind the URL loaded (a load
balancer's, a Kubernetes Service's): the same ``server`` figures as one server's page gives
(:mod:`.server_view`), summed over the fleet, with each instance's tokens/s and the servers that are down.

After a level it waits until Prometheus has scraped every live server of the model since the level ended (and the
backend published its counts), then asks for the figures over the level's window at that instant. The tokens the
servers generated are their counters' values then less their values when the level began (two instant queries),
not a rate times the window: Prometheus extrapolates a rate to its window's edges, which a short level would feel.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from console.fleet import promql
from console.fleet.query import Prometheus, PrometheusError, instance, read
from console.metrics.qaic import CardReading

from .load import LevelResult, Target
from .server_view import level_figures

PUBLISH_S = 1.0  # the backend publishes its counts within a second of a sequence's end
CATCH_UP_S = 20.0  # how long to wait for Prometheus to scrape every server after a level
NAMES = ("tokens_per_s", "requests_per_s", "triton_queue_ms", "triton_compute_ms", "queue_ms", "slot_wait_ms",
         "step_wait_ms", "ttft_ms", "tpot_ms", "prefill_chunk_ms", "decode_step_ms", "tokens_per_step", "occupancy")
CARD = "no card reading: a fleet's cards are not read by the bench"
GENERATED = "qaic_generation_tokens_total"


class FleetSide:
    """One target's servers' figures from Prometheus, over each level."""

    def __init__(self, target: Target, address: str) -> None:
        self.model = target.model
        self.prometheus = Prometheus(address)
        self.selector = f"model={json.dumps(target.model)}"
        self._start = time.time()

    def before(self) -> None:
        self._start = time.time()

    def after(self, level: LevelResult, summary: dict[str, Any]) -> dict[str, Any]:
        card = CardReading(CARD).as_dict()
        card["tokens_per_joule"] = None
        return {"server": self._server(level, summary), "card": card}

    def _scraped_after(self, moment: float) -> float:
        """The instant by which Prometheus has scraped every live server of the model after ``moment``."""
        deadline = time.monotonic() + CATCH_UP_S
        oldest = f"min(timestamp({promql.TRITON}{{{self.selector}}}))"
        while True:
            found = self.prometheus.query(oldest)
            if found and found[0].value is not None and found[0].value >= moment:
                return found[0].value
            if time.monotonic() >= deadline:
                raise PrometheusError(f"Prometheus at {self.prometheus.url} had not scraped every server of "
                                      f"{self.model} {CATCH_UP_S:g} s after the level")
            time.sleep(0.2)  # Prometheus scrapes at its own interval

    def _generated(self, at: float) -> dict[str, float]:
        """Each server's count of the model's generated tokens at ``at`` (its last scrape by then)."""
        expr = f"sum by ({', '.join(promql.POD)}) ({GENERATED}{{{self.selector}}})"
        return {instance(s.labels): s.value for s in self.prometheus.query(expr, at) if s.value is not None}

    def _server(self, level: LevelResult, summary: dict[str, Any]) -> dict[str, Any]:
        try:
            at = self._scraped_after(time.time() + PUBLISH_S)
            seconds = math.ceil(at - self._start)
            fleet = read(self.prometheus, f"{seconds}s", self.selector, at, NAMES)
            before, after = self._generated(self._start), self._generated(at)
        except PrometheusError as exc:
            return {"note": str(exc)}
        total = next((f for f in fleet.figures if f.model == self.model and not f.instance), None)
        if total is None:
            return {"note": f"Prometheus at {self.prometheus.url} has no figures of {self.model}"}
        # a counter that went back (its server restarted) counts from zero
        generated = {name: count - before.get(name, 0.0) if count >= before.get(name, 0.0) else count
                     for name, count in after.items()}

        def tokens_per_s(name: str) -> float | None:  # the server's tokens over the level's time
            return round(generated[name] / level.duration, 3) if name in generated and level.duration > 0 else None

        instances = {f.instance: {"tokens_per_s": tokens_per_s(f.instance),
                                  "requests": round(f["requests_per_s"] * seconds, 1)
                                  if f["requests_per_s"] is not None else None}
                     for f in fleet.figures if f.model == self.model and f.instance}
        note = (f"metrics: Prometheus {self.prometheus.url} ({len(instances)} instances, over the {seconds} s "
                f"window ending {time.strftime('%H:%M:%S', time.localtime(at))})"
                + (f"; down (up == 0): {', '.join(fleet.down)}" if fleet.down else ""))
        out = level_figures({**total.values, "mean_occupancy": total["occupancy"]},
                            sum(generated.values()) if generated else None, level.duration, note, summary)
        return {**out, "instances": instances, "down": list(fleet.down)}
