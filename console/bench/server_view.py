"""The server's side of every bench level: its metrics page scraped before and after the level, the card's telemetry
sampled during it.

Each level's summary gets ``server``: Triton's queue and compute time per request, the backend's slot wait (all slots
taken) and step wait (a slot free, the engine busy with its current step), time to first token, prefill (TTFT less
both waits: the prompt's own prefill), prefill chunk, decode step and time per output token, the mean slot occupancy
of a decode step and its tokens, the tokens/s the server counted (and, for a model of several instances, its tokens by
instance: ``tokens_by_instance``, from the metrics' ``instance`` label); for a streamed level, where the client's TTFT
went (``ttft_breakdown_ms``: queue, a vision-language model's images (``vision_encode_ms``: decoded, preprocessed and
encoded as the request is read), prefill, and the rest: network, reading and tokenising the request, responses).
``note`` says where the figures come from, or why there are none. And ``card``: qaic-util's mean power, peak
temperature, NSP and memory use, and tokens per joule when power is known
("no card" here).
"""

from __future__ import annotations

import socket
import time
import urllib.parse
from typing import Any

from console.metrics import MetricsError, Scrape, Window, scrape
from console.metrics.figures import RATES
from console.metrics.qaic import CardSampler
from console.metrics.watch import locate

from .load import LevelResult, Target

CATCH_UP_S = 5.0  # how long the after-scrape waits for the server's counters to count the level's requests
FINISHED = (("qaic_request_success", "qaic_request_cancelled", "qaic_request_failure"),
            ("nv_inference_request_success", "nv_inference_request_failure"),
            ("vllm:request_success",))
FIGURES = ("triton_queue_ms", "triton_compute_ms", "slot_wait_ms", "step_wait_ms", "ttft_ms", "prefill_ms",
           "prefill_chunk_ms", "decode_step_ms", "tpot_ms", "mean_occupancy", "tokens_per_step", "tokens_per_s",
           "batch_size", "vision_encode_ms")
# Triton's own counters of a model: its inputs (a batch's rows) and its executions (batches run)
BATCHED = ("nv_inference_count", "nv_inference_exec_count")
BREAKDOWN = ("queue", "vision", "prefill", "network")  # "vision": a request's images encoded, where the server says


def _same_place(url: str) -> tuple[str, str]:
    """A metrics URL by address (two names of one host are one server)."""
    parts = urllib.parse.urlsplit(url)
    try:
        host = socket.gethostbyname(parts.hostname or "")
    except OSError:
        host = parts.hostname or ""
    return f"{host}:{parts.port}", parts.path


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


