"""The OpenAI-compatible front in the project's report (``make bench``), measured side by side:

* ``front_over_grpc_{ttft,itl,tokens_per_s}_{1,16}``: the console's bench load (the same prompts, greedy, fixed
  lengths) through the front ÷ straight gRPC to the same served model (the embedded int4 stream sample), at 1 and
  16 concurrent streams, alternately, each side's best of ``repeats`` (targets: TTFT and ITL <= 1.1, tok/s >= 0.9);
* ``front_zero_cost_16_tokens_per_s``: 16 streams of the zero-cost model through the front, every token checked
  (target >= 5,000);
* ``aiperf_over_bench_{ttft,itl,tokens_per_s}``: AIPerf profiling the front ÷ ``qaic-console bench`` on the same
  front with the same load, alternately (target: within 10%). AIPerf is not a dependency (its pins fight the
  project's): it runs from ``$QAIC_AIPERF`` or the PATH, e.g. a venv of its own with ``pip install aiperf==0.13.*``;
  without it these are n/a.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from backend_model.models import prepare_embedded
from console.clients import GenerationParams
from console.core.adapters import adapter_for
from console.core.request import Settings, read_info
from console.front import front_server
from console.server import free_port

from .capacity import client_capacity, zero_cost_server
from .load import Runner, Target
from .prompts import SyntheticPrompts, load_tokenizer
from .results import summarize, value
from .streams import served_model, served_precision
from .verdicts import ratio

FRONT_STREAMS = (1, 16)
METRICS = {"ttft": ("time_to_first_token", min), "itl": ("inter_token_latency", min),
           "tokens_per_s": ("output_token_throughput", max)}  # key -> (bench metric, the best run)
AIPERF_LOAD = {"concurrency": 4, "requests": 16, "input_tokens": 64, "output_tokens": 32}
FRONT_TARGETS = {
    **{f"front_over_grpc_{m}_{n}": ("<=", 1.1) if m != "tokens_per_s" else (">=", 0.9)
       for n in FRONT_STREAMS for m in METRICS},
    "front_zero_cost_16_tokens_per_s": (">=", 5000.0),
    **{f"aiperf_over_bench_{m}": ("±", 0.1) for m in METRICS},
}
FRONT_LABELS = {
    **{f"front_over_grpc_{m}_{n}": f"front {m} ÷ gRPC, {n} stream{'s' * (n > 1)}" for n in FRONT_STREAMS
       for m in METRICS},
    "front_zero_cost_16_tokens_per_s": "zero-cost model through the front, 16 streams, tokens/s",
    **{f"aiperf_over_bench_{m}": f"AIPerf {m} ÷ qaic-console bench, on the front" for m in METRICS},
}
Progress = Callable[[str], None]


@contextlib.contextmanager
def fronted(grpc_url: str) -> Iterator[str]:
    """The front before ``grpc_url``, in this process, on a free loopback port; its base URL."""

    front = front_server(grpc_url, "127.0.0.1", free_port(), None, ())
    front.start()
    try:
        yield front.base_url
    finally:
        front.stop()


def bench_level(url: str, model: str, concurrency: int, requests: int, tokens: int,
                input_tokens: int = 64) -> dict[str, Any]:
    """One level of the console's bench load on ``url`` (Triton gRPC or a front): fixed lengths, greedy."""
    server = adapter_for(url)
    settings = Settings(model, "stream", params=GenerationParams(max_tokens=tokens, min_tokens=tokens))
    prompts = SyntheticPrompts(input_tokens, 0, tokens, tokenizer=load_tokenizer(None, embedded=True))
    runner = Runner(Target(settings, read_info(server, settings), (server,)), prompts)
    summary = summarize(runner.run(concurrency=concurrency, count=requests), "stream")
    if summary["error_count"]:
        raise RuntimeError(f"bench on {url}: {summary['errors']}")
    return summary


def figures(summary: dict[str, Any]) -> dict[str, float | None]:
    """TTFT and ITL (avg ms) and output tokens/s of a level summary."""
    return {key: value(summary, metric) for key, (metric, _) in METRICS.items()}


