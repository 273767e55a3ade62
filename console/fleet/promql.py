"""The PromQL of the console's figures, written once.

The Grafana board (``assets/grafana/qaic-console.json``), the Prometheus rules (``assets/prometheus/``, written by
:mod:`.rules`) and the fleet view (:mod:`.query`) all ask Prometheus through :func:`expr`, so the three say the same.
A figure is summed over a grouping: per model (:data:`MODEL`) or per model and pod (:data:`POD`: Prometheus's
``instance`` target label, and the ``pod`` label where a Kubernetes scrape adds it), over a ``selector`` (the
board's ``model=~"$model"``) and a rate ``window`` (the board's ``$__rate_interval``, a rule's ``1m``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MODEL = ("model",)
POD = ("model", "instance", "pod")
UP = "up"  # Prometheus's own: 1 when the last scrape of a target worked, 0 when it failed
TRITON = "nv_inference_request_success"  # every tritonserver's metrics page has it

Make = Callable[[tuple[str, ...], str, str], str]  # (by, selector, window) -> PromQL


@dataclass(frozen=True)
class Figure:
    """One figure: its PromQL for a grouping, a selector and a window; its unit; one line about it."""

    name: str
    make: Make
    unit: str
    help: str

    def expr(self, by: tuple[str, ...] = MODEL, selector: str = "", window: str = "1m") -> str:
        return self.make(by, selector, window)


def _sum(by: tuple[str, ...], how: str = "sum") -> str:
    """``sum by (a, b)``; over everything when ``by`` is empty."""
    return f"{how} by ({', '.join(by)})" if by else how


def _series(metric: str, selector: str) -> str:
    return f"{metric}{{{selector}}}" if selector else metric


def rate(metric: str) -> Make:
    return lambda by, sel, w: f"{_sum(by)} (rate({_series(metric, sel)}[{w}]))"


def gauge(metric: str, how: str = "sum") -> Make:
    return lambda by, sel, w: f"{_sum(by, how)} ({_series(metric, sel)})"


def per(numerator: Make, denominator: Make, scale: str = "") -> Make:
    """``numerator / denominator`` (times ``scale``, e.g. ``* 1000``)."""
    return lambda by, sel, w: f"{numerator(by, sel, w)} / {denominator(by, sel, w)}{f' {scale}' if scale else ''}"


def mean(histogram: str, scale: str = "") -> Make:
    """A histogram's mean over the window."""
    return per(rate(f"{histogram}_sum"), rate(f"{histogram}_count"), scale)


def quantile(q: float, histogram: str) -> Make:
    return lambda by, sel, w: (f"histogram_quantile({q}, {_sum(('le', *by))} "
                               f"(rate({_series(f'{histogram}_bucket', sel)}[{w}])))")


def total_of(*metrics: str) -> Make:
    """The rates of several counters with the same labels, added."""
    return lambda by, sel, w: f"{_sum(by)} ({' + '.join(f'rate({_series(m, sel)}[{w}])' for m in metrics)})"


SUCCESS = rate(TRITON)
STEPS = rate("qaic_decode_step_seconds_count")
RESTARTED = "qaic_decode_step_seconds_count"  # counts from a model's first decode step on
SEQUENCES_PER_STEP = per(rate("qaic_decode_step_sequences_total"), STEPS)

