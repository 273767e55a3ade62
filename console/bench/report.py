"""The project's performance report (``qaic-console bench report``, ``make bench``).

Measured in one run on the embedded model, side by side, as ratios (absolute figures are context):

* ``served_over_inprocess_{fp32,int8,int4}_{1,8}``: tokens/s of 1 and 8 concurrent gRPC streams
  through Triton (the console's stream client, one server per precision) ÷ the same engine, same
  settings, in this process (target >= 0.9: serving costs nothing);
* ``scaling_8_over_1``: 8 served fp32 streams ÷ 1 (target >= 3);
* ``engine_over_hf_generate``: the engine's single stream ÷ transformers ``generate`` (fp32, bs1,
  as many threads as the engine: ``cpu_threads`` automatic) on the same weights, for fp32, int8 and
  int4 (target >= 5), and each precision's 8-sequence aggregate ÷ its single stream (target >= 3);
* ``demo_{1,8}_over_llama_server``: the demo samples' precision (int4) served, 1 and 8 streams ÷ the CPU peer,
  llama.cpp's ``llama-server -np 8 -cb`` (``scripts/setup-llama-server.sh`` builds it), on the same GGUF and threads,
  alternately, every stream the same length on both sides (targets >= 0.8 and >= 1; ``llama_cpp.py``);
  ``demo_1_tokens_per_s`` the single stream (target >= 100);
* ``chat_reuse_ttft_over_no_reuse``: 4 chats of 4 turns at once on the demo precision's engine in-process, each
  turn sent when the last is answered with the history before it: the mean time to first token of turns 2+ with
  prefix reuse ÷ without, alternately (target <= 0.5);
* ``speculation_repetitive_over_plain_1``: one sequence at a time on the demo precision's engine in-process,
  ``assets/bench/repetitive.jsonl`` (code edits, text quoting its source), prompt-lookup speculation (2 drafted
  tokens) ÷ none, alternately, greedy answers checked equal (target >= 1.3); the same ratio on the bench prompts
  as context (speculation stays off by default);
* ``loop_overhead_ms``: host time per decode step of the loop with a zero-cost session at
  full_batch_size 16 (target <= 0.3 ms);
* ``served_zero_cost_16_tokens_per_s``: streamed tokens/s arriving at the console client from 16
  streams of a served zero-cost model: the real backend glue and loop, no compute (the host cost a
  card would see; target >= 5,000); the OpenAI-compatible front's ratios: ``front_report.py``;
* ``instances_2_over_1_16_streams``: 16 streams against the embedded model served as two instances (device
  groups ``0;1``) ÷ as one, one engine thread each, every answer equal to its prompt's alone (target >= 1.4;
  ``instances.py``).

Context only (no target): ``matmul_ceiling_{precision}_1_tokens_per_s``, one sequence's tokens/s if
a decode step did nothing but its matmuls (the kernels' ceiling on this machine and threads); the card
twin — the time to export the embedded model as a QEfficient-style ONNX graph and the ONNX Runtime
twin's tokens/s (1 and 8 sequences) beside the CPU KV session's fp32, measured alternately in this process.

Runs alternate so that a neighbour's load hits both sides of a ratio alike, and each side is the
best of ``repeats`` runs (on a shared machine a neighbour only ever slows a run down).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from backend_model.build import BackendSettings, build_engine
from backend_model.contract import compile_config
from backend_model.engine.sampling import SamplingParams
from backend_model.models import load_pretrained
from repo_gen.samples import EMBEDDED_KV

from .capacity import client_capacity, zero_cost_server
from .display import table
from .engine import BENCH_PROMPTS, Timed, chat_turns, hf_generate, loop_overhead_ms, matmul_ceiling, run_engine
from .front_report import FRONT_LABELS, FRONT_TARGETS, front_section
from .instances import INSTANCES_LABELS, INSTANCES_TARGETS, instances_section
from .llama_cpp import LLAMA_SERVER_LABELS, LLAMA_SERVER_TARGETS, llama_server_section
from .prompts import read_jsonl
from .streams import served_model, served_precision, triton_streams
from .verdicts import STREAMS, best_rate, ratio, rounded

PRECISIONS = ("fp32", "int8", "int4")
ZERO_COST_STREAMS = 16
SECTIONS = ("precision", "llama_server", "chat", "speculation", "zero_cost", "instances", "front", "twin")  # in order
TARGETS = {  # key -> (comparison, threshold)
    **{f"served_over_inprocess_{p}_{n}": (">=", 0.9) for p in PRECISIONS for n in STREAMS},
    "scaling_8_over_1": (">=", 3.0),
    "engine_over_hf_generate": (">=", 5.0),
    "engine_int8_over_hf_generate": (">=", 5.0),
    "engine_int4_over_hf_generate": (">=", 5.0),
    "engine_fp32_scaling_8_over_1": (">=", 3.0),
    "engine_int8_scaling_8_over_1": (">=", 3.0),
    "engine_int4_scaling_8_over_1": (">=", 3.0),
    "chat_reuse_ttft_over_no_reuse": ("<=", 0.5),
    "speculation_repetitive_over_plain_1": (">=", 1.3),
    "loop_overhead_ms": ("<=", 0.3),
    "served_zero_cost_16_tokens_per_s": (">=", 5000.0),
    **LLAMA_SERVER_TARGETS,  # the CPU peer (llama_cpp.py)
    **INSTANCES_TARGETS,  # model instances (instances.py)
    **FRONT_TARGETS,  # the OpenAI-compatible front (front_report.py)
}

Progress = Callable[[str], None]


@dataclass
class ReportOptions:
    tokens: int = 64  # generated tokens per measurement
    repeats: int = 3  # runs per measurement, the best one counts
    zero_cost_tokens: int = 2000  # per stream, 16 streams
    overhead_slots: int = 16
    precisions: tuple[str, ...] = PRECISIONS
    sections: tuple[str, ...] = SECTIONS  # which to run (in SECTIONS' order)


@dataclass
class Report:
    """Ratios (the verdicts) and the absolute figures behind them."""

    ratios: dict[str, float | None] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)

    def passed(self, key: str) -> bool | None:
        value, (op, threshold) = self.ratios.get(key), TARGETS[key]
        if value is None:
            return None
        within = abs(value - 1) <= threshold  # "±": within threshold of 1
        return within if op == "±" else value >= threshold if op == ">=" else value <= threshold

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: rounded(v) for k, v in self.ratios.items()}
        out["targets"] = {k: f"{op} {t:g}" for k, (op, t) in TARGETS.items() if k in self.ratios}
        out["passed"] = {k: self.passed(k) for k in self.ratios}
        out["context"] = self.context
        return out


# --------------------------------------------------------------------------- the sections


def _embedded_settings(precision: str) -> Any:
    return BackendSettings(precision=precision, compile=compile_config.validate(EMBEDDED_KV))


def _engine(settings: Any) -> Any:
    engine, _ = build_engine(settings, progress=lambda m: None)
    run_engine(engine, 1, 4)  # warm-up
    return engine


def precision_section(report: Report, opts: ReportOptions, progress: Progress) -> None:
    """Per precision, alternating: HF generate, the engine in-process and served, at 1 and 8 streams."""
    import torch  # torch (the serve extra) loads when a measurement runs


    model, tokenizer = load_pretrained("embedded", progress)
    for precision in opts.precisions:
        engine = _engine(_embedded_settings(precision))  # sets torch's threads: HF generate runs on the same
        report.context["threads"] = torch.get_num_threads()
        ceiling = matmul_ceiling(engine.session)
        if ceiling is not None:
            report.context[f"matmul_ceiling_{precision}_1_tokens_per_s"] = round(ceiling, 1)
        hf_generate(model, tokenizer, 4)  # warm-up
        progress(f"{precision}: starting a server with the embedded model at {precision} ...")
        runs: dict[str, list[Timed]] = {}
        with served_precision(precision) as server:
            url, name = server.grpc_url, served_model(precision)
            triton_streams(url, 1, 4, name)  # warm-up
            for i in range(opts.repeats):
                progress(f"{precision} round {i + 1}/{opts.repeats}: HF generate, in-process and served x1 and x8 ...")
                runs.setdefault("hf", []).append(hf_generate(model, tokenizer, opts.tokens))
                for n in STREAMS:
                    runs.setdefault(f"inprocess_{n}", []).append(run_engine(engine, n, opts.tokens))
                    runs.setdefault(f"served_{n}", []).append(triton_streams(url, n, opts.tokens, name))
        _precision_figures(report, precision, {key: best_rate(timed) for key, timed in runs.items()})
    report.ratios["loop_overhead_ms"] = min(loop_overhead_ms(tokenizer, opts.overhead_slots) for _ in range(3))


def _precision_figures(report: Report, precision: str, best: dict[str, float]) -> None:
    for n in STREAMS:
        report.ratios[f"served_over_inprocess_{precision}_{n}"] = ratio(best[f"served_{n}"], best[f"inprocess_{n}"])
        report.context[f"inprocess_{precision}_{n}_tokens_per_s"] = round(best[f"inprocess_{n}"], 1)
        report.context[f"served_{precision}_{n}_tokens_per_s"] = round(best[f"served_{n}"], 1)
    key = "engine_over_hf_generate" if precision == "fp32" else f"engine_{precision}_over_hf_generate"
    report.ratios[key] = ratio(best["inprocess_1"], best["hf"])
    report.ratios[f"engine_{precision}_scaling_8_over_1"] = ratio(best["inprocess_8"], best["inprocess_1"])
    if precision == "fp32":
        report.ratios["scaling_8_over_1"] = ratio(best["served_8"], best["served_1"])
    report.context.setdefault("hf_generate_fp32_bs1_tokens_per_s", {})[precision] = round(best["hf"], 1)


CHATS, TURNS = 4, 4
DEMO_PRECISION = "int4"  # the demo samples' (repo_gen.samples)


def chat_section(report: Report, opts: ReportOptions, progress: Progress) -> None:
    """Chats of several turns on the demo precision's engine, with prefix reuse and without, alternately."""

    settings = _embedded_settings(DEMO_PRECISION)
    engines = {"reuse": _engine(settings), "no_reuse": _engine(replace(settings, prefix_caching=False))}
    means: dict[str, list[float]] = {}
    for i in range(opts.repeats):
        progress(f"chat round {i + 1}/{opts.repeats}: {CHATS} chats x {TURNS} turns, with prefix reuse and without")
        for name, engine in engines.items():
            ttfts = chat_turns(engine, CHATS, TURNS, min(opts.tokens, 32))
            means.setdefault(name, []).append(sum(ttfts) / len(ttfts))
    best = {name: min(values) for name, values in means.items()}
    report.ratios["chat_reuse_ttft_over_no_reuse"] = ratio(best["reuse"], best["no_reuse"])
    for name, seconds in best.items():
        report.context[f"chat_{name}_ttft_turns_2_plus_ms"] = round(seconds * 1000, 1)


