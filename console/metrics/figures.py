"""Per-model figures of one server between two scrapes (or, from one scrape, since the server started).

Each figure names the metric families that give it: this backend's (``qaic_``), then vLLM's where vLLM has the
figure, so a vLLM server's page gives the same view. Triton's own queue and compute times come from its
``nv_inference_*`` counters (for the bundled backend, Triton's compute is the ``execute`` call that reads, checks
and queues a request; the generation itself shows in the backend's figures).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .scrape import Scrape

RATES = {  # per second over the window
    "requests_per_s": ("nv_inference_request_success", "qaic_request_success", "vllm:request_success"),
    "tokens_per_s": ("qaic_generation_tokens", "vllm:generation_tokens"),
    "prompt_tokens_per_s": ("qaic_prompt_tokens", "vllm:prompt_tokens"),
}
MEANS_MS = {  # histogram means over the window, in ms
    "queue_ms": ("qaic_request_queue_time_seconds", "vllm:request_queue_time_seconds"),  # slot wait + step wait
    "slot_wait_ms": ("qaic_request_slot_wait_seconds", "vllm:request_queue_time_seconds"),  # vLLM: its scheduler's
    "step_wait_ms": ("qaic_request_step_wait_seconds",),  # a slot free, the engine busy with its current step
    "ttft_ms": ("qaic_time_to_first_token_seconds", "vllm:time_to_first_token_seconds"),
    "tpot_ms": ("qaic_time_per_output_token_seconds", "vllm:time_per_output_token_seconds",
                "vllm:inter_token_latency_seconds"),
    "prefill_chunk_ms": ("qaic_prefill_chunk_seconds",),
    "decode_step_ms": ("qaic_decode_step_seconds",),
    "vision_encode_ms": ("qaic_vision_encode_seconds",),  # a request's images, as it is read (before the queue)
}
GAUGES = {  # the value at the later scrape
    "running": ("qaic_num_requests_running", "vllm:num_requests_running"),
    "waiting": ("qaic_num_requests_waiting", "vllm:num_requests_waiting"),
    "slots": ("qaic_slots",),
    "kv_usage": ("qaic_kv_cache_usage_perc", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
TRITON_REQUESTS = "nv_inference_request_success"
TRITON_PER_REQUEST_MS = {  # Triton's cumulative microseconds per successful request
    "triton_queue_ms": ("nv_inference_queue_duration_us",),
    "triton_compute_ms": ("nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
                          "nv_inference_compute_output_duration_us"),
}
DECODE_SEQUENCES, DECODE_STEPS = "qaic_decode_step_sequences", "qaic_decode_step_seconds"

# the table every front end shows: (figure, column label)
COLUMNS = (
    ("requests_per_s", "req/s"),
    ("tokens_per_s", "tok/s"),
    ("slots_used", "slots"),
    ("waiting", "waiting"),
    ("triton_queue_ms", "queue ms"),
    ("triton_compute_ms", "compute ms"),
    ("slot_wait_ms", "slot wait ms"),
    ("step_wait_ms", "step wait ms"),
    ("ttft_ms", "TTFT ms"),
    ("decode_step_ms", "step ms"),
)
HEADER = ("model", *(label for _, label in COLUMNS))


@dataclass(frozen=True)
class Figures:
    """One model's figures over a window of ``seconds`` (None: since the server started) ending ``at``
    (``time.monotonic()``); ``instance``: the one server of a fleet they are of ("": the model as a whole)."""

    model: str
    values: dict[str, float | None]
    seconds: float | None = None
    at: float = 0.0
    instance: str = ""

    @property
    def label(self) -> str:
        """The model, or the model on one instance, as a table names it."""
        return f"{self.model} @ {self.instance}" if self.instance else self.model

    def __getitem__(self, name: str) -> float | None:
        return self.values.get(name)

    @property
    def occupancy(self) -> float | None:
        """The slots in use now, as a fraction of the slots."""
        running, slots = self["running"], self["slots"]
        return running / slots if running is not None and slots else None


def _delta(before: float | None, after: float | None) -> float | None:
    """A counter's growth; None when it is missing or went back (the server restarted)."""
    if after is None:
        return None
    if before is None:
        return after
    return after - before if after >= before else None


