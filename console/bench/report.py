"""The project's performance report (``qaic-console bench report``, ``make bench``).

Measured in one run on the embedded model, side by side, as ratios (absolute figures are context):

* ``triton_over_inprocess`` (P1): tokens/s of one gRPC stream through Triton ÷ the same engine
  in this process (target >= 0.95);
* ``scaling_8_over_1`` (P2): aggregate tokens/s of 8 concurrent streams ÷ 1 stream, through Triton
  (target >= 3);
* ``engine_over_hf_generate``: the engine's single stream ÷ transformers ``generate`` (fp32, bs1) on
  the same weights, for fp32, int8 and int4 (target >= 5), and each precision's 8-sequence aggregate ÷ its
  single stream (target >= 3);
* ``loop_overhead_ms``: host time per decode step of the loop with a zero-cost session at
  full_batch_size 16 (target <= 0.3 ms);
* ``client_tokens_per_s``: streamed tokens/s the console client takes in, every token arriving,
  from a server whose model costs nothing (target >= 4,000).

Runs alternate so that a neighbour's load hits both sides of a ratio alike, and each side is the
best of ``repeats`` runs (on a shared machine a neighbour only ever slows a run down).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from console.clients import GenerationParams, Reply, Timeouts, stream

from .capacity import run_together
from .engine import BENCH_PROMPTS, Timed, hf_generate, loop_overhead_ms, run_engine

STREAM_MODEL = "smollm2_decoupled"
TARGETS = {  # key -> (comparison, threshold)
    "triton_over_inprocess": (">=", 0.95),
    "scaling_8_over_1": (">=", 3.0),
    "engine_over_hf_generate": (">=", 5.0),
    "engine_int8_over_hf_generate": (">=", 5.0),
    "engine_int4_over_hf_generate": (">=", 5.0),
    "engine_fp32_scaling_8_over_1": (">=", 3.0),
    "engine_int8_scaling_8_over_1": (">=", 3.0),
    "engine_int4_scaling_8_over_1": (">=", 3.0),
    "loop_overhead_ms": ("<=", 0.3),
    "client_tokens_per_s": (">=", 4000.0),
}

Progress = Callable[[str], None]


@dataclass
class ReportOptions:
    tokens: int = 64  # generated tokens per measurement
    repeats: int = 3  # runs per measurement, the best one counts
    capacity_streams: int = 4
    capacity_tokens: int = 2000
    overhead_slots: int = 16
    precisions: tuple[str, ...] = ("fp32", "int8", "int4")


@dataclass
class Report:
    """Ratios (the verdicts) and the absolute figures behind them."""

    ratios: dict[str, float | None] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)

    def passed(self, key: str) -> bool | None:
        value, (op, threshold) = self.ratios.get(key), TARGETS[key]
        if value is None:
            return None
        return value >= threshold if op == ">=" else value <= threshold

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: _round(v) for k, v in self.ratios.items()}
        out["targets"] = {k: f"{op} {t:g}" for k, (op, t) in TARGETS.items() if k in self.ratios}
        out["passed"] = {k: self.passed(k) for k in self.ratios}
        out["context"] = self.context
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4 if abs(value) < 10 else 1)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``; None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def best_rate(runs: list[Timed]) -> float:
    """The fastest run's tokens/s."""
    return max(r.tokens_per_s for r in runs)


# --------------------------------------------------------------------------- through Triton