FIGURES = {f.name: f for f in (
    Figure("requests_per_s", SUCCESS, "reqps", "Requests Triton answered, per second."),
    Figure("failures_per_s", rate("nv_inference_request_failure"), "reqps", "Requests Triton failed, per second."),
    Figure("tokens_per_s", rate("qaic_generation_tokens_total"), "short", "Tokens the backend generated, per second."),
    Figure("prompt_tokens_per_s", rate("qaic_prompt_tokens_total"), "short", "Prompt tokens prefilled, per second."),
    Figure("triton_queue_ms", per(rate("nv_inference_queue_duration_us"), SUCCESS, "/ 1000"), "ms",
           "Triton's queue time per request."),
    Figure("triton_compute_ms", per(total_of("nv_inference_compute_input_duration_us",
                                             "nv_inference_compute_infer_duration_us",
                                             "nv_inference_compute_output_duration_us"), SUCCESS, "/ 1000"), "ms",
           "Triton's compute time per request (for this backend: execute reading, checking and queueing it)."),
    Figure("running", gauge("qaic_num_requests_running"), "short", "Sequences in the engine's slots."),
    Figure("waiting", gauge("qaic_num_requests_waiting"), "short", "Sequences queued for a free slot."),
    Figure("slots", gauge("qaic_slots"), "short", "Slots the engines decode together."),
    Figure("pending", gauge("nv_inference_pending_request_count"), "short", "Requests pending in Triton."),
    Figure("prefix_reused_per_s", rate("qaic_prefix_reused_tokens_total"), "short",
           "Prompt tokens reused from a slot's cache instead of prefilled, per second."),
    Figure("queue_ms", mean("qaic_request_queue_time_seconds", "* 1000"), "ms",
           "Mean wait before the prefill (slot wait and step wait)."),
    Figure("slot_wait_ms", mean("qaic_request_slot_wait_seconds", "* 1000"), "ms", "Mean wait for a free slot."),
    Figure("step_wait_ms", mean("qaic_request_step_wait_seconds", "* 1000"), "ms",
           "Mean wait with a slot free while the engine finished its current step."),
    Figure("ttft_ms", mean("qaic_time_to_first_token_seconds", "* 1000"), "ms", "Mean time to first token."),
    Figure("tpot_ms", mean("qaic_time_per_output_token_seconds", "* 1000"), "ms", "Mean time per output token."),
    Figure("prefill_chunk_ms", mean("qaic_prefill_chunk_seconds", "* 1000"), "ms", "Mean prefill chunk."),
    Figure("decode_step_ms", mean("qaic_decode_step_seconds", "* 1000"), "ms", "Mean decode step."),
    Figure("vision_encode_ms", mean("qaic_vision_encode_seconds", "* 1000"), "ms",
           "Mean time to decode, preprocess and encode a request's images (a vision-language model's)."),
    Figure("ttft_p50_s", quantile(0.5, "qaic_time_to_first_token_seconds"), "s", "Median time to first token."),
    Figure("ttft_p99_s", quantile(0.99, "qaic_time_to_first_token_seconds"), "s", "p99 time to first token."),
    Figure("slot_wait_p99_s", quantile(0.99, "qaic_request_slot_wait_seconds"), "s", "p99 wait for a slot."),
    Figure("step_wait_p99_s", quantile(0.99, "qaic_request_step_wait_seconds"), "s", "p99 wait for the step."),
    Figure("queue_p99_s", quantile(0.99, "qaic_request_queue_time_seconds"), "s", "p99 wait before the prefill."),
    Figure("tpot_p50_s", quantile(0.5, "qaic_time_per_output_token_seconds"), "s", "Median time per output token."),
    Figure("tpot_p99_s", quantile(0.99, "qaic_time_per_output_token_seconds"), "s", "p99 time per output token."),
    Figure("tokens_per_step", SEQUENCES_PER_STEP, "short", "Sequences decoded per decode step (its mean batch)."),
    Figure("occupancy", per(SEQUENCES_PER_STEP, gauge("qaic_slots")), "percentunit",
           "A decode step's batch as a fraction of the slots."),
    Figure("kv_usage", gauge("qaic_kv_cache_usage_perc", "avg"), "percentunit", "KV cache in use (mean of pods)."),
    Figure("kv_positions", gauge("qaic_kv_cache_used_positions"), "short", "KV cache positions in use."),
    Figure("finished_per_s", lambda by, sel, w: rate("qaic_request_success_total")((*by, "finished_reason"), sel, w),
           "short", "Sequences ended normally, per second, by finished_reason."),
    Figure("cancelled_per_s", rate("qaic_request_cancelled_total"), "short", "Sequences cancelled, per second."),
    Figure("sequence_failures_per_s", rate("qaic_request_failure_total"), "short",
           "Sequences a session error ended, per second."),
    Figure("rejected_per_s", rate("qaic_request_rejected_total"), "short", "Requests refused (bad input), per second."),
    Figure("draft_tokens_per_s", rate("qaic_spec_decode_num_draft_tokens_total"), "short",
           "Tokens speculative decoding's drafts proposed, per second."),
    Figure("accepted_tokens_per_s", rate("qaic_spec_decode_num_accepted_tokens_total"), "short",
           "Draft tokens the model accepted, per second."),
    Figure("ctx_len", gauge("qaic_ctx_len", "max"), "short", "Positions one sequence's context holds."),
    Figure("backend_restarts", lambda by, sel, w: f"{_sum(by)} (resets({_series(RESTARTED, sel)}[{w}]))",
           "short", "Times the backend's counters went back to zero: its stub (or its server) restarted."),
)}

# what the fleet view reads (the consoles' table, console/metrics/figures.py COLUMNS, and the bench's server side)
VIEW = ("requests_per_s", "tokens_per_s", "running", "waiting", "slots", "triton_queue_ms", "triton_compute_ms",
        "queue_ms", "slot_wait_ms", "step_wait_ms", "ttft_ms", "tpot_ms", "prefill_chunk_ms", "decode_step_ms",
        "tokens_per_step", "kv_usage")


def expr(name: str, by: tuple[str, ...] = MODEL, selector: str = "", window: str = "1m") -> str:
    """The PromQL of figure ``name``."""
    return FIGURES[name].expr(by, selector, window)


def down(selector: str = "") -> str:
    """The targets whose last scrape failed, in the jobs where some target exports Triton's metrics (of the series
    ``selector`` picks: a model, a namespace)."""
    return f"{UP} == 0 and on (job) group by (job) ({_series(TRITON, selector)})"