def _ratio(numerator: float | None, denominator: float | None, scale: float = 1.0) -> float | None:
    return numerator / denominator * scale if numerator is not None and denominator else None


class Window:
    """The change of one model's metrics from ``before`` (None: from zero) to ``after``."""

    def __init__(self, before: Scrape | None, after: Scrape, model: str) -> None:
        self.before, self.after, self.model = before, after, model

    def present(self, families: Sequence[str]) -> str | None:
        """The first of ``families`` the later page has for this model (the figure is read from that one only)."""
        return next((f for f in families if self.after.value(f, self.model) is not None
                     or self.after.histogram(f, self.model) is not None), None)

    def counter(self, family: str) -> float | None:
        earlier = self.before.value(family, self.model) if self.before else None
        return _delta(earlier, self.after.value(family, self.model))

    def instances(self, family: str) -> dict[str, float]:
        """A counter's change for each instance of the model (its ``instance`` label: one per device group), {}
        when it has none."""
        earlier = self.before.instances(family, self.model) if self.before else {}
        return {i: value - earlier.get(i, 0.0) for i, value in self.after.instances(family, self.model).items()}

    def histogram(self, family: str) -> tuple[float, float] | None:
        """(sum, count) over the window."""
        later = self.after.histogram(family, self.model)
        if later is None:
            return None
        earlier = (self.before.histogram(family, self.model) if self.before else None) or (0.0, 0.0)
        total, count = _delta(earlier[0], later[0]), _delta(earlier[1], later[1])
        return None if total is None or count is None else (total, count)

    def mean_ms(self, family: str) -> float | None:
        pair = self.histogram(family)
        return _ratio(pair[0], pair[1], 1000.0) if pair else None

    def figures(self) -> Figures:
        seconds = self.after.at - self.before.at if self.before else None
        values: dict[str, float | None] = {}
        for name, families in RATES.items():
            family = self.present(families)
            values[name] = _ratio(self.counter(family), seconds) if family and seconds else None
        for name, families in MEANS_MS.items():
            family = self.present(families)
            values[name] = self.mean_ms(family) if family else None
        for name, families in GAUGES.items():
            family = self.present(families)
            values[name] = self.after.value(family, self.model) if family else None
        requests = self.counter(TRITON_REQUESTS)
        for name, families in TRITON_PER_REQUEST_MS.items():
            parts = [self.counter(f) for f in families]
            total = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
            values[name] = _ratio(total, requests, 1e-3)
        steps = self.histogram(DECODE_STEPS)
        values["tokens_per_step"] = _ratio(self.counter(DECODE_SEQUENCES), steps[1] if steps else None)
        values["mean_occupancy"] = _ratio(values["tokens_per_step"], values["slots"])
        values["decode_steps"] = steps[1] if steps else None
        return Figures(self.model, values, seconds, self.after.at)


def window(before: Scrape | None, after: Scrape) -> list[Figures]:
    """Every model's figures from ``before`` to ``after``."""
    return [Window(before, after, model).figures() for model in after.models()]


def cell(figures: Figures, name: str) -> str:
    """A figure as a table shows it."""
    if name == "slots_used":
        running, slots = figures["running"], figures["slots"]
        if running is None:
            return "-"
        return f"{running:g}/{slots:g}" if slots else f"{running:g}"
    number = figures[name]
    if number is None:
        return "-"
    if name == "kv_usage":
        return f"{number:.0%}"
    if name in GAUGES:  # counts of sequences
        return f"{number:g}"
    return f"{number:.1f}" if abs(number) < 1000 else f"{number:,.0f}"


def rows(figures: Sequence[Figures]) -> list[list[str]]:
    """The table's rows (:data:`HEADER` is its header)."""
    return [[f.label, *(cell(f, name) for name, _ in COLUMNS)] for f in figures]
