"""One ``bench`` run: its levels, its servers (the ``--url`` load and each ``--compare-url``), the load at
each level, and the tables, JSON, CSV files and plots it leaves."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from console.clients import ModelInfo, UsageError
from console.core.adapters import Adapter, adapter_for
from console.core.embeddings import probed
from console.core.request import Settings, read_info
from console.infra.extras import needs

from . import embeddings
from .display import ProgressBar, adapter_tables, compare_table, levels_table, server_table, table
from .fleet_side import FleetSide
from .images import IMAGES, TEXT, read_folder, section, section_rows, text_only, with_images
from .images import NOTE as IMAGES_NOTE
from .images import write_csv as write_images_csv
from .load import LevelResult, Runner, Target
from .options import BenchOptions
from .page import FORMATS, write_plots
from .plots import have_matplotlib
from .prompts import SyntheticPrompts, load_tokenizer, read_jsonl
from .results import build_document, side_by_side, summarize, write_csv, write_json
from .server_view import ServerSide
from .workloads import Slo, check_turns


def parse_levels(text: str | None, kind: type = int) -> list[Any]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; ClientError on anything else."""
    if text is None:
        return []
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"expected a comma-separated list of numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise UsageError(f"levels must be positive numbers, got {text!r}")
    return values


def plot_formats(text: str) -> tuple[str, ...]:
    """``"png,html"`` / ``"both"`` / ``"none"`` -> the formats; ClientError on an unknown one."""

    parts = {p.strip().lower() for p in text.split(",") if p.strip()}
    if "both" in parts:
        parts = (parts - {"both"}) | set(FORMATS)
    parts.discard("none")
    unknown = parts - set(FORMATS)
    if unknown:
        raise UsageError(f"--plots: unknown format {sorted(unknown)[0]!r} (png, html, both, none)")
    return tuple(f for f in FORMATS if f in parts)


def to_stderr(message: str) -> None:
    click.echo(message, err=True)


MIXED_KINDS = ("the --url values name servers of different kinds ({}): several --url spread one load round-robin "
               "over servers of one kind; put another server beside the first with --compare-url")


def short_name(model: str, width: int = 40) -> str:
    """A model's name for the tables: a long path (llama.cpp's server names its model by its file) by its file name."""
    return model.rsplit("/", 1)[-1] if len(model) > width else model


@dataclass(frozen=True)
class Side:
    """One server of a run: its name in the tables, the target loaded, the URLs given for it; in an images run, the
    server's name and what this side sends (:data:`.images.IMAGES` or :data:`.images.TEXT`)."""

    name: str
    target: Target
    urls: tuple[str, ...]
    server: str = ""
    inputs: str = ""

    @property
    def config(self) -> dict[str, Any]:
        server = self.target.servers[0]
        return {"name": self.name, "api": server.kind, "model": self.target.model, "urls": list(self.urls),
                **({"server": self.server, "inputs": self.inputs} if self.inputs else {})}


