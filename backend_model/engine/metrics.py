"""The backend's own metrics, on Triton's metrics port beside its ``nv_inference_*``.

The engine tells a :class:`Meter` what happened at a few points of its loop (a sequence queued, admitted to a
slot, prefilled; a prefill chunk or a decode step ran; a sequence ended). The base meter notes nothing (engines
run in-process); a :class:`Recorder` notes numbers only, so the engine never waits; a :class:`Publisher` thread
hands them to Triton's custom metrics API (``pb_utils.MetricFamily``, Triton 23.05 on; histograms later), each
second and as soon as a sequence ends. Every update is a round trip to the server process (0.1-0.5 ms
measured), which is why it never happens on the engine thread.

Names follow Prometheus conventions, and vLLM's where vLLM has the figure (``qaic_`` where vLLM says
``vllm:``), so dashboards carry over. Counts are of sequences (a request's prompts). Every metric is labelled
``model`` and ``version``, as Triton's own are. Standard library only; Python 3.8.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any, Callable, NamedTuple, Tuple

COUNTER, GAUGE, HISTOGRAM = "COUNTER", "GAUGE", "HISTOGRAM"
PREFIX = "qaic_"
INTERVAL_S = 1.0  # the publisher's pace when nothing ends sooner
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
REQUEST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
SUCCESS_REASONS = ("eos", "stop", "length", "ctx_len")

Log = Callable[[str, str], None]  # typing names: evaluated at run time, so 3.8-safe
Key = Tuple[str, str]  # (metric, the value of its own label (Spec.label) or "")


class Spec(NamedTuple):
    """One metric: its name, kind, HELP text, (histograms) buckets and the label of its own it may carry."""

    name: str
    kind: str
    help: str
    buckets: tuple[float, ...] = ()
    label: str = ""


METRICS = (
    Spec("qaic_num_requests_running", GAUGE, "Sequences (prompts) in the engine's slots."),
    Spec("qaic_num_requests_waiting", GAUGE, "Sequences (prompts) queued for a free slot."),
    Spec("qaic_slots", GAUGE, "Slots the engine decodes together (full_batch_size, else batch_size)."),
    Spec("qaic_ctx_len", GAUGE, "Positions one sequence's context holds, prompt and reply (vLLM's max_model_len)."),
    Spec("qaic_kv_cache_used_positions", GAUGE, "KV cache positions holding a live sequence's tokens."),
    Spec("qaic_kv_cache_usage_perc", GAUGE, "Fraction of the KV cache (slots x ctx_len positions) in use; 1 = full."),
    Spec("qaic_prompt_tokens_total", COUNTER,
         "Prompt tokens, those a slot's cache kept from an earlier prompt included (not prefilled again)."),
    Spec("qaic_prefix_reused_tokens_total", COUNTER,
         "Prompt tokens whose cache a slot kept from an earlier prompt with the same start: not prefilled again."),
    Spec("qaic_generation_tokens_total", COUNTER, "Tokens generated (the first one of each sequence included)."),
    Spec("qaic_spec_decode_num_draft_tokens_total", COUNTER,
         "Tokens drafted by prompt lookup and fed to decode steps (speculative decoding)."),
    Spec("qaic_spec_decode_num_accepted_tokens_total", COUNTER,
         "Drafted tokens the sequences chose: tokens made beyond one a decode step (divided by the drafted: the "
         "acceptance rate)."),
    Spec("qaic_decode_step_sequences_total", COUNTER,
         "Sequences decoded, summed over the decode steps (divided by the steps: the mean batch of a step)."),
    Spec("qaic_request_success_total", COUNTER, "Sequences that ended normally, by finished_reason.",
         label="finished_reason"),
    Spec("qaic_lora_requests_total", COUNTER, "Sequences (prompts) queued for each LoRA adapter, by lora_name (the "
         "base model's are not counted).", label="lora_name"),
    Spec("qaic_max_loras", GAUGE, "LoRA adapters one batch mixes (0: the model serves none)."),
    Spec("qaic_request_cancelled_total", COUNTER, "Sequences cancelled by their client."),
    Spec("qaic_request_failure_total", COUNTER, "Sequences ended by a session error."),
    Spec("qaic_request_rejected_total", COUNTER, "Requests refused before they ran (bad input)."),
    Spec("qaic_request_queue_time_seconds", HISTOGRAM,
         "Time a sequence waited before its prefill began: the slot wait and the step wait.", REQUEST_BUCKETS),
    Spec("qaic_request_slot_wait_seconds", HISTOGRAM, "Time a sequence waited for a free slot.", REQUEST_BUCKETS),
    Spec("qaic_request_step_wait_seconds", HISTOGRAM,
         "Time a sequence waited, a slot free for it, for the engine's current step to end (another prompt's "
         "prefill or a decode step).", REQUEST_BUCKETS),
    Spec("qaic_time_to_first_token_seconds", HISTOGRAM,
         "From a sequence's arrival at the engine until its first token leaves it (its wait, then its own "
         "prefill).", REQUEST_BUCKETS),
    Spec("qaic_time_per_output_token_seconds", HISTOGRAM,
         "A sequence's mean time per output token after the first.", TOKEN_BUCKETS),
    Spec("qaic_vision_encode_seconds", HISTOGRAM,
         "A request's images decoded, preprocessed by the model's processor and encoded by its vision encoder, as "
         "the request is read (before its prompt is queued: not in qaic_time_to_first_token_seconds).",
         REQUEST_BUCKETS),
    Spec("qaic_prefill_chunk_seconds", HISTOGRAM, "One prefill chunk run on the session.", STEP_BUCKETS),
    Spec("qaic_decode_step_seconds", HISTOGRAM, "One decode step (every slot) run on the session.", STEP_BUCKETS),
)
SPECS = {spec.name: spec for spec in METRICS}


class Meter:
    """What the engine reports; this one notes nothing (an engine run in-process)."""

    def queued(self, seqs: list[Any]) -> None:
        """Sequences entered the engine's queue."""

    def slot_free(self, seqs: list[Any]) -> None:
        """A free slot waits for each of these queued sequences: now they wait only for the engine's current step."""

    def admitted(self, seqs: list[Any]) -> None:
        """Sequences got a slot."""

    def prefill_chunk(self, seconds: float) -> None:
        """One prefill chunk ran."""

    def prefilled(self, seqs: list[Any]) -> None:
        """A prefill put these sequences' prompts in the cache; their first tokens leave the engine now."""

    def decode_step(self, seconds: float, seqs: list[Any]) -> None:
        """One decode step ran for ``seqs`` (one token each)."""

    def speculated(self, drafted: int, accepted: int) -> None:
        """A decode step fed ``drafted`` drafted tokens, of which the sequences chose ``accepted`` (tokens made
        beyond one a sequence)."""

    def vision_encoded(self, seconds: float) -> None:
        """A request's images were decoded, preprocessed and encoded in ``seconds``."""

    def finished(self, seq: Any) -> None:
        """A sequence ended (its ``finish_reason`` says how)."""

    def rejected(self) -> None:
        """A request was refused before it ran."""


