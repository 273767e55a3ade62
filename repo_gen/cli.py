"""The generator's command line: ``generate-llm-model-repo`` (the seed's flags) and ``qaic-console repo``.

``repo gen`` is the seed's ``generate_llm_model_repo.py``; ``repo samples`` writes the sample models and
``repo list`` shows what a repository holds. Every bad input ends in one ``error: ...`` line on stderr
(exit code 2; 1 when the disk fails) and nothing written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import click

from backend_model import compile_config
from backend_model.build import ENGINES
from backend_model.contract import SessionError
from backend_model.qaic_session import find_qpc

from .inspection import ModelInfo, detect_model_type, list_models
from .samples import EMBEDDED_SAMPLES, SAMPLES, SEED_SAMPLES, write_samples
from .writer import MODEL_TYPES, PRECISIONS, ModelSpec, RepoError, check_backend_dir, check_name, write_model

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}
DEFAULT_OUT = "llm_model_dir"
INPUT_ERRORS = (RepoError, compile_config.CompileConfigError, SessionError)


# --------------------------------------------------------------------------- one-line errors


class _OneLine:
    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class InputError(_OneLine, click.UsageError):
    """A bad input (exit code 2)."""


class DiskError(_OneLine, click.ClickException):
    """The write itself failed (exit code 1)."""


class _OneLineUsage:
    """click's own usage errors (missing option, bad choice) as one ``error:`` line."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)  # type: ignore[misc]
        except click.UsageError as exc:
            raise InputError(exc.format_message(), ctx) from None


class OneLineCommand(_OneLineUsage, click.Command):
    """A command whose usage errors are one ``error:`` line."""


class OneLineGroup(_OneLineUsage, click.Group):
    """A group whose usage errors (unknown command included) are one ``error:`` line."""

    command_class = OneLineCommand

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, Any, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            raise InputError(exc.format_message(), ctx) from None


@contextlib.contextmanager
def _errors(writing: Path | None = None) -> Iterator[None]:
    """The generator's exceptions as one-line CLI errors; ``writing``: the folder a disk error concerns."""
    try:
        yield
    except INPUT_ERRORS as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        prefix = f"cannot write {writing}: " if writing is not None else ""
        raise DiskError(prefix + " ".join(_os_reason(exc).split())) from None


def _os_reason(exc: OSError) -> str:
    """shutil.Error carries a list of (src, dst, why): name the first source, not the temp destination."""
    failures = exc.args[0] if isinstance(exc, shutil.Error) and exc.args else None
    if isinstance(failures, list) and failures and len(failures[0]) == 3:
        src, _, why = failures[0]
        return f"cannot copy {src} ({why})"
    return str(exc)


def _note(message: str) -> None:
    click.echo(message, err=True)


# --------------------------------------------------------------------------- help text


def _compile_keys_help() -> str:
    lines = ["\b", "compile_config.json keys (a key that is absent takes its default):"]
    for key, (_, default, _, rule) in compile_config.SCHEMA.items():
        lines.append(f"  {key:<23} {rule}; default {'none' if default is None else json.dumps(default)}")
    lines += ["full_batch_size turns on continuous batching: more prompts than full_batch_size are queued;",
              "without it prompts are truncated or repeated to batch_size. Unknown keys and wrong types are errors."]
    return "\n".join(lines)


def _samples_help() -> str:
    lines = ["\b", "Samples (a --model_name that is one of them takes its defaults; flags override):"]
    for name, spec in SAMPLES.items():
        mode = "decoupled (stream)" if spec.decoupled else "batch"
        lines.append(f"  {name:<25} {spec.model_type:<9} {mode:<19} {spec.hf_model_name}")
    return "\n".join(lines)


GEN_EPILOG = "\n\n".join([
    "\b\nExamples (the seed's):\n"
    "  generate-llm-model-repo --model_name mistral_7b --aic_binary_dir <path/to/qpc> \\\n"
    "      --python_backend_dir /opt/qti-aic/integrations/triton/backends/qaic/qaic_backend_python/\n"
    "  generate-llm-model-repo --model_name my_model --aic_binary_dir <path/to/qpc> \\\n"
    "      --compile_config_path cfg.json --hf_model_name org/model --model_type kv_cache --decoupled",
    _samples_help(),
    _compile_keys_help(),
])


# --------------------------------------------------------------------------- repo gen