SPECULATIVE_TOKENS = 2  # the best of 1-5 drafted tokens on the repetitive set (docs/engine-speed.md)
REPETITIVE = "assets/bench/repetitive.jsonl"


def speculation_section(report: Report, opts: ReportOptions, progress: Progress) -> None:
    """One sequence at a time, prompt lookup on and off alternately: the repetitive set, then the bench prompts."""



    engine = _engine(_embedded_settings(DEMO_PRECISION))
    sets = {"repetitive": [r.prompt for r in read_jsonl(Path(__file__).parents[2] / REPETITIVE)],
            "plain": BENCH_PROMPTS[:4]}
    params = SamplingParams(max_tokens=opts.tokens, ignore_eos=True)
    for name, prompts in sets.items():
        runs: dict[int, list[Timed]] = {}
        answers: dict[int, list[list[int]]] = {}
        for i in range(opts.repeats):
            progress(f"speculation round {i + 1}/{opts.repeats}: {name} prompts, {SPECULATIVE_TOKENS} drafted "
                     "tokens and none")
            for drafts in (SPECULATIVE_TOKENS, 0):
                engine.speculative_tokens = drafts
                start, tokens = time.perf_counter(), []
                for prompt in prompts:
                    tokens.append(engine.generate([prompt], params)[0].tokens)
                runs.setdefault(drafts, []).append(Timed(sum(map(len, tokens)), time.perf_counter() - start))
                answers[drafts] = tokens
        engine.speculative_tokens = 0
        if answers[SPECULATIVE_TOKENS] != answers[0]:
            raise RuntimeError(f"speculation changed a greedy answer on the {name} prompts")
        gain = ratio(best_rate(runs[SPECULATIVE_TOKENS]), best_rate(runs[0]))
        if name == "repetitive":
            report.ratios["speculation_repetitive_over_plain_1"] = gain
        else:
            report.context["speculation_bench_prompts_over_plain_1"] = rounded(gain)
        report.context[f"speculation_{name}_1_tokens_per_s"] = round(best_rate(runs[SPECULATIVE_TOKENS]), 1)