class ServerSide:
    """One target's servers' metrics, before and after each level, and the card meanwhile."""

    def __init__(self, target: Target) -> None:
        self.model = target.model
        self.urls: list[str] = []
        self.notes: list[str] = []
        self.guesses: dict[str, str] = {}  # a page's URL: how it was guessed (said beside it, once)
        seen = set()
        for server in target.servers:
            url, how = locate(server)
            if url is None:
                self.notes.append(how)
            elif _same_place(url) not in seen:
                seen.add(_same_place(url))
                self.urls.append(url)
                if how:
                    self.guesses[url] = how
        self._before: Scrape | None = None
        self._card = CardSampler()

    def _read(self) -> Scrape:
        return Scrape.merge([scrape(url) for url in self.urls])

    def before(self) -> None:
        """Read the pages (and start the card's sampling) as the level begins."""
        self._card.start()
        self._before = None
        if self.urls:
            try:
                self._before = self._read()
            except MetricsError as exc:
                self.notes = [str(exc)]

    def after(self, level: LevelResult, summary: dict[str, Any]) -> dict[str, Any]:
        """The level's ``server`` and ``card`` figures (read once the server has counted its requests)."""
        card = self._card.stop()
        out = {"server": self._server(level, summary), "card": card.as_dict()}
        tokens = sum((r.stats.output_tokens or 0) for r in level.records if r.ok and r.stats is not None)
        energy = card.energy_j(level.duration)
        out["card"]["tokens_per_joule"] = _round(tokens / energy) if energy else None
        return out

    def _server(self, level: LevelResult, summary: dict[str, Any]) -> dict[str, Any]:
        if self._before is None:
            return {"note": "; ".join(self.notes) or "no metrics page"}
        expected = len(level.records)
        deadline = time.monotonic() + CATCH_UP_S
        while True:
            try:
                after = self._read()
            except MetricsError as exc:
                return {"note": str(exc)}
            window = Window(self._before, after, self.model)
            counted = _finished(window)
            if counted is None or counted >= expected or time.monotonic() >= deadline:
                break
            time.sleep(0.1)  # the backend publishes its counts within a second of a sequence's end
        notes = list(self.notes)
        if counted is not None and counted < expected:
            notes.append(f"the server had counted {counted:g} of the level's {expected} requests after "
                         f"{CATCH_UP_S:g} s")
        family = window.present(RATES["tokens_per_s"])
        generated = window.counter(family) if family else None
        where = f"metrics: {after.url}" + (f" ({self.guesses[after.url]})" if after.url in self.guesses else "")
        out = level_figures({**window.figures().values, "batch_size": batch_size(window)}, generated, level.duration,
                            "; ".join([where, *notes]), summary)
        split = window.instances(family) if family else {}  # a model of several instances: each one's tokens
        out["tokens_by_instance"] = " · ".join(f"{i}: {n:g}" for i, n in split.items()) or None
        return out


def level_figures(figures: dict[str, float | None], generated: float | None, duration: float, note: str,
                  summary: dict[str, Any]) -> dict[str, Any]:
    """A level's ``server`` figures from the server's over the level (``generated``: the tokens it counted), and
    where the client's time to first token went."""
    ttft, queue = figures.get("ttft_ms"), figures.get("queue_ms")
    values = {**figures, "prefill_ms": ttft - queue if ttft is not None and queue is not None else None,
              "tokens_per_s": generated / duration if generated is not None and duration > 0 else None}
    out: dict[str, Any] = {"note": note, **{name: _round(values.get(name)) for name in FIGURES}}
    client = summary.get("time_to_first_token", {}).get("avg")
    if client is not None and ttft is not None:
        queued = (figures.get("triton_queue_ms") or 0.0) + (queue or 0.0)
        prefill, vision = values["prefill_ms"] or 0.0, figures.get("vision_encode_ms")
        out["ttft_breakdown_ms"] = {"queue": _round(queued), **({"vision": _round(vision)} if vision else {}),
                                    "prefill": _round(prefill),
                                    "network": _round(max(client - queued - (vision or 0.0) - prefill, 0.0))}
    return out


def batch_size(window: Window) -> float | None:
    """The mean batch Triton ran the model's requests in over the window (inputs per execution: its dynamic batching
    at work); None when the page has not these counters or the model ran nothing."""
    inputs, executions = (window.counter(family) for family in BATCHED)
    return inputs / executions if inputs is not None and executions else None


def _finished(window: Window) -> float | None:
    """Requests (or sequences) the server counted as finished over the window: the first family set it has."""
    for families in FINISHED:
        counts = [window.counter(f) for f in families]
        if any(c is not None for c in counts):
            return sum(c for c in counts if c is not None)
    return None


def csv_columns(level: dict[str, Any]) -> dict[str, Any]:
    """The flat ``server_*`` and ``card_*`` columns of a level's summary row."""
    server, card = level.get("server") or {}, level.get("card") or {}
    row = {f"server_{name}": server.get(name) for name in FIGURES}
    row.update({f"server_ttft_{part}_ms": (server.get("ttft_breakdown_ms") or {}).get(part) for part in BREAKDOWN})
    row.update({f"card_{name}": card.get(name) for name in ("power_w", "temperature_c", "tokens_per_joule")})
    return row