def read_compile_config(path: Path) -> dict[str, Any]:
    """The keys a compile_config.json gives, validated; copied as given but for a relative onnx_path,
    which is taken relative to the file and written absolute."""
    compile_config.load(path)  # errors name the file and the key
    raw = json.loads(path.read_text(encoding="utf-8"))
    if raw.get("onnx_path"):
        raw["onnx_path"] = str((path.parent / Path(raw["onnx_path"]).expanduser()).resolve())
    return raw


def _qpc_dir(aic_binary_dir: Path | None) -> str:
    """The QPC folder as an absolute path (the server may run elsewhere), or ''."""
    if aic_binary_dir is None:
        return ""
    try:
        find_qpc(aic_binary_dir)
    except SessionError as exc:
        raise RepoError(f"--aic_binary_dir: {exc}") from None
    return str(aic_binary_dir.expanduser().resolve())


def resolve_spec(
    model_name: str,
    *,
    aic_binary_dir: Path | None = None,
    compile_config_path: Path | None = None,
    hf_model_name: str | None = None,
    model_type: str | None = None,
    decoupled: bool | None = None,
    engine: str | None = None,
    precision: str | None = None,
    cpu_threads: int | None = None,
) -> ModelSpec:
    """Flags over a sample's defaults (or the template's); the model type may come from the QPC."""
    check_name(model_name)
    base = SAMPLES.get(model_name, ModelSpec(model_name))
    qpc = _qpc_dir(aic_binary_dir)
    compiled = read_compile_config(compile_config_path) if compile_config_path else dict(base.compile)
    if model_type is None and qpc and model_name not in SAMPLES:
        model_type = detect_model_type(qpc, _note)
        _note(f"model type: {model_type}")
    return dataclasses.replace(
        base,
        model_type=model_type or base.model_type,
        decoupled=base.decoupled if decoupled is None else decoupled,
        aic_binary_dir=qpc or base.aic_binary_dir,
        hf_model_name=hf_model_name or base.hf_model_name,
        compile=compiled,
        engine=engine or base.engine,
        precision=precision or base.precision,
        cpu_threads=base.cpu_threads if cpu_threads is None else cpu_threads,
    )


@click.command("gen", cls=OneLineCommand, context_settings=CONTEXT_SETTINGS, epilog=GEN_EPILOG)
@click.option("--model_name", "--model-name", "model_name", required=True,
              help="Model folder name (letters, digits, '_', '-', '.'); a sample's name takes its defaults.")
@click.option("--aic_binary_dir", "--aic-binary-dir", "aic_binary_dir", type=click.Path(path_type=Path),
              help="Compiled QPC folder (holding programqpc.bin); the backend loads it and skips download "
                   "and compilation.")
@click.option("--python_backend_dir", "--python-backend-dir", "python_backend_dir", type=click.Path(path_type=Path),
              help="Backend folder (with model.py) copied into <model>/1/. Default: the bundled backend.")
@click.option("--compile_config_path", "--compile-config-path", "compile_config_path", type=click.Path(path_type=Path),
              help="compile_config.json to validate and copy into the model folder (replaces a sample's).")
@click.option("--hf_model_name", "--hf-model-name", "hf_model_name", is_flag=False, flag_value="", default=None,
              help="Hugging Face model: tokenizer, and compiled when there is no QPC. Given bare (as in the "
                   "seed's example) it keeps the default: the sample's, else none (CPU: the embedded SmolLM2).")
@click.option("--model_type", "--model-type", "model_type", type=click.Choice(MODEL_TYPES),
              help="Sets use_kv_cache. Default: the sample's; else read from the QPC; else kv_cache.")
@click.option("--decoupled/--no-decoupled", default=None,
              help="Decoupled transaction policy (stream responses, gRPC). Default: the sample's, else batch.")
@click.option("-o", "--output_dir", "--output-dir", "output_dir", type=click.Path(path_type=Path),
              default=DEFAULT_OUT, show_default=True, help="Model repository to write into.")
@click.option("--force", is_flag=True, help="Replace an existing model folder.")
@click.option("--engine", type=click.Choice(ENGINES),
              help="auto (default): the card when QEfficient is importable, else the CPU. onnx: the card's "
                   "ONNX Runtime twin on the compile config's onnx_path, or on a graph exported into "
                   "<model>/onnx/ (takes about a minute for the embedded model).")
@click.option("--precision", type=click.Choice(PRECISIONS), help="CPU engine weights (default fp32).")
@click.option("--cpu_threads", "--cpu-threads", "cpu_threads", type=click.IntRange(min=0),
              help="CPU engine: torch threads for this model (default 0: torch's default). Several CPU models "
                   "in one server on few cores run better with 1 each.")