class Recorder(Meter):
    """Notes what the engine reports (numbers only, under a lock) until :meth:`take` hands them over."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._counts: dict[Key, float] = defaultdict(float)
        self._observed: list[tuple[str, float]] = []
        self._arrived: dict[int, float] = {}
        self._free: dict[int, float] = {}  # when a free slot began to wait for the sequence
        self._first: dict[int, float] = {}
        self.ended = threading.Event()  # set when a sequence ends: its counts should leave soon

    def _count(self, name: str, amount: float, reason: str = "") -> None:
        self._counts[(name, reason)] += amount

    def queued(self, seqs: list[Any]) -> None:
        now = self.clock()
        with self._lock:
            for seq in seqs:
                self._arrived[seq.id] = now
                if seq.params.lora_name:
                    self._count("qaic_lora_requests_total", 1, seq.params.lora_name)

    def slot_free(self, seqs: list[Any]) -> None:
        now = self.clock()
        with self._lock:
            for seq in seqs:
                self._free[seq.id] = now

    def admitted(self, seqs: list[Any]) -> None:
        now = self.clock()
        with self._lock:
            for seq in seqs:
                if seq.filler or seq.id not in self._arrived:
                    continue
                arrived = self._arrived[seq.id]
                free = self._free.pop(seq.id, now)
                self._observed += [("qaic_request_queue_time_seconds", now - arrived),
                                   ("qaic_request_slot_wait_seconds", free - arrived),
                                   ("qaic_request_step_wait_seconds", now - free)]

    def prefill_chunk(self, seconds: float) -> None:
        with self._lock:
            self._observed.append(("qaic_prefill_chunk_seconds", seconds))

    def prefilled(self, seqs: list[Any]) -> None:
        now = self.clock()
        with self._lock:
            for seq in seqs:
                if seq.filler or seq.id not in self._arrived or seq.id in self._first:
                    continue
                self._first[seq.id] = now
                self._count("qaic_prompt_tokens_total", len(seq.prompt_ids))
                self._count("qaic_prefix_reused_tokens_total", seq.reused)
                self._count("qaic_generation_tokens_total", 1)
                self._observed.append(("qaic_time_to_first_token_seconds", now - self._arrived[seq.id]))
        for seq in seqs:  # ended with their first token (held back by finished() until now)
            if seq.finished:
                self.finished(seq)

    def decode_step(self, seconds: float, seqs: list[Any]) -> None:
        real = sum(not seq.filler for seq in seqs)
        with self._lock:
            self._observed.append(("qaic_decode_step_seconds", seconds))
            self._count("qaic_generation_tokens_total", real)
            self._count("qaic_decode_step_sequences_total", real)

    def speculated(self, drafted: int, accepted: int) -> None:
        with self._lock:
            self._count("qaic_spec_decode_num_draft_tokens_total", drafted)
            self._count("qaic_spec_decode_num_accepted_tokens_total", accepted)
            self._count("qaic_generation_tokens_total", accepted)

    def vision_encoded(self, seconds: float) -> None:
        with self._lock:
            self._observed.append(("qaic_vision_encode_seconds", seconds))

    def finished(self, seq: Any) -> None:
        if seq.filler:
            return
        now = self.clock()
        reason = seq.finish_reason or "error"
        with self._lock:
            if seq.tokens and seq.id not in self._first and seq.id in self._arrived:
                return  # it ended with its first token, still in its prefill step: prefilled() counts it
            self._free.pop(seq.id, None)  # cancelled in the queue
            if self._arrived.pop(seq.id, None) is None:  # already counted
                return
            first = self._first.pop(seq.id, None)
            if first is not None and len(seq.tokens) > 1:
                self._observed.append(("qaic_time_per_output_token_seconds", (now - first) / (len(seq.tokens) - 1)))
            if reason in SUCCESS_REASONS:
                self._count("qaic_request_success_total", 1, reason)
            else:
                self._count("qaic_request_cancelled_total" if reason == "cancelled" else "qaic_request_failure_total",
                            1)
        self.ended.set()

    def rejected(self) -> None:
        with self._lock:
            self._count("qaic_request_rejected_total", 1)
        self.ended.set()

    def take(self) -> tuple[dict[Key, float], list[tuple[str, float]]]:
        """The counts and observations noted since the last call."""
        with self._lock:
            counts, self._counts = dict(self._counts), defaultdict(float)
            observed, self._observed = self._observed, []
        return counts, observed


def engine_gauges(engine: Any) -> dict[str, float]:
    """The gauges, read from the engine's slots and queue (a glance from another thread: close enough)."""
    dims = engine.dims
    live = [s for s in list(engine.slots) if s is not None and not s.finished]
    used = sum(len(s.prompt_ids) + len(s.tokens) for s in live)
    return {
        "qaic_num_requests_running": float(sum(not s.filler for s in live)),
        "qaic_num_requests_waiting": float(len(engine.queue)),
        "qaic_slots": float(dims.slots),
        "qaic_ctx_len": float(dims.ctx_len),
        "qaic_kv_cache_used_positions": float(used),
        "qaic_kv_cache_usage_perc": used / float(dims.slots * dims.ctx_len),
        "qaic_max_loras": float(getattr(engine, "max_loras", 0)),
    }