def zero_cost_section(report: Report, opts: ReportOptions, progress: Progress) -> None:
    """The served zero-cost model: 16 streams of the real glue and loop with no compute."""

    streams, tokens = ZERO_COST_STREAMS, opts.zero_cost_tokens
    progress(f"served zero-cost model: {streams} streams x {tokens} tokens ...")
    with zero_cost_server() as server:
        client_capacity(server.grpc_url, 1, 200)  # warm-up
        runs = [client_capacity(server.grpc_url, streams, tokens) for _ in range(opts.repeats)]
    complete = all(r.complete for r in runs)
    best = max(runs, key=lambda r: r.tokens_per_s)
    report.ratios["served_zero_cost_16_tokens_per_s"] = best.tokens_per_s if complete else None
    report.context.update(zero_cost_streams=streams, zero_cost_tokens_expected=best.expected,
                          zero_cost_tokens_received=[r.received for r in runs], zero_cost_all_tokens_arrived=complete,
                          zero_cost_tokens_per_s_runs=[round(r.tokens_per_s) for r in runs],
                          zero_cost_responses_per_s=round(best.responses / best.seconds),
                          zero_cost_tokens_per_response=round(best.received / max(1, best.responses), 1))
    if not complete:
        report.context["zero_cost_errors"] = [e for r in runs for e in r.errors][:10]


