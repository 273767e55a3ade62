"""``qaic-console repo``: generate (the seed's command, :mod:`repo_gen.command`), write samples, list a repository.

``repo gen`` is the seed's ``generate_llm_model_repo.py`` with its own argument parser (standard
library only, shared with the release artifacts); ``repo samples`` writes the sample models and
``repo list`` shows what a repository holds. Every bad input ends in one ``error: ...`` line on
stderr (exit code 2; 1 when the disk fails) and nothing written.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import click

from backend_model.parameters import precision_label

from . import command
from .command import DEFAULT_OUT, INPUT_ERRORS
from .inspection import ModelInfo, list_models
from .samples import EMBEDDED_SAMPLES, SEED_SAMPLES, write_samples

__all__ = ["format_table", "repo_group"]
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


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
        raise DiskError(prefix + " ".join(command._os_reason(exc).split())) from None


# --------------------------------------------------------------------------- repo gen


@click.command("gen", context_settings={**CONTEXT_SETTINGS, "ignore_unknown_options": True,
                                        "allow_interspersed_args": False, "help_option_names": []},
               add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def gen(args: tuple[str, ...]) -> None:
    """Write <output_dir>/<model_name>/ (the seed's generate_llm_model_repo.py; --help lists its flags)."""
    sys.exit(command.main(list(args), prog="qaic-console repo gen"))


# --------------------------------------------------------------------------- repo samples


@click.command("samples", cls=OneLineCommand, context_settings=CONTEXT_SETTINGS, epilog="\b\n" + command.samples_help())
@click.option("--embedded", is_flag=True,
              help="Write the embedded SmolLM2 samples (they run on the CPU anywhere) instead of the seed's.")
@click.option("-o", "--output_dir", "--output-dir", "output_dir", type=click.Path(path_type=Path),
              default=DEFAULT_OUT, show_default=True, help="Model repository to write into.")
@click.option("--force", is_flag=True, help="Replace existing model folders.")
def samples(embedded: bool, output_dir: Path, force: bool) -> None:
    """Write the seed's four sample models (or, with --embedded, the embedded ones)."""
    with _errors():
        written = write_samples(EMBEDDED_SAMPLES if embedded else SEED_SAMPLES, output_dir, force=force)
    for path in written:
        click.echo(f"wrote {path}")


# --------------------------------------------------------------------------- repo list


def _kind(model: ModelInfo) -> str:
    """The model type, marked when it recomputes every token on the CPU (no QPC): very slow there."""
    slow = model.model_type == "causal" and not model.source.startswith("qpc")
    return f"{model.model_type} (slow on CPU)" if slow else model.model_type


def format_table(models: list[ModelInfo]) -> str:
    """A plain, aligned table: one row per model."""
    header = ("MODEL", "TYPE", "DECOUPLED", "COMPILE", "PRECISION", "SOURCE", "VALID")
    rows = [header] + [
        (m.name, _kind(m), {True: "yes", False: "no", None: "?"}[m.decoupled], m.compile_summary(),
         precision_label(m.precision) if m.precision else "?", m.source,
         "yes" if m.valid else "no: " + "; ".join(m.problems))
        for m in models
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)


@click.command("list", cls=OneLineCommand, context_settings=CONTEXT_SETTINGS)
@click.argument("directory", default=DEFAULT_OUT, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON array (every field, compile config with defaults).")
def list_command(directory: Path, as_json: bool) -> None:
    """Show each model of DIRECTORY (default llm_model_dir): type, mode, source, dimensions, validity.

    Exit code 1 when a model would not load. Causal models recompute the whole sequence at every token:
    on the CPU they are very slow (about 1 token/s for the embedded one); prefer kv_cache models there.
    """
    with _errors():
        models = list_models(directory)
    if as_json:
        click.echo(json.dumps([m.to_json() for m in models], indent=2))
    elif models:
        click.echo(format_table(models))
    else:
        click.echo(f"no models in {directory}")
    broken = [m.name for m in models if not m.valid]
    if broken:
        click.echo(f"error: {len(broken)} of {len(models)} models would not load: {', '.join(broken)}", err=True)
        sys.exit(1)


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
