"""``qaic-console bench``: load a server (sweeps, exports, plots), servers side by side, ``bench compare``,
``bench report``, ``bench breakdown``.

Several ``--url`` spread one load round-robin over servers of one kind; each ``--compare-url`` is another
server (Triton or OpenAI-compatible) loaded with the same requests at each level, reported beside the
first with ratios.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from console.bench.breakdown import breakdown as measure
from console.bench.breakdown import format_breakdown
from console.bench.display import compare_table
from console.bench.embeddings import ENDPOINTS
from console.bench.load import DISTRIBUTIONS, MODES
from console.bench.options import BenchOptions
from console.bench.report import SECTIONS, ReportOptions, format_report, run_report
from console.bench.results import compare as compare_runs
from console.bench.results import load_json
from console.bench.run import BenchRun, parse_levels, plot_formats, to_stderr
from console.clients import ClientError, UsageError
from console.commands.options import click_options, server_options
from console.core.adapters import MODEL_DEFAULT_HELP, URL_HELP
from console.infra.signals import INTERRUPTED
from console.server import ServerError
from console.server.embedded import EMBEDDED_DEFAULTS, embedded_server
from repo_gen.samples import VISION_SAMPLES

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def _run(options: BenchOptions) -> int:
    try:
        bench = BenchRun(options)
        bench.levels()  # bad options fail before any server starts
        plot_formats(options.plots)
        if options.api != "auto" and not options.url:
            raise UsageError(f"--api {options.api} needs --url (the server's address)")
        if options.endpoint == "embeddings" and not options.url:
            raise UsageError("--endpoint embeddings needs --url (a server with an embedding model)")
        if options.prometheus and not options.url:
            raise UsageError("--prometheus needs --url (the servers that Prometheus scrapes)")
        if options.url:
            return bench.execute(options.url, metrics_urls=options.metrics_url)
        model = options.model or (VISION_SAMPLES[0] if bench.with_images else EMBEDDED_DEFAULTS[options.mode])
        with embedded_server(model, bench.progress) as server:
            return bench.execute((server.http_url,), grpc_url=server.grpc_url,
                                 metrics_urls=(server.handle.metrics_url or "",))
    except ServerError as exc:
        to_stderr(f"error: {exc}")
        for line in exc.log_tail[-15:]:
            to_stderr(f"  | {line}")
    except (ClientError, OSError, ValueError) as exc:
        to_stderr(f"error: {' '.join(str(exc).split())}")
    except KeyboardInterrupt:
        to_stderr(INTERRUPTED)
        return 130
    return 1


@click.group(name="bench", invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@click.option("--url", multiple=True,
              help=URL_HELP + "; repeat to spread the load round-robin over servers of one kind. Without it the "
                   "embedded model (with --images, the vision sample smollm2_vision) is served for the run.")
@server_options("--api", "--metrics-url", "--prometheus", per_url=True)
@click.option("--compare-url", multiple=True,
              help="Another server (Triton host:port or http://host:port/v1) loaded with the same requests at each "
                   "level and reported beside the first, with ratios (repeatable).")
@click.option("--compare-model", default=None,
              help="Model of the --compare-url servers (default: each server's own, as for --model).")
@click.option("--model", default=None, help=f"Model (default: {MODEL_DEFAULT_HELP}).")
@click.option("--adapters", default=None,
              help="Spread the requests over these LoRA adapters in turn, 'a,b' (name the model itself for its own "
                   "weights); each level is also reported per adapter.")
@click.option("--endpoint", type=click.Choice(ENDPOINTS), default="generate", show_default=True,
              help="generate: text from a language model; embeddings: vectors from an embedding model (AIPerf's "
                   "embeddings endpoint: a request's latency, requests/s and inputs/s; needs --url).")
@click.option("--batch-size", type=int, default=1, show_default=True,
              help="Embeddings: texts a request (AIPerf's --batch-size-text).")
@click.option("--mode", type=click.Choice(MODES), default="stream", show_default=True,
              help="stream: gRPC decoupled, one response per step; batch: one response per request.")
@click.option("--protocol", type=click.Choice(("http", "grpc")), default="http", show_default=True,
              help="Batch mode transport.")
@click.option("--concurrency", default=None, help="Concurrent clients: one value or a sweep '1,2,4,8,16' [default: 1].")
@click.option("--request-rate", default=None, help="Requests/s instead of a concurrency (a sweep: '1,2,4').")
@click.option("--request-distribution", type=click.Choice(DISTRIBUTIONS), default="constant", show_default=True,
              help="Gaps between requests at a request rate.")
@click.option("--requests", type=int, default=None,
              help="Requests per level [default: 4 x concurrency, at least 8; unlimited with --duration].")
@click.option("--duration", type=float, default=None, help="Seconds per level (in-flight requests then finish).")
@click.option("--warmup", type=int, default=2, show_default=True, help="Unmeasured requests before the first level.")
@click.option("--input-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="JSONL prompts ({\"text\": ..., \"max_tokens\": ...} a line) instead of synthetic ones.")
@click.option("--images", type=click.Path(file_okay=False, exists=True), default=None,
              help="A folder of image files: each request takes the next one (in name order), and the same prompts "
                   "are also sent as text only, reported beside with ratios and the server's image encoding time. "
                   "A --input-file line's \"images\" (a list of files) does the same per prompt.")
@click.option("--input-tokens-mean", type=float, default=64, show_default=True, help="Synthetic prompt length.")
@click.option("--input-tokens-stddev", type=float, default=0, show_default=True)
@click.option("--output-tokens-mean", type=int, default=64, show_default=True,
              help="Tokens to generate (sent as max_tokens; the model may stop earlier at EOS).")
@click.option("--output-tokens-stddev", type=float, default=0, show_default=True)
@click.option("--tokenizer", type=click.Path(file_okay=False), default=None,
              help="Local tokenizer folder to size synthetic prompts (embedded models use their own).")
@click.option("--shared-prefix-tokens", type=int, default=0, show_default=True,
              help="Start every synthetic prompt with the same text of this many tokens (a shared system prompt, "
                   "AIPerf's --shared-system-prompt-length).")
@click.option("--turns", type=int, default=1, show_default=True,
              help="Each concurrent client holds a chat of this many turns: the next turn, sent when the last is "
                   "answered, carries the history (earlier prompts and answers) before its new prompt. The time to "
                   "first token of turns 2+ is reported apart.")
@click.option("--slo", default=None,
              help="Service-level goals for goodput (AIPerf's --goodput): ttft_ms=200,itl_ms=40,latency_ms=2000; "
                   "each level reports the requests/s that met every goal and their share.")
@click_options(skip=("max_tokens", "seed"), defaults=False)
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of prompts, lengths, schedule (and of sampling when --temperature is set).")
@click.option("--timeout", type=float, default=None,
              help="Network timeout per request in s (default: 600 KV / 6000 causal; 0 disables).")
@click.option("--idle-timeout", type=float, default=120, show_default=True,
              help="Stream: seconds without a response before a request fails (0 disables).")
@click.option("-o", "--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where bench.json, CSVs and plots go [default: bench-results/<model>-<time>].")
@click.option("--plots", default="png,html", show_default=True, help="Plot formats: png, html, both, or none.")
@click.option("--json", "json_", is_flag=True, help="Print the level summaries as JSON instead of a table.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@click.pass_context
def bench_group(ctx: click.Context, **options: Any) -> None:
    """Benchmark a served model: TTFT, ITL, latency and throughput per load level (genai-perf names); with
    --endpoint embeddings, an embedding model's latency, requests/s and inputs/s.

    Runs a concurrency sweep (or request rates) with synthetic or JSONL prompts, prints a table,
    and writes bench.json, bench_summary.csv, bench_requests.csv and plots. Exit code 1 when any
    request failed.
    """
    if ctx.invoked_subcommand is None:
        sys.exit(_run(BenchOptions.from_command(options)))


@bench_group.command(context_settings=CONTEXT_SETTINGS)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@click.option("--json", "json_", is_flag=True, help="Print the comparison as JSON.")
def compare(files: tuple[str, ...], json_: bool) -> None:
    """Put bench runs (bench.json files) side by side, with ratios to the first."""

    try:
        documents = [load_json(f) for f in files]
    except ValueError as exc:
        to_stderr(f"error: {exc}")
        sys.exit(1)
    names = [Path(f).parent.name or Path(f).stem for f in files]
    if len(set(names)) < len(names):
        names = [f"{i + 1}:{n}" for i, n in enumerate(names)]
    rows = compare_runs(documents)
    if json_:
        click.echo(json.dumps({"runs": list(files), "rows": rows}, indent=2))
    else:
        for i, (name, document) in enumerate(zip(names, documents)):
            config = document["config"]
            click.echo(f"{name}: {config.get('model')} {config.get('mode')} {', '.join(config.get('urls', []))} "
                       f"{config.get('started', '')}" + ("  (baseline)" if i == 0 else ""))
        click.echo(compare_table(rows, names))


@bench_group.command(context_settings=CONTEXT_SETTINGS)
@click.option("--tokens", type=int, default=64, show_default=True, help="Tokens generated per measurement.")
@click.option("--repeats", type=int, default=3, show_default=True, help="Runs per measurement (the best counts).")
@click.option("--section", "sections", multiple=True, type=click.Choice(SECTIONS),
              help="Run only this section (repeatable; default: all of them, in this order).")
@click.option("--json", "json_", is_flag=True, help="Print one JSON object (ratios, targets, context).")
def report(tokens: int, repeats: int, sections: tuple[str, ...], json_: bool) -> None:
    """The project's performance report on the embedded model: ratios against their targets."""

    if tokens < 8 or repeats < 1:
        to_stderr("error: --tokens must be >= 8 and --repeats >= 1")
        sys.exit(1)
    try:
        result = run_report(ReportOptions(tokens=tokens, repeats=repeats, sections=sections or SECTIONS),
                            progress=to_stderr)
    except (ServerError, ClientError, RuntimeError, OSError) as exc:
        to_stderr(f"error: {' '.join(str(exc).split())}")
        sys.exit(1)
    except KeyboardInterrupt:
        to_stderr(INTERRUPTED)
        sys.exit(130)
    click.echo(json.dumps(result.as_dict(), indent=2) if json_ else format_report(result))