def twin_section(report: Report, opts: ReportOptions, progress: Progress) -> None:
    """The card twin: export time, then the twin and the CPU fp32 session alternately at 1 and 8 sequences."""

    from repo_gen.onnx_export import export  # the ONNX export loads torch (the twin extra)

    cpu = _embedded_settings("fp32")
    with tempfile.TemporaryDirectory(prefix="qaic-report-twin-") as tmp:
        progress("card twin: exporting the embedded model as a QEfficient-style ONNX graph ...")
        done = export("embedded", tmp, progress=lambda m: None, **EMBEDDED_KV)
        report.context["twin_export_seconds"] = round(done.seconds, 1)
        twin = _engine(replace(cpu, engine="onnx", compile={**cpu.compile, "onnx_path": str(done.graph)}))
        engines = {"twin": twin, "cpu_fp32": _engine(cpu)}
        runs: dict[str, list[Timed]] = {}
        for i in range(opts.repeats):
            progress(f"card twin round {i + 1}/{opts.repeats}: twin and CPU session x1 and x8 ...")
            for n in STREAMS:
                for name, engine in engines.items():
                    runs.setdefault(f"{name}_{n}", []).append(run_engine(engine, n, opts.tokens))
    for key, timed in runs.items():
        report.context[f"inprocess_{key}_tokens_per_s"] = round(best_rate(timed), 1)


def run_report(opts: ReportOptions | None = None, progress: Progress = print) -> Report:
    """The sections ``opts`` names, one after the other (each alone on the machine)."""
    opts = opts or ReportOptions()
    report = Report()
    report.context.update(tokens_per_measurement=opts.tokens, repeats=opts.repeats, cpus=os.cpu_count(),
                          load_average_start=[round(x, 2) for x in os.getloadavg()])
    t0 = time.perf_counter()
    run = dict(zip(SECTIONS, (precision_section, llama_server_section, chat_section, speculation_section,
                              zero_cost_section, instances_section, front_section, twin_section)))
    for name in SECTIONS:
        if name in opts.sections:
            run[name](report, opts, progress)
    report.context["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    report.context["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def format_report(report: Report) -> str:
    """The ratios against their targets, then the absolute figures."""

    labels = {
        **{f"served_over_inprocess_{p}_{n}": f"served {p} {n} stream{'s' * (n > 1)} ÷ in-process"
           for p in PRECISIONS for n in STREAMS},
        "scaling_8_over_1": "served fp32 8 streams ÷ 1 stream",
        "engine_over_hf_generate": "engine fp32 1 seq ÷ HF generate fp32 bs1",
        "engine_int8_over_hf_generate": "engine int8 1 seq ÷ HF generate fp32 bs1",
        "engine_int4_over_hf_generate": "engine int4 1 seq ÷ HF generate fp32 bs1",
        "engine_fp32_scaling_8_over_1": "engine fp32 8 seqs ÷ 1 seq",
        "engine_int8_scaling_8_over_1": "engine int8 8 seqs ÷ 1 seq",
        "engine_int4_scaling_8_over_1": "engine int4 8 seqs ÷ 1 seq",
        "chat_reuse_ttft_over_no_reuse": f"{CHATS} chats: TTFT of turns 2+ with prefix reuse ÷ without",
        "speculation_repetitive_over_plain_1": "repetitive prompts, 1 seq: prompt lookup ÷ none",
        "loop_overhead_ms": "loop host overhead per decode step, ms (16 slots)",
        "served_zero_cost_16_tokens_per_s": "served zero-cost model, 16 streams, tokens/s at the client",
        **LLAMA_SERVER_LABELS,
        **INSTANCES_LABELS,
        **FRONT_LABELS,
    }
    rows = []
    for key, value in report.ratios.items():
        op, threshold = TARGETS[key]
        verdict = {True: "ok", False: "MISSED", None: "n/a"}[report.passed(key)]
        rows.append([labels.get(key, key), key, rounded(value), f"{op} {threshold:g}", verdict])
    context = "\n".join(f"  {k}: {v}" for k, v in report.context.items())
    return table(["measurement", "key", "value", "target", ""], rows) + "\n\ncontext:\n" + context
