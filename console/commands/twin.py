"""``qaic-console onnx export`` and ``qaic-console check``: the card's twin from the command line.

Progress goes to stderr, results to stdout. Bad input: one ``error: ...`` line, exit code 2;
``check`` exits 1 when the paths disagree.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from backend_model.contract import compile_config, specializations
from backend_model.models import ModelSourceError
from backend_model.sessions.protocol import SessionError
from console.clients.errors import ClientError
from console.clients.events import split_prompts

if TYPE_CHECKING:  # the agreement runs the engines (torch): imported when a check runs
    from console.twin.agreement import Agreement

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}
DEFAULT_PROMPTS = "My name is|The capital of France is|def fibonacci(n):"
CHECK_EXPORT = {"ctx_len": 256, "prefill_seq_len": 32, "batch_size": 1}  # a check's own export, without --onnx
DIMENSIONS = ("ctx_len", "prefill_seq_len", "batch_size", "full_batch_size")
ERRORS = (SessionError, ModelSourceError, compile_config.CompileConfigError, ClientError, ValueError, OSError)
MODEL_HELP = "embedded (the embedded SmolLM2) or a local Hugging Face folder of a Llama-family model."


def _note(message: str) -> None:
    click.echo(message, err=True)


def _fail(exc: Exception) -> None:
    click.echo(f"error: {' '.join(str(exc).split())}", err=True)
    sys.exit(2)


@click.group("onnx", invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@click.pass_context
def onnx_group(ctx: click.Context) -> None:
    """QEfficient-style ONNX graphs: what a QPC is compiled from, and what the card's twin runs."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def dimension_options(defaults: dict[str, Any]):
    """The compile dimensions as options (``defaults``: shown and used when not given)."""
    helps = {"ctx_len": "KV cache length the graph is compiled for.", "prefill_seq_len": "Tokens per prefill chunk.",
             "batch_size": "Rows per run (regular batching).",
             "full_batch_size": "Continuous batching: a graph with batch_index and a KV cache of this many slots."}

    def apply(command):
        for key in reversed(DIMENSIONS):
            command = click.option(f"--{key.replace('_', '-')}", key, type=int, default=defaults.get(key),
                                   show_default=key in defaults, help=helps[key])(command)
        return command

    return apply


@onnx_group.command("export", context_settings=CONTEXT_SETTINGS)
@click.option("--model", "source", default="embedded", show_default=True, help=MODEL_HELP)
@dimension_options({"ctx_len": 128, "prefill_seq_len": 32, "batch_size": 1})
@click.option("-o", "--output-dir", "output_dir", required=True, type=click.Path(path_type=Path),
              help="Folder for model.onnx and specializations.json (created if missing).")
def export_command(source: str, output_dir: Path, **dims: int | None) -> None:
    """Export a model with QEfficient's tensor interface (about a minute for the embedded model).

    The graph's axes stay dynamic; specializations.json beside it holds the given dimensions, as a
    compile would write them. Run it on the card's twin with `qaic-console check --onnx DIR`, or
    serve it with `generate-llm-model-repo --engine onnx` and an onnx_path in the compile config.
    """
    from repo_gen.onnx_export import export

    try:
        done = export(source, output_dir, progress=_note, **_dimensions(dims))
    except ERRORS as exc:
        _fail(exc)
    click.echo(f"{done.graph} ({done.layers} layers, exported in {done.seconds:.1f} s; {done.specializations.name} "
               "beside it)")


@click.command("check", context_settings=CONTEXT_SETTINGS)
@click.option("--model", "source", default="embedded", show_default=True, help=MODEL_HELP)
@click.option("--onnx", "graph", type=click.Path(path_type=Path),
              help="The exported graph (.onnx, or its folder: QEfficient's export or `onnx export`'s). Default: "
                   "export --model now into a temporary folder (ctx_len 256, prefill_seq_len 32, batch_size 1).")
@dimension_options({})
@click.option("--qpc", type=click.Path(path_type=Path),
              help="A compiled QPC of the same model: adds the card's path (needs QEfficient and a card).")
@click.option("--prompt", "prompt", default=DEFAULT_PROMPTS, show_default=True,
              help="Prompts, separated by '|' (\\| for a literal |).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=32, show_default=True,
              help="Greedy tokens per prompt (fewer where ctx_len ends first).")
@click.option("--json", "as_json", is_flag=True,
              help='One object: {"prompts": [...], "paths": {"hf": [[ids...], ...], ...}, "match": true|false}.')
@click.option("--predict", "predict_config", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="A compile_config.json: instead of the agreement, how far the MX formats it asks (mxfp6_matmul, "
                   "mxint8_kv_cache) move the answers from fp32's (an eval on the CPU engine, or on the twin of "
                   "--onnx), before any compile.")