class BenchRun:
    """One ``bench`` invocation: resolve the target, run the levels, print and write the results."""

    def __init__(self, options: BenchOptions) -> None:
        self.options = options
        self.quiet = options.quiet
        # bad inputs fail before any server; the input file and the images are read once for every side
        self.images = read_folder(options.images) if options.images else ()
        self.from_file = read_jsonl(options.input_file, options.output_tokens_mean) if options.input_file else []
        # an images run: --images, or an input file whose prompts bring images
        self.with_images = bool(self.images) or any(r.images for r in self.from_file)
        if self.with_images and options.turns > 1:
            raise UsageError("images go with single requests: a conversation's later turns (--turns) carry its "
                             "history as text, without its images")

    def progress(self, message: str) -> None:
        if not self.quiet:
            to_stderr(message)

    def levels(self) -> list[tuple[int | None, float | None]]:
        if self.options.concurrency and self.options.request_rate:
            raise UsageError("give --concurrency or --request-rate, not both")
        check_turns(self.options.turns, self.options.request_rate)
        embeddings.check(self.options.endpoint, self.options.batch_size, self.options.turns, self.options.adapters)
        Slo.parse(self.options.slo, self.mode)
        if self.options.request_rate:
            return [(None, r) for r in parse_levels(self.options.request_rate, float)]
        return [(c, None) for c in parse_levels(self.options.concurrency or "1")]

    @property
    def embeddings(self) -> bool:
        return self.options.endpoint == "embeddings"

    @property
    def mode(self) -> str:
        """How the requests go: ``--mode``, or one answer a request for embeddings."""
        return "batch" if self.embeddings else self.options.mode

    def requests(self, embedded: bool, inputs: str = "") -> Any:
        """The prompts of a side: with their images (``inputs`` IMAGES), without (TEXT), or as they come; an
        embeddings run's: ``--batch-size`` prompts each, a word a token without ``--tokenizer`` (the embedded chat
        model's tokenizer is not an embedding model's)."""
        if self.options.input_file:
            requests: Any = list(self.from_file)
        else:
            tokenizer = load_tokenizer(self.options.tokenizer, embedded and not self.embeddings)
            requests = SyntheticPrompts(self.options.input_tokens_mean, self.options.input_tokens_stddev,
                                        self.options.output_tokens_mean, self.options.output_tokens_stddev,
                                        self.options.seed, tokenizer, self.options.shared_prefix_tokens)
        if self.embeddings:
            return embeddings.in_batches(requests, self.options.batch_size)
        if inputs == IMAGES:
            return with_images(requests, self.images)
        return text_only(requests) if inputs == TEXT else requests

    def target(self, urls: tuple[str, ...], model: str | None, api: str = "auto",
               grpc_url: str | None = None, metrics_urls: tuple[str, ...] = ()) -> Target:
        """The load on ``urls`` (round-robin; one kind of server) for ``model`` (default: the server's);
        ``metrics_urls``: their metrics pages, in the same order, where the adapter's guess would be wrong."""
        mode = self.options.mode
        params = self.options.params
        if params.temperature:  # sampling: seeded like the prompts
            params = params.replace(seed=self.options.seed)
        if len(metrics_urls) > len(urls):
            raise UsageError(f"{len(metrics_urls)} --metrics-url for {len(urls)} --url: give one per --url, in order")
        pages = (*metrics_urls, *[None] * (len(urls) - len(metrics_urls)))
        servers = tuple(adapter_for(url, api, grpc_url, page) for url, page in zip(urls, pages))
        kinds = {s.label for s in servers}
        if len(kinds) > 1:
            raise UsageError(MIXED_KINDS.format(" and ".join(sorted(kinds))))
        if self.embeddings:  # one request a batch of texts, over HTTP
            info = probed(servers[0], model, self.options.timeout)
            settings = Settings(info.name, "batch", "http", params, self.options.timeout, None)
            return embeddings.EmbeddingTarget(settings, info, servers, batch=self.options.batch_size)
        settings = Settings(model or servers[0].default_model(mode), mode, self.options.protocol, params,
                            self.options.timeout, self.options.idle_timeout or None,
                            chat=None if self.with_images else False)  # images go in a chat where the model has one
        info = read_info(servers[0], settings)
        if mode != "stream":
            info.check_batch("use --mode stream")
        chat = self.with_images and servers[0].has_chat_template(info, "")  # as prepare() decides
        refusal = servers[0].image_refusal(info, mode, chat) if self.with_images else ""
        if refusal:
            raise UsageError(f"--images: {refusal}")
        return Target(settings, info, servers, self.picks(servers[0], settings))

    def picks(self, server: Adapter, settings: Settings) -> tuple[ModelInfo, ...]:
        """The ``--adapters`` requests go to in turn (each a LoRA adapter a model serves, or a model), read once."""
        names = [name.strip() for name in (self.options.adapters or "").split(",") if name.strip()]
        if self.options.adapters is not None and not names:
            raise UsageError("--adapters needs names: a,b (LoRA adapters, or the model itself for its own weights)")
        return tuple(read_info(server, replace(settings, model=name)) for name in names)

    def sides(self, urls: tuple[str, ...], grpc_url: str | None = None, metrics_urls: tuple[str, ...] = ()
              ) -> list[Side]:
        """The servers of the run: the ``--url`` load, then one per ``--compare-url`` (each its own kind)."""
        targets = [(self.target(urls, self.options.model, self.options.api, grpc_url, metrics_urls), urls)]
        for url in self.options.compare_url:
            targets.append((self.target((url,), self.options.compare_model), (url,)))
        names = [f"{t.servers[0].label} {short_name(t.model)}" for t, _ in targets]
        if len(set(names)) < len(names):
            names = [f"{i + 1}:{n}" for i, n in enumerate(names)]
        if self.with_images:  # each server with images, then with the same prompts as text only
            return [Side(f"{name} {inputs}", target, given, name, inputs)
                    for name, (target, given) in zip(names, targets) for inputs in (IMAGES, TEXT)]
        return [Side(name, target, given) for name, (target, given) in zip(names, targets)]

    def config(self, target: Target, urls: tuple[str, ...]) -> dict[str, Any]:
        keys = ("endpoint", "batch_size", "concurrency", "request_rate", "request_distribution", "requests", "duration",
                "warmup",
                "input_file", "images", "input_tokens_mean", "input_tokens_stddev", "output_tokens_mean",
                "output_tokens_stddev", "shared_prefix_tokens", "turns", "slo", "seed")
        settings, server = target.settings, target.servers[0]
        timeouts = {"network": target.info.network_timeout(settings.timeout),
                    "idle": settings.idle_timeout if settings.mode == "stream" else None}
        spoke = server.url(settings.mode, settings.protocol)[1]  # what the run spoke: gRPC for a Triton stream
        asked = {k: getattr(self.options, k) for k in keys}
        return {"model": target.model, "mode": target.mode, "api": server.kind, "protocol": spoke, "urls": list(urls),
                "timeouts": timeouts, "params": dict(settings.params.values), **asked,
                "levels": [c if c is not None else r for c, r in self.levels()],
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def server_side(self, target: Target, first: bool) -> Any:
        """Where a level's server figures come from: each server's own metrics, before and after a level; for the
        --url load with --prometheus, that Prometheus (every server behind the URL)."""

        return FleetSide(target, self.options.prometheus) if first and self.options.prometheus else ServerSide(target)

    def execute(self, urls: tuple[str, ...], grpc_url: str | None = None, metrics_urls: tuple[str, ...] = ()) -> int:
        """Run every level on the servers ``urls`` name (``grpc_url``: their gRPC endpoint, ``metrics_urls``: their
        metrics pages, when known)."""
        levels = self.levels()
        sides = self.sides(urls, grpc_url, metrics_urls)
        embedded = any(side.target.info.embedded for side in sides)  # the same prompts for every server
        runners = [Runner(side.target, self.requests(embedded, side.inputs), self.options.turns) for side in sides]
        slo = Slo.parse(self.options.slo, self.mode)
        views = [self.server_side(side.target, first=i == 0) for i, side in enumerate(sides)]
        for side, runner, view in zip(sides, runners, views):
            if self.options.warmup:
                self.progress(f"warm-up: {self.options.warmup} requests" + (f" to {side.name}" if len(sides) > 1
                                                                          else "") + " ...")
                view.before()
                warmup = runner.run(concurrency=min(levels[0][0] or 1, self.options.warmup), count=self.options.warmup)
                view.after(warmup, {})  # the server has counted the warm-up before the first level's scrape
        done: list[list[tuple[LevelResult, dict[str, Any]]]] = [[] for _ in sides]
        for concurrency, rate in levels:
            for side, runner, results, view in zip(sides, runners, done, views):
                label = (f"c={concurrency}" if concurrency else f"rate={rate:g}/s") + (
                    f" {side.name}" if len(sides) > 1 else "")
                count = self.options.requests or (None if self.options.duration else max(8, 4 * (concurrency or 1)))
                bar = ProgressBar(label, sys.stderr, count, self.options.duration,
                                  live=None if not self.quiet else False)
                view.before()
                level = runner.run(concurrency, rate, count, self.options.duration, None if self.quiet else bar,
                                   self.options.request_distribution, self.options.seed)
                if not self.quiet:
                    bar.close()
                summary = (embeddings.summarize(level, side.target.batch, slo)
                           if isinstance(side.target, embeddings.EmbeddingTarget) else
                           summarize(level, side.target.mode, slo))
                results.append((level, {**summary, **view.after(level, summary)}))
        document = build_document(self.config(sides[0].target, urls), done[0])
        if len(sides) > 1:
            side_by_side(document, [(side.config, results) for side, results in zip(sides, done)])
        if self.with_images:
            document["images"] = section(document["targets"])
        self.show(document, done)
        self.write(document)
        return 1 if any(s["error_count"] for results in done for _, s in results) else 0

    def show(self, document: dict[str, Any], done: list[list[tuple[LevelResult, dict[str, Any]]]]) -> None:
        """The level tables on stdout (JSON with --json); several servers: each one's, then side by side."""

        targets = document.get("targets")
        summaries = [[s for _, s in results] for results in done]
        if self.options.json_:
            extra = {} if not targets else {
                "targets": [{**{k: v for k, v in t.items() if k != "levels"}, "levels": levels}
                            for t, levels in zip(targets, summaries)],
                "comparison": document["comparison"]}
            extra.update({"images": document["images"]} if document.get("images") else {})
            click.echo(json.dumps({"config": document["config"], "levels": summaries[0], **extra}, indent=2))
            return
        if not targets:
            click.echo(levels_table(summaries[0]) + "\n" + server_table(summaries[0]) + adapter_tables(summaries[0]))
            return
        names = [t["name"] for t in targets]
        for target, levels in zip(targets, summaries):
            click.echo(f"{target['name']} ({', '.join(target['urls'])})")
            click.echo(levels_table(levels) + "\n" + server_table(levels) + "\n")
        click.echo(f"side by side (ratios to {names[0]})")
        click.echo(compare_table(document["comparison"], names))
        if document.get("images"):
            click.echo(f"\nimages beside text only\n{table(*section_rows(document['images']))}\n  {IMAGES_NOTE}")

    def write(self, document: dict[str, Any]) -> None:
        out = self.options.output_dir
        if out is None:
            out = Path("bench-results") / f"{document['config']['model']}-{time.strftime('%Y%m%d-%H%M%S')}"
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        paths = [write_json(document, out / "bench.json"), *write_csv(document, out)]
        if document.get("images"):
            paths.append(write_images_csv(document["images"], out))
        formats = plot_formats(self.options.plots)
        if formats:
            if "png" in formats and not have_matplotlib():
                to_stderr(f"warning: no PNG plots: {needs('bench', 'matplotlib')}")
            paths += write_plots(document, out, formats)
        self.progress("wrote " + ", ".join(str(p) for p in paths))