def best(runs: list[dict[str, float | None]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, (_, pick) in METRICS.items():
        values = [value for r in runs if (value := r[key]) is not None]
        out[key] = pick(values) if values else None
    return out


def aiperf_binary() -> str | None:
    return os.environ.get("QAIC_AIPERF") or shutil.which("aiperf")


def aiperf_level(binary: str, base_url: str, model: str) -> dict[str, float | None]:
    """AIPerf profiling ``model`` on the front at ``base_url`` (completions, streamed, server token counts)."""

    load = AIPERF_LOAD
    with tempfile.TemporaryDirectory(prefix="qaic-aiperf-") as out:
        command = [binary, "profile", "--model", model, "--url", base_url.removesuffix("/v1"), "--endpoint-type",
                   "completions", "--streaming", "--concurrency", str(load["concurrency"]), "--request-count",
                   str(load["requests"]), "--warmup-request-count", "2", "--tokenizer",
                   str(prepare_embedded(progress=lambda m: None)), "--synthetic-input-tokens-mean",
                   str(load["input_tokens"]), "--output-tokens-mean", str(load["output_tokens"]),
                   "--extra-inputs", "ignore_eos:true", "--use-server-token-count", "--artifact-dir", out,
                   "--ui-type", "none"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        export = Path(out) / "profile_export_aiperf.json"
        if done.returncode != 0 or not export.exists():
            raise RuntimeError(f"aiperf failed ({done.returncode}): {(done.stderr or done.stdout)[-300:]}")
        data = json.loads(export.read_text())
    return {key: (data.get(metric) or {}).get("avg") for key, (metric, _) in METRICS.items()}


def grpc_and_front(report: Any, repeats: int, tokens: int, progress: Progress) -> None:
    """Through the front vs straight gRPC, then AIPerf vs the bench on the front, on one served int4 model."""

    model = served_model("int4")
    progress("front: starting a server with the embedded int4 model and the front before it ...")
    with served_precision("int4") as server, fronted(server.grpc_url) as front:
        sides = {"grpc": server.grpc_url, "front": front}
        for url in sides.values():
            bench_level(url, model, 1, 2, 4)  # warm-up
        runs: dict[str, list[dict[str, float | None]]] = {}
        for i in range(repeats):
            progress(f"front round {i + 1}/{repeats}: gRPC and the front, 1 and 16 streams ...")
            for n in FRONT_STREAMS:
                for side, url in sides.items():
                    runs.setdefault(f"{side}_{n}", []).append(figures(bench_level(url, model, n, max(2, n), tokens)))
        for n in FRONT_STREAMS:
            grpc, through = best(runs[f"grpc_{n}"]), best(runs[f"front_{n}"])
            for key in METRICS:
                report.ratios[f"front_over_grpc_{key}_{n}"] = ratio(through[key], grpc[key])
            report.context[f"front_{n}"] = {"grpc": grpc, "front": through}
        aiperf_section(report, front, model, repeats, progress)


def aiperf_section(report: Any, front: str, model: str, repeats: int, progress: Progress) -> None:
    binary = aiperf_binary()
    if binary is None:
        report.context["aiperf"] = "not installed: pip install 'aiperf==0.13.*' into a venv of its own and set " \
                                   "QAIC_AIPERF to its bin/aiperf"
        for key in METRICS:
            report.ratios[f"aiperf_over_bench_{key}"] = None
        return
    load = AIPERF_LOAD
    runs: dict[str, list[dict[str, float | None]]] = {"aiperf": [], "bench": []}
    for i in range(min(repeats, 2)):
        progress(f"front round {i + 1}: AIPerf and qaic-console bench on the front ({load['requests']} requests, "
                 f"{load['concurrency']} at a time, {load['input_tokens']} -> {load['output_tokens']} tokens) ...")
        runs["aiperf"].append(aiperf_level(binary, front, model))
        runs["bench"].append(figures(bench_level(front, model, load["concurrency"], load["requests"],
                                                 load["output_tokens"], load["input_tokens"])))
    aiperf, bench = best(runs["aiperf"]), best(runs["bench"])
    for key in METRICS:
        report.ratios[f"aiperf_over_bench_{key}"] = ratio(aiperf[key], bench[key])
    report.context["aiperf_vs_bench"] = {"load": load, "aiperf": aiperf, "bench": bench}


def zero_cost_front(report: Any, repeats: int, tokens: int, progress: Progress) -> None:
    """16 streams of the zero-cost model through the front (every token checked)."""

    progress(f"zero-cost model through the front: 16 streams x {tokens} tokens ...")
    with zero_cost_server() as server, fronted(server.grpc_url) as front:
        client_capacity(front, 1, 200)  # warm-up
        runs = [client_capacity(front, 16, tokens) for _ in range(repeats)]
    complete = all(r.complete for r in runs)
    report.ratios["front_zero_cost_16_tokens_per_s"] = max(r.tokens_per_s for r in runs) if complete else None
    report.context["front_zero_cost_tokens_per_s_runs"] = [round(r.tokens_per_s) for r in runs]
    if not complete:
        report.context["front_zero_cost_errors"] = [e for r in runs for e in r.errors][:10]


def front_section(report: Any, opts: Any, progress: Progress) -> None:
    grpc_and_front(report, opts.repeats, opts.tokens, progress)
    zero_cost_front(report, opts.repeats, opts.zero_cost_tokens, progress)