def gen(model_name: str, aic_binary_dir: Path | None, python_backend_dir: Path | None,
        compile_config_path: Path | None, hf_model_name: str | None, model_type: str | None,
        decoupled: bool | None, output_dir: Path, force: bool, engine: str | None, precision: str | None,
        cpu_threads: int | None) -> None:
    """Write <output_dir>/<model_name>/: config.pbtxt, compile_config.json and 1/ (the backend)."""
    with _errors(writing=output_dir / model_name):
        check_name(model_name)
        if (output_dir / model_name).exists() and not force:  # before a QPC load that may take minutes
            raise RepoError(f"{output_dir / model_name} already exists (use --force to replace it)")
        if python_backend_dir is not None:
            check_backend_dir(python_backend_dir)
        spec = resolve_spec(model_name, aic_binary_dir=aic_binary_dir, compile_config_path=compile_config_path,
                            hf_model_name=hf_model_name, model_type=model_type, decoupled=decoupled,
                            engine=engine, precision=precision, cpu_threads=cpu_threads)
        _warn_hf(hf_model_name, spec)
        target = write_model(spec, output_dir, python_backend_dir=python_backend_dir, force=force, progress=_note)
    mode = "decoupled" if spec.decoupled else "batch"
    click.echo(f"wrote {target} ({spec.model_type}, {mode}, source {_source(spec)})")


def _source(spec: ModelSpec) -> str:
    return spec.aic_binary_dir or spec.hf_model_name or "embedded"


def _warn_hf(given: str | None, spec: ModelSpec) -> None:
    if given == "":
        _note(f"note: --hf_model_name given without a value: using {spec.hf_model_name or 'none'}")
    if spec.aic_binary_dir and not spec.hf_model_name:
        _note("warning: no --hf_model_name: on a card the backend loads the QPC's tokenizer from it")


# --------------------------------------------------------------------------- repo samples


@click.command("samples", cls=OneLineCommand, context_settings=CONTEXT_SETTINGS, epilog=_samples_help())
@click.option("--embedded", is_flag=True,
              help="Write the four embedded SmolLM2 samples (they run on the CPU anywhere) instead of the seed's.")
@click.option("-o", "--output_dir", "--output-dir", "output_dir", type=click.Path(path_type=Path),
              default=DEFAULT_OUT, show_default=True, help="Model repository to write into.")
@click.option("--force", is_flag=True, help="Replace existing model folders.")
def samples(embedded: bool, output_dir: Path, force: bool) -> None:
    """Write the seed's four sample models (or, with --embedded, the four embedded ones)."""
    with _errors():
        written = write_samples(EMBEDDED_SAMPLES if embedded else SEED_SAMPLES, output_dir, force=force)
    for path in written:
        click.echo(f"wrote {path}")


# --------------------------------------------------------------------------- repo list


def format_table(models: list[ModelInfo]) -> str:
    """A plain, aligned table: one row per model."""
    header = ("MODEL", "TYPE", "DECOUPLED", "COMPILE", "SOURCE", "VALID")
    rows = [header] + [
        (m.name, m.model_type, {True: "yes", False: "no", None: "?"}[m.decoupled], m.compile_summary(), m.source,
         "yes" if m.valid else "no: " + "; ".join(m.problems))
        for m in models
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)


@click.command("list", cls=OneLineCommand, context_settings=CONTEXT_SETTINGS)
@click.argument("directory", default=DEFAULT_OUT, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON array (every field, compile config with defaults).")
def list_command(directory: Path, as_json: bool) -> None:
    """Show each model of DIRECTORY (default llm_model_dir): type, mode, source, dimensions, validity."""
    with _errors():
        models = list_models(directory)
    if as_json:
        click.echo(json.dumps([m.to_json() for m in models], indent=2))
    elif models:
        click.echo(format_table(models))
    else:
        click.echo(f"no models in {directory}")


# --------------------------------------------------------------------------- groups and entry point


@click.group("repo", cls=OneLineGroup, invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@click.pass_context
def repo_group(ctx: click.Context) -> None:
    """Generate and inspect Triton model repositories (llm_model_dir/<model>/)."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


repo_group.add_command(gen)
repo_group.add_command(samples)
repo_group.add_command(list_command)


def main() -> None:
    """``generate-llm-model-repo``: the seed's generate_llm_model_repo.py."""
    gen.main(prog_name="generate-llm-model-repo")


if __name__ == "__main__":
    main()
