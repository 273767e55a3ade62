"""``qaic-console bench``: load a server (sweeps, exports, plots), servers side by side, ``bench compare``,
``bench report``.

Several ``--url`` spread one load round-robin over servers of one kind; each ``--compare-url`` is another
server (Triton or OpenAI-compatible) loaded with the same requests at each level, reported beside the
first with ratios.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from console.clients import APIS, ClientError
from console.core.controls import click_options, params_from_options
from console.core.request import Endpoint, Settings, default_model, read_info
from console.server.embedded import EMBEDDED_DEFAULTS

from .load import DISTRIBUTIONS, MODES, LevelResult, Runner, Target

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def parse_levels(text: str | None, kind: type = int) -> list[Any]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; ClientError on anything else."""
    if text is None:
        return []
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ClientError(f"expected a comma-separated list of numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise ClientError(f"levels must be positive numbers, got {text!r}")
    return values


def plot_formats(text: str) -> tuple[str, ...]:
    """``"png,html"`` / ``"both"`` / ``"none"`` -> the formats; ClientError on an unknown one."""
    from .plots import FORMATS

    parts = {p.strip().lower() for p in text.split(",") if p.strip()}
    if "both" in parts:
        parts = (parts - {"both"}) | set(FORMATS)
    parts.discard("none")
    unknown = parts - set(FORMATS)
    if unknown:
        raise ClientError(f"--plots: unknown format {sorted(unknown)[0]!r} (png, html, both, none)")
    return tuple(f for f in FORMATS if f in parts)


def _err(message: str) -> None:
    click.echo(message, err=True)


MIXED_KINDS = ("the --url values name servers of different kinds (Triton and OpenAI-compatible): several --url "
               "spread one load round-robin over servers of one kind; put another server beside the first with "
               "--compare-url")


@dataclass(frozen=True)
class Side:
    """One server of a run: its name in the tables, the target loaded, the URLs given for it."""

    name: str
    target: Target
    urls: tuple[str, ...]

    @property
    def config(self) -> dict[str, Any]:
        endpoint = self.target.endpoints[0]
        return {"name": self.name, "api": endpoint.api, "model": self.target.model, "urls": list(self.urls)}


class BenchRun:
    """One ``bench`` invocation: resolve the target, run the levels, print and write the results."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.o = options
        self.quiet = bool(options["quiet"])

    def progress(self, message: str) -> None:
        if not self.quiet:
            _err(message)

    def levels(self) -> list[tuple[int | None, float | None]]:
        if self.o["concurrency"] and self.o["request_rate"]:
            raise ClientError("give --concurrency or --request-rate, not both")
        if self.o["request_rate"]:
            return [(None, r) for r in parse_levels(self.o["request_rate"], float)]
        return [(c, None) for c in parse_levels(self.o["concurrency"] or "1")]

    def requests(self, embedded: bool) -> Any:
        from .prompts import SyntheticPrompts, load_tokenizer, read_jsonl

        if self.o["input_file"]:
            return read_jsonl(self.o["input_file"], self.o["output_tokens_mean"])
        tokenizer = load_tokenizer(self.o["tokenizer"], embedded)
        return SyntheticPrompts(self.o["input_tokens_mean"], self.o["input_tokens_stddev"],
                                self.o["output_tokens_mean"], self.o["output_tokens_stddev"],
                                self.o["seed"], tokenizer)

    def target(self, urls: tuple[str, ...], model: str | None, api: str = "auto") -> Target:
        """The load on ``urls`` (round-robin; one kind of server) for ``model`` (default: the server's)."""
        mode = self.o["mode"]
        params = params_from_options(self.o)
        if params.temperature:  # sampling: seeded like the prompts
            params = params.replace(seed=self.o["seed"])
        endpoints = tuple(Endpoint.at(url, api) for url in urls)
        if len({e.api for e in endpoints}) > 1:
            raise ClientError(MIXED_KINDS)
        settings = Settings(model or default_model(endpoints[0], mode), mode, self.o["protocol"], params,
                            self.o["timeout"], self.o["idle_timeout"] or None)
        info = read_info(endpoints[0], settings)
        if mode != "stream":
            info.check_batch("use --mode stream")
        return Target(settings, info, endpoints)

    def sides(self, urls: tuple[str, ...]) -> list[Side]:
        """The servers of the run: the ``--url`` load, then one per ``--compare-url`` (each its own kind)."""
        targets = [(self.target(urls, self.o["model"], self.o["api"]), urls)]
        for url in self.o["compare_url"]:
            targets.append((self.target((url,), self.o["compare_model"]), (url,)))
        names = [f"{t.endpoints[0].kind} {t.model}" for t, _ in targets]
        if len(set(names)) < len(names):
            names = [f"{i + 1}:{n}" for i, n in enumerate(names)]
        return [Side(name, target, given) for name, (target, given) in zip(names, targets)]

    def config(self, target: Target, urls: tuple[str, ...]) -> dict[str, Any]:
        keys = ("concurrency", "request_rate", "request_distribution", "requests", "duration", "warmup",
                "input_file", "input_tokens_mean", "input_tokens_stddev", "output_tokens_mean",
                "output_tokens_stddev", "seed")
        settings = target.settings
        timeouts = {"network": target.info.network_timeout(settings.timeout),
                    "idle": settings.idle_timeout if settings.mode == "stream" else None}
        return {"model": target.model, "mode": target.mode, "protocol": settings.protocol, "urls": list(urls),
                "timeouts": timeouts, "params": dict(settings.params.values), **{k: self.o[k] for k in keys},
                "levels": [c if c is not None else r for c, r in self.levels()],
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def execute(self, urls: tuple[str, ...]) -> int:
        from .display import ProgressBar
        from .results import build_document, side_by_side, summarize

        levels = self.levels()
        sides = self.sides(urls)
        embedded = any(side.target.info.embedded for side in sides)  # the same prompts for every server
        runners = [Runner(side.target, self.requests(embedded)) for side in sides]
        for side, runner in zip(sides, runners):
            if self.o["warmup"]:
                self.progress(f"warm-up: {self.o['warmup']} requests" + (f" to {side.name}" if len(sides) > 1
                                                                          else "") + " ...")
                runner.run(concurrency=min(levels[0][0] or 1, self.o["warmup"]), count=self.o["warmup"])
        done: list[list[tuple[LevelResult, dict[str, Any]]]] = [[] for _ in sides]
        for concurrency, rate in levels:
            for side, runner, results in zip(sides, runners, done):
                label = (f"c={concurrency}" if concurrency else f"rate={rate:g}/s") + (
                    f" {side.name}" if len(sides) > 1 else "")
                count = self.o["requests"] or (None if self.o["duration"] else max(8, 4 * (concurrency or 1)))
                bar = ProgressBar(label, sys.stderr, count, self.o["duration"],
                                  live=None if not self.quiet else False)
                level = runner.run(concurrency, rate, count, self.o["duration"], None if self.quiet else bar,
                                   self.o["request_distribution"], self.o["seed"])
                if not self.quiet:
                    bar.close()
                results.append((level, summarize(level, side.target.mode)))
        document = build_document(self.config(sides[0].target, urls), done[0])
        if len(sides) > 1:
            side_by_side(document, [(side.config, results) for side, results in zip(sides, done)])
        self.show(document, done)
        self.write(document)
        return 1 if any(s["error_count"] for results in done for _, s in results) else 0

    def show(self, document: dict[str, Any], done: list[list[tuple[LevelResult, dict[str, Any]]]]) -> None:
        """The level tables on stdout (JSON with --json); several servers: each one's, then side by side."""
        from .display import compare_table, levels_table

        targets = document.get("targets")
        summaries = [[s for _, s in results] for results in done]
        if self.o["json_"]:
            extra = {} if not targets else {
                "targets": [{**{k: v for k, v in t.items() if k != "levels"}, "levels": levels}
                            for t, levels in zip(targets, summaries)],
                "comparison": document["comparison"]}
            click.echo(json.dumps({"config": document["config"], "levels": summaries[0], **extra}, indent=2))
            return
        if not targets:
            click.echo(levels_table(summaries[0]))
            return
        names = [t["name"] for t in targets]
        for target, levels in zip(targets, summaries):
            click.echo(f"{target['name']} ({', '.join(target['urls'])})")
            click.echo(levels_table(levels) + "\n")
        click.echo(f"side by side (ratios to {names[0]})")
        click.echo(compare_table(document["comparison"], names))

    def write(self, document: dict[str, Any]) -> None:
        from .plots import have_matplotlib, write_plots
        from .results import write_csv, write_json

        out = self.o["output_dir"]
        if out is None:
            out = Path("bench-results") / f"{document['config']['model']}-{time.strftime('%Y%m%d-%H%M%S')}"
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        paths = [write_json(document, out / "bench.json"), *write_csv(document, out)]
        formats = plot_formats(self.o["plots"])
        if formats:
            if "png" in formats and not have_matplotlib():
                _err("warning: matplotlib is not installed: no PNG plots (pip install matplotlib)")
            paths += write_plots(document, out, formats)
        self.progress("wrote " + ", ".join(str(p) for p in paths))


def _run(options: dict[str, Any]) -> int:
    from console.server import ServerError
    from console.server.embedded import embedded_server

    bench = BenchRun(options)
    try:
        bench.levels()  # bad options fail before any server starts
        plot_formats(options["plots"])
        if options["api"] == "openai" and not options["url"]:
            raise ClientError("--api openai needs --url (the server's base URL, http://host:port/v1)")
        if options["url"]:
            return bench.execute(tuple(options["url"]))
        model = options["model"] or EMBEDDED_DEFAULTS[options["mode"]]
        with embedded_server(model, bench.progress) as server:
            url = server.grpc_url if options["mode"] == "stream" or options["protocol"] == "grpc" else server.http_url
            return bench.execute((url,))
    except ServerError as exc:
        _err(f"error: {exc}")
        for line in exc.log_tail[-15:]:
            _err(f"  | {line}")
    except (ClientError, OSError, ValueError) as exc:
        _err(f"error: {' '.join(str(exc).split())}")
    except KeyboardInterrupt:
        _err("error: interrupted")
        return 130
    return 1


@click.group(name="bench", invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@click.option("--url", multiple=True,
              help="host:port of a running tritonserver (gRPC for stream, HTTP for batch), or an OpenAI-compatible "
                   "server's base URL (http://host:port/v1); repeat to spread the load round-robin over servers of "
                   "one kind. Without it the embedded model is served for the run.")
@click.option("--api", type=click.Choice(APIS), default="auto", show_default=True,
              help="What --url is: auto (a URL ending with /v1 is OpenAI-compatible), triton or openai.")
@click.option("--compare-url", multiple=True,
              help="Another server (Triton host:port or http://host:port/v1) loaded with the same requests at each "
                   "level and reported beside the first, with ratios (repeatable).")
@click.option("--compare-model", default=None,
              help="Model of the --compare-url servers (default: each server's own default: an OpenAI-compatible "
                   "server's first model, Triton's embedded sample).")
@click.option("--model", default=None, help="Model (default: smollm2_decoupled for stream, smollm2_kv for batch; "
                                            "an OpenAI-compatible server's first model).")
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
@click.option("--input-tokens-mean", type=float, default=64, show_default=True, help="Synthetic prompt length.")
@click.option("--input-tokens-stddev", type=float, default=0, show_default=True)
@click.option("--output-tokens-mean", type=int, default=64, show_default=True,
              help="Tokens to generate (sent as max_tokens; the model may stop earlier at EOS).")
@click.option("--output-tokens-stddev", type=float, default=0, show_default=True)
@click.option("--tokenizer", type=click.Path(file_okay=False), default=None,
              help="Local tokenizer folder to size synthetic prompts (embedded models use their own).")
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
    """Benchmark a served model: TTFT, ITL, latency and throughput per load level (genai-perf names).

    Runs a concurrency sweep (or request rates) with synthetic or JSONL prompts, prints a table,
    and writes bench.json, bench_summary.csv, bench_requests.csv and plots. Exit code 1 when any
    request failed.
    """
    if ctx.invoked_subcommand is None:
        sys.exit(_run(options))


@bench_group.command(context_settings=CONTEXT_SETTINGS)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@click.option("--json", "json_", is_flag=True, help="Print the comparison as JSON.")
def compare(files: tuple[str, ...], json_: bool) -> None:
    """Put bench runs (bench.json files) side by side, with ratios to the first."""
    from .display import compare_table
    from .results import compare as compare_runs
    from .results import load_json

    try:
        documents = [load_json(f) for f in files]
    except ValueError as exc:
        _err(f"error: {exc}")
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
@click.option("--json", "json_", is_flag=True, help="Print one JSON object (ratios, targets, context).")
def report(tokens: int, repeats: int, json_: bool) -> None:
    """The project's performance report on the embedded model: ratios against their targets."""
    from console.server import ServerError

    from .report import ReportOptions, format_report, run_report

    if tokens < 8 or repeats < 1:
        _err("error: --tokens must be >= 8 and --repeats >= 1")
        sys.exit(1)
    try:
        result = run_report(ReportOptions(tokens=tokens, repeats=repeats), progress=_err)
    except (ServerError, ClientError, RuntimeError, OSError) as exc:
        _err(f"error: {' '.join(str(exc).split())}")
        sys.exit(1)
    except KeyboardInterrupt:
        _err("error: interrupted")
        sys.exit(130)
    click.echo(json.dumps(result.as_dict(), indent=2) if json_ else format_report(result))