class Publisher:
    """Creates the metrics on the server and keeps them up to date from a :class:`Recorder`, in its own thread."""

    def __init__(self, pb_utils: Any, recorder: Recorder, gauges: Callable[[], dict[str, float]],
                 labels: dict[str, str], log: Log, interval: float = INTERVAL_S, adapters: tuple[str, ...] = ()
                 ) -> None:
        """``adapters``: the LoRA adapters' names, whose series exist from the start."""
        self.recorder, self.gauges, self.log, self.interval = recorder, gauges, log, interval
        family = pb_utils.MetricFamily
        kinds = {COUNTER: family.COUNTER, GAUGE: family.GAUGE, HISTOGRAM: getattr(family, "HISTOGRAM", None)}
        self._families: dict[str, Any] = {}
        self._metrics: dict[Key, Any] = {}
        self._labels = dict(labels)
        self._last: dict[str, float] = {}
        self._specs: dict[str, Spec] = {}  # the metrics this server can have
        for spec in METRICS:
            if kinds[spec.kind] is None:
                continue
            self._families[spec.name] = family(name=spec.name, description=spec.help, kind=kinds[spec.kind])
            self._specs[spec.name] = spec
        if kinds[HISTOGRAM] is None:
            log("info", f"{labels.get('model', '')}: this Triton has no histogram metrics: the backend's timings "
                        "(queue, time to first token, per token, prefill and decode steps) are not exported")
        for spec in METRICS:  # every series exists from the start, at zero
            if spec.name in self._families and not spec.label:
                self._metric(spec.name)
        for reason in SUCCESS_REASONS:
            self._metric("qaic_request_success_total", reason)
        for adapter in adapters:
            self._metric("qaic_lora_requests_total", adapter)
        self.flush()  # the gauges hold the engine's values from the model's load on
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=f"{labels.get('model', 'model')}-metrics",
                                        daemon=True)
        self._thread.start()

    def _metric(self, name: str, value: str = "") -> Any:
        """The series of ``name`` (``value``: its own label's, Spec.label)."""
        key = (name, value)
        if key not in self._metrics:
            spec = self._specs[name]
            labels = dict(self._labels, **({spec.label: value} if value else {}))
            family = self._families[name]
            self._metrics[key] = (family.Metric(labels=labels, buckets=list(spec.buckets)) if spec.kind == HISTOGRAM
                                  else family.Metric(labels=labels))
        return self._metrics[key]

    def _loop(self) -> None:
        while not self._stopping:
            self.recorder.ended.wait(self.interval)
            self.recorder.ended.clear()
            try:
                self.flush()
            except Exception as exc:  # a metric update failed: the model serves on; say it, keep trying
                self.log("warn", f"{self._labels.get('model', '')}: updating the metrics failed: "
                                 f"{type(exc).__name__}: {exc}")

    def flush(self) -> None:
        """Hand everything noted so far to the server."""
        counts, observed = self.recorder.take()
        for (name, reason), amount in counts.items():
            if amount and name in self._families:
                self._metric(name, reason).increment(amount)
        for name, value in observed:
            if name in self._families:
                self._metric(name).observe(value)
        for name, value in self.gauges().items():
            if self._last.get(name) != value:
                self._metric(name).set(value)
                self._last[name] = value

    def stop(self) -> None:
        """Publish what is left. The series are not deleted: when a model is reloaded (its config changed, e.g.
        its adapters), its new instances start beside the old ones with the same labels and Triton hands them the
        same series, so deleting them as the old ones finalize would free what the new ones still update (the
        server then crashes)."""
        self._stopping = True
        self.recorder.ended.set()
        self._thread.join(timeout=10.0)
        self.flush()


def publish(pb_utils: Any, engine: Any, labels: dict[str, str], log: Log) -> Publisher | None:
    """Give ``engine`` a :class:`Recorder` and publish it through ``pb_utils``; None (said once) on a Triton older
    than the custom metrics API."""
    if getattr(pb_utils, "MetricFamily", None) is None:
        log("info", f"{labels.get('model', '')}: this Triton has no custom metrics API (23.05 on): the backend runs "
                    "without its own metrics")
        return None
    recorder = Recorder()
    publisher = Publisher(pb_utils, recorder, lambda: engine_gauges(engine), labels, log,
                          adapters=tuple(getattr(engine, "adapters", ())))
    engine.meter = recorder
    return publisher