def check(source: str, graph: Path | None, qpc: Path | None, prompt: str, max_tokens: int, as_json: bool,
          predict_config: Path | None, **dims: int | None) -> None:
    """Token-exact greedy agreement: HF full recompute, the CPU KV engine, the ONNX twin (and the card).

    Prints a table and the first divergence (prompt, position, tokens and their text); exits 1 when
    any path differs from Hugging Face's tokens. The dimension options compile the check's own
    export, or a graph without specializations.json beside it (QEfficient's export writes none;
    default: QEfficient's compile defaults); a graph with one takes its dimensions from it.

    With --predict COMPILE_CONFIG: the eval table of fp32 and the config's MX formats on the prompts (exact
    match, first divergence, NLL, perplexity, KL) and one line per format saying how far the answers move.
    """
    from console.twin.agreement import check as run_check

    given = {k: v for k, v in dims.items() if v is not None}
    if predict_config is not None:
        if qpc is not None or given or as_json:
            raise click.UsageError("--predict runs an eval: drop --qpc, --json and the dimension options")
        _predict(predict_config, source, graph, prompt, max_tokens)
        return
    try:
        prompts = split_prompts(prompt)
        with tempfile.TemporaryDirectory(prefix="qaic-check-") as scratch:
            fallback = None
            if graph is None:
                from repo_gen.onnx_export import export

                graph = export(source, scratch, progress=_note, **_dimensions({**CHECK_EXPORT, **given})).graph
            else:
                fallback = _compile_of(graph, given)
            result = run_check(source, graph, prompts, max_tokens, qpc, fallback, progress=_note)
    except ERRORS as exc:
        _fail(exc)
    click.echo(json.dumps(result.to_json()) if as_json else report(result))
    sys.exit(0 if result.match else 1)


def _predict(config: Path, source: str, graph: Path | None, prompt: str, max_tokens: int) -> None:
    """``check --predict``: the eval of fp32 and the compile config's MX formats, and how far each moves."""
    from console.commands.eval import run_eval
    from console.eval import predict, report
    from console.eval.run import CORPUS

    try:
        asked = predict.choices(config)
        if not asked:
            click.echo(f"{config} asks no MX format (mxfp6_matmul and mxint8_kv_cache are false): the card computes "
                       "with the exported weights in fp16, and the answers move from fp32's only by that rounding")
            return
        reference, candidates = predict.specs(asked, str(graph) if graph else None)
        options = {"source": source, "likelihood": True, "corpus": CORPUS, "quiet": False}
        result = run_eval(reference, candidates, split_prompts(prompt), (), max_tokens, options)
    except ERRORS as exc:
        _fail(exc)
    click.echo(report.table(result))
    click.echo("\n".join([*predict.verdicts(result), predict.saving(config, source)]).rstrip())


def _compile_of(graph: Path, given: dict[str, int]) -> list[dict[str, Any]]:
    """The specializations the options compile a graph for that has none beside it (options that a
    specializations.json beside it would override are an error)."""
    beside = specializations.beside(specializations.find_graph(graph))
    if beside is not None and given:
        options = ", ".join(f"--{k.replace('_', '-')}" for k in given)
        raise ValueError(f"{beside} fixes the graph's dimensions: drop {options}")
    return specializations.build(**_dimensions(given))


def _dimensions(given: Mapping[str, int | None]) -> dict[str, int]:
    """The four dimensions, checked, with compile_config's defaults (full_batch_size 0: regular)."""
    c = compile_config.validate({k: v for k, v in given.items() if v is not None}, "options")
    return {k: c[k] or 0 for k in DIMENSIONS}


def report(result: Agreement) -> str:
    """The table (one row per prompt: tokens compared, where each path diverges) and the verdict."""
    from console.twin.agreement import REFERENCE

    names = list(result.paths)
    rows: list[tuple[Any, ...]] = [("PROMPT", "TOKENS", *names)]
    for p, text in enumerate(result.prompts):
        diverged = [result.divergence(p, name) if name != REFERENCE else None for name in names]
        cells = ["ok" if d is None else f"differs at {d.position}" for d in diverged]
        rows.append((_short(text), str(len(result.paths[REFERENCE][p])), *cells))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    first = result.first_divergence()
    if first is None:
        lines.append(f"match: {', '.join(names)} agree on every token")
    else:
        lines.append(
            f"first divergence: prompt {first.prompt} ({_short(result.prompts[first.prompt])!r}), position "
            f"{first.position}: {REFERENCE} {_token(result, first.expected)}, {first.path} {_token(result, first.got)}"
        )
    return "\n".join(lines)


def _short(text: str, width: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _token(result: Agreement, token: int | None) -> str:
    if token is None:
        return "(ended)"
    return f"{token} {result.text(token)!r}"
