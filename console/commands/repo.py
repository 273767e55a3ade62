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

from backend_model.contract.parameters import precision_label
from repo_gen import command
from repo_gen.command import DEFAULT_OUT, INPUT_ERRORS
from repo_gen.inspection import ModelFolder, list_models
from repo_gen.samples import CAUSAL_CPU_SPEED, EMBEDDED_ALL, SEED_SAMPLES, VISION_SAMPLES, write_samples
from repo_gen.staging import leftovers

__all__ = ["format_table", "repo_group"]
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


# --------------------------------------------------------------------------- one-line errors


class _OneLine(click.ClickException):
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


GEN_PROG = "qaic-console repo gen"


class ArgparseCommand(click.Command):
    """``repo gen``: its flags are the seed's generator's argparse parser (one parser, shared with the release
    artifacts); its ``--help`` is laid out as every other command's."""

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "--model_name NAME [OPTIONS]")

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(command.parser(GEN_PROG, DEFAULT_OUT, None).description or "")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for action in command.parser(GEN_PROG, DEFAULT_OUT, None)._actions:
            if action.option_strings and action.dest != "help":
                takes = action.nargs != 0
                value = f"[{'|'.join(action.choices)}]" if action.choices else action.dest.upper()
                names = ", ".join(action.option_strings) + (f" {value}" if takes else "")
                rows.append((names, (action.help or "") + (" [required]" if action.required else "")))
        rows.append(("-h, --help", "Show this message and exit."))
        with formatter.section("Options"):
            formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_paragraph()
        for line in command.epilog().splitlines():
            formatter.write(f"  {line}\n" if line else "\n")


@click.command("gen", cls=ArgparseCommand,
               context_settings={**CONTEXT_SETTINGS, "ignore_unknown_options": True,
                                 "allow_interspersed_args": False, "help_option_names": []},
               add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def gen(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Write <output_dir>/<model_name>/ (the seed's generate_llm_model_repo.py, its flags as written)."""
    if {"-h", "--help"} & set(args[: args.index("--")] if "--" in args else args):
        click.echo(ctx.get_help())
        return
    sys.exit(command.main(list(args), prog=GEN_PROG))


# --------------------------------------------------------------------------- repo samples


@click.command("samples", cls=OneLineCommand, context_settings=CONTEXT_SETTINGS, epilog="\b\n" + command.samples_help())
@click.option("--embedded", is_flag=True,
              help="Write the embedded samples (SmolLM2 chat models and the MiniLM embedding model: they run on "
                   "the CPU anywhere) instead of the seed's.")
@click.option("--vision", is_flag=True,
              help="Write the embedded vision sample (smollm2_vision: images in; SmolLM2 with a random vision "
                   "tower, so its answers do not describe the image) instead of the seed's.")
@click.option("-o", "--output_dir", "--output-dir", "output_dir", type=click.Path(path_type=Path),
              default=DEFAULT_OUT, show_default=True, help="Model repository to write into.")
@click.option("--force", is_flag=True, help="Replace existing model folders.")
def samples(embedded: bool, vision: bool, output_dir: Path, force: bool) -> None:
    """Write the seed's sample models (or, with --embedded, the embedded SmolLM2 and MiniLM ones); the list below
    says which are which.

    The seed is Qualcomm's Triton example for Cloud AI 100 that qaic-console grew from: its
    generate_llm_model_repo.py, its four sample models (mistral_7b, mistral_decoupled, starcoder_15b,
    starcoder_decoupled: they need a card or their Hugging Face weights) and its sample clients.
    """
    with _errors():
        chosen = EMBEDDED_ALL if embedded else SEED_SAMPLES
        written = write_samples((VISION_SAMPLES if vision else ()) + (chosen if embedded or not vision else ()),
                                output_dir, force=force)
    for path in written:
        click.echo(f"wrote {path}")


# --------------------------------------------------------------------------- repo list


def _kind(model: ModelFolder) -> str:
    """The model type, marked when it recomputes every token on the CPU (no QPC): very slow there."""
    slow = model.model_type == "causal" and not model.source.startswith("qpc")
    return f"{model.model_type} (slow on CPU)" if slow else model.model_type


def format_table(models: list[ModelFolder]) -> str:
    """A plain, aligned table: one row per model."""
    header = ("MODEL", "TYPE", "MODES", "COMPILE", "PRECISION", "SOURCE", "VALID")
    rows = [header] + [
        (m.name, _kind(m), m.modes, m.compile_summary(),
         precision_label(m.precision) if m.precision else "?", m.source,
         "yes" if m.valid else "no: " + "; ".join(m.problems))
        for m in models
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)


LIST_HELP = f"""Show each model of DIRECTORY (default llm_model_dir): type, modes, source, dimensions, validity.

The modes are how a model answers, as the consoles say it: stream (a decoupled model: token by token over gRPC),
batch (one response), or stream+batch (decoupled with a stream switch, as the bundled backend's).
Hidden folders (a killed generator run's leftovers) are not models: each is named on stderr.

Exit code 1 when a model would not load. Causal models recompute the whole sequence at every token:
on the CPU they are very slow ({CAUSAL_CPU_SPEED}); prefer kv_cache models there.
"""


@click.command("list", cls=OneLineCommand, context_settings=CONTEXT_SETTINGS, help=LIST_HELP)
@click.argument("directory", default=DEFAULT_OUT, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON array (every field, compile config with defaults).")
def list_command(directory: Path, as_json: bool) -> None:
    with _errors():
        models = list_models(directory)
    for line in leftovers(directory):
        click.echo(f"note: ignored {line}", err=True)
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