def triton_streams(url: str, concurrency: int, tokens: int, model: str = STREAM_MODEL,
                   timeout: float = 600.0) -> Timed:
    """``concurrency`` concurrent console streams of ``tokens`` tokens: total tokens over wall time."""
    prompts = (BENCH_PROMPTS * (concurrency // len(BENCH_PROMPTS) + 1))[:concurrency]
    counts = [0] * concurrency
    errors: list[str] = []
    barrier = threading.Barrier(concurrency + 1)

    def one(i: int) -> None:
        call = stream(url, model, [prompts[i]], GenerationParams(max_tokens=tokens), Timeouts(network=timeout))
        barrier.wait(timeout)
        for event in call:
            if isinstance(event, Reply):
                counts[i] = event.stats.output_tokens or 0
        if not counts[i]:
            errors.append(f"stream {i} got no reply")

    seconds, _ = run_together(one, concurrency, barrier, timeout)
    if errors:
        raise RuntimeError("; ".join(errors))
    return Timed(sum(counts), seconds)


# --------------------------------------------------------------------------- the sections


def _embedded_settings(precision: str) -> Any:
    from backend_model import compile_config
    from backend_model.build import BackendSettings
    from repo_gen.samples import EMBEDDED_KV

    return BackendSettings(precision=precision, compile=compile_config.validate(EMBEDDED_KV))


def _build(precision: str) -> Any:
    from backend_model.build import build_engine

    engine, _ = build_engine(_embedded_settings(precision), progress=lambda m: None)
    run_engine(engine, 1, 4)  # warm-up
    return engine


def triton_section(report: Report, opts: ReportOptions, progress: Progress) -> None:
    """P1 and P2 on one embedded server, alternating with the in-process engine."""
    from console.server.embedded import embedded_server

    engine = _build("fp32")
    with embedded_server(STREAM_MODEL, progress) as server:
        url = server.grpc_url
        triton_streams(url, 1, 4)  # warm-up
        inproc, triton1, triton8 = [], [], []
        for i in range(opts.repeats):
            progress(f"P1/P2 round {i + 1}/{opts.repeats}: in-process, Triton x1, Triton x8 ...")
            inproc.append(run_engine(engine, 1, opts.tokens))
            triton1.append(triton_streams(url, 1, opts.tokens))
            triton8.append(triton_streams(url, 8, opts.tokens))
    one, eight, local = best_rate(triton1), best_rate(triton8), best_rate(inproc)
    report.ratios["triton_over_inprocess"] = ratio(one, local)
    report.ratios["scaling_8_over_1"] = ratio(eight, one)
    report.context.update(inprocess_fp32_tokens_per_s=round(local, 1), triton_1_stream_tokens_per_s=round(one, 1),
                          triton_8_streams_tokens_per_s=round(eight, 1))


def engine_section(report: Report, opts: ReportOptions, progress: Progress) -> None:
    """The engine at 1 and 8 sequences per precision vs transformers generate (fp32, bs1)."""
    from backend_model.models import load_pretrained

    model, tokenizer = load_pretrained("embedded", progress)
    hf_generate(model, tokenizer, 4)  # warm-up
    engines = {p: _build(p) for p in opts.precisions}
    hf: list[Timed] = []
    single: dict[str, list[Timed]] = {p: [] for p in engines}
    eight: dict[str, list[Timed]] = {p: [] for p in engines}
    for i in range(opts.repeats):
        progress(f"engine round {i + 1}/{opts.repeats}: HF generate, {', '.join(engines)} x1 and x8 ...")
        hf.append(hf_generate(model, tokenizer, opts.tokens))
        for precision, engine in engines.items():
            single[precision].append(run_engine(engine, 1, opts.tokens))
            eight[precision].append(run_engine(engine, 8, opts.tokens))
    base = best_rate(hf)
    report.context["hf_generate_fp32_bs1_tokens_per_s"] = round(base, 1)
    for precision in engines:
        one, agg = best_rate(single[precision]), best_rate(eight[precision])
        key = "engine_over_hf_generate" if precision == "fp32" else f"engine_{precision}_over_hf_generate"
        report.ratios[key] = ratio(one, base)
        report.ratios[f"engine_{precision}_scaling_8_over_1"] = ratio(agg, one)
        report.context[f"engine_{precision}_1_tokens_per_s"] = round(one, 1)
        report.context[f"engine_{precision}_8_tokens_per_s"] = round(agg, 1)
    report.ratios["loop_overhead_ms"] = min(loop_overhead_ms(tokenizer, opts.overhead_slots) for _ in range(3))


def capacity_section(report: Report, opts: ReportOptions, progress: Progress) -> None:
    from .capacity import client_capacity, zero_cost_server

    progress(f"client capacity: {opts.capacity_streams} streams x {opts.capacity_tokens} tokens, zero-cost model ...")
    with zero_cost_server() as server:
        client_capacity(server.grpc_url, 1, 200)  # warm-up
        runs = [client_capacity(server.grpc_url, opts.capacity_streams, opts.capacity_tokens)
                for _ in range(opts.repeats)]
    complete = all(r.complete for r in runs)
    best = max(runs, key=lambda r: r.tokens_per_s)
    report.ratios["client_tokens_per_s"] = best.tokens_per_s if complete else None
    report.context.update(client_streams=opts.capacity_streams, client_tokens_expected=best.expected,
                          client_tokens_received=[r.received for r in runs], client_all_tokens_arrived=complete,
                          client_tokens_per_s_runs=[round(r.tokens_per_s) for r in runs])
    if not complete:
        report.context["client_errors"] = [e for r in runs for e in r.errors][:10]


def run_report(opts: ReportOptions | None = None, progress: Progress = print) -> Report:
    """All sections, one after the other (each alone on the machine)."""
    opts = opts or ReportOptions()
    report = Report()
    report.context.update(tokens_per_measurement=opts.tokens, repeats=opts.repeats, cpus=os.cpu_count(),
                          load_average_start=[round(x, 2) for x in os.getloadavg()])
    t0 = time.perf_counter()
    for section in (triton_section, engine_section, capacity_section):
        section(report, opts, progress)
    report.context["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    report.context["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def format_report(report: Report) -> str:
    """The ratios against their targets, then the absolute figures."""
    from .display import table

    labels = {
        "triton_over_inprocess": "P1 Triton 1 stream ÷ in-process engine",
        "scaling_8_over_1": "P2 Triton 8 streams ÷ 1 stream",
        "engine_over_hf_generate": "engine fp32 1 seq ÷ HF generate fp32 bs1",
        "engine_int8_over_hf_generate": "engine int8 1 seq ÷ HF generate fp32 bs1",
        "engine_int4_over_hf_generate": "engine int4 1 seq ÷ HF generate fp32 bs1",
        "engine_fp32_scaling_8_over_1": "engine fp32 8 seqs ÷ 1 seq",
        "engine_int8_scaling_8_over_1": "engine int8 8 seqs ÷ 1 seq",
        "engine_int4_scaling_8_over_1": "engine int4 8 seqs ÷ 1 seq",
        "loop_overhead_ms": "loop host overhead per decode step, ms (16 slots)",
        "client_tokens_per_s": "client capacity, streamed tokens/s (zero-cost server)",
    }
    rows = []
    for key, value in report.ratios.items():
        op, threshold = TARGETS[key]
        verdict = {True: "ok", False: "MISSED", None: "n/a"}[report.passed(key)]
        rows.append([labels.get(key, key), key, _round(value), f"{op} {threshold:g}", verdict])
    context = "\n".join(f"  {k}: {v}" for k, v in report.context.items())
    return table(["measurement", "key", "value", "target", ""], rows) + "\n\ncontext:\n" + context