@bench_group.command(context_settings=CONTEXT_SETTINGS)
@click.option("--rows", default="1,8", show_default=True, help="Rows decoding together: one value or a list.")
@click.option("--steps", type=int, default=32, show_default=True,
              help="Decode steps timed per row count (the fastest counts).")
@click.option("--threads", type=int, default=0, show_default=True,
              help="Torch threads (0: a served CPU model's automatic count).")
@click.option("--llama-cpp/--no-llama-cpp", "llama", default=True, show_default=True,
              help="Time llama.cpp's token on the same GGUF and threads beside it.")
@click.option("--json", "json_", is_flag=True, help="Print one JSON object.")
def breakdown(rows: str, steps: int, threads: int, llama: bool, json_: bool) -> None:
    """One int4 decode step of the demo samples' engine, kernel by kernel, beside llama.cpp's token."""

    try:
        counts = tuple(parse_levels(rows))
    except ClientError as exc:
        to_stderr(f"error: --rows: {exc}")
        sys.exit(1)
    if steps < 1 or threads < 0 or max(counts) > 8:
        to_stderr("error: --steps must be >= 1, --threads >= 0 and --rows at most 8 (the samples' full_batch_size)")
        sys.exit(1)
    result = measure(counts, steps, threads, llama, progress=to_stderr)
    click.echo(json.dumps(result, indent=2) if json_ else format_breakdown(result))
