"""The ``qaic-console`` command line."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from console.clients import ClientError, UsageError
from console.commands.bench import bench_group
from console.commands.client import client
from console.commands.deploy import deploy_group
from console.commands.doctor import format_rows, run_doctor
from console.commands.eval import eval_group
from console.commands.headless import Output, run_embed
from console.commands.headless import run as run_headless
from console.commands.metrics import metrics_command
from console.commands.openai import openai_command
from console.commands.options import click_options, server_options
from console.commands.repo import repo_group
from console.commands.serve import serve
from console.commands.tui import tui
from console.commands.twin import check, onnx_group
from console.commands.web import web
from console.core.adapters import MODEL_DEFAULT_HELP, URL_HELP, Adapter, adapter_for
from console.core.attachments import read_images
from console.core.controls import TIMEOUT_DEFAULTS, params_from_options
from console.core.request import DEFAULT_IDLE_TIMEOUT, MODES, Settings
from console.infra.extras import missing
from console.infra.signals import Terminated, install_signals, interrupted, signals_raise
from console.infra.terminal import CONTEXT_SETTINGS, fail
from console.server.embedded import DEMO_NOTE, DEMO_PROMPTS, EMBEDDED_DEFAULTS
from repo_gen.samples import CAUSAL_CPU_SPEED

# --------------------------------------------------------------------------- headless


def headless_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The headless options of the ``qaic-console`` group (the controls come from the controls table)."""
    options = [
        click.option("--prompt", default=None,
                     help="Answer this prompt headless and exit; 'a|b' sends two prompts in one request "
                          "(\\| is a literal |)."),
        click.option("--embed", default=None,
                     help="Ask an embedding model for the vectors of these texts ('a|b|c') and print each one's "
                          "dimension and norm and their cosine-similarity matrix; needs --url (--model: default "
                          "the server's first embedding model)."),
        click.option("--mode", type=click.Choice(MODES), default="stream", show_default=True,
                     help="stream: gRPC, token by token; batch: one inference response; generate: the HTTP "
                          "generate endpoint."),
        click.option("--model", default=None,
                     help=f"Model name (default: {MODEL_DEFAULT_HELP}). Causal models recompute every token: "
                          f"on a CPU they are slow ({CAUSAL_CPU_SPEED}); ask for few tokens (--max-tokens 16), or 0 "
                          "for the server's default (32 tokens on a CPU)."),
        click.option("--url", default=None,
                     help=URL_HELP + "; without it the embedded model is served for the run (it takes a while: "
                          "serve it once with `qaic-console serve` and pass --url)."),
        server_options("--api"),
        click.option("--http-url", default=None, help="host:port of the server's HTTP endpoint."),
        server_options("--grpc-url"),
        click.option("--protocol", type=click.Choice(("http", "grpc")), default="http", show_default=True,
                     help="Batch mode transport; over gRPC a timeout also cancels the request on the server."),
        click.option("--timeout", type=float, default=None,
                     help=f"Network timeout in s for the whole call (default: {TIMEOUT_DEFAULTS}; 0 disables)."),
        click.option("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT, show_default=True,
                     help="Stream mode: seconds without a response before giving up (0 disables)."),
        click_options(),
        click.option("--system", default=None, help="System message (implies --chat)."),
        click.option("--chat/--raw", "chat", default=None,
                     help="Apply the model's chat template, or send the prompt as typed (default: the template "
                          "when the model has one here: the embedded models, a --tokenizer folder, an "
                          "OpenAI-compatible server's own, or the bundled backend's models, which apply their own "
                          "when no tokenizer of theirs is here)."),
        click.option("--tokenizer", default=None, type=click.Path(file_okay=False),
                     help="Local tokenizer folder for --chat."),
        click.option("--image", "images", multiple=True, type=click.Path(dir_okay=False), metavar="PATH",
                     help="Attach this image file to the prompt (repeatable: in order, before its text). With 'a|b' "
                          "the images go with every prompt, each prompt then in a request of its own."),
        click.option("--json", "json_", is_flag=True,
                     help="One JSON object per prompt: text, finish_reason and genai-perf figures."),
        click.option("--echo", is_flag=True, help="Print each prompt before its reply."),
        click.option("-q", "--quiet", is_flag=True, help="No progress or speed lines on stderr."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def settings_from(values: dict[str, Any], server: Adapter | None = None) -> Settings:
    """The request settings the headless options describe (the model by default: the server's)."""
    mode = values["mode"]
    model = values["model"] or (server.default_model(mode) if server is not None else EMBEDDED_DEFAULTS[mode])
    if values["chat"] is False and values["system"]:
        raise UsageError("--system goes into the chat template: leave out --raw")
    return Settings(
        model, mode, values["protocol"], params_from_options(values),
        values["timeout"], values["idle_timeout"] or None, chat=values["chat"],
        system=values["system"] or "", tokenizer=values["tokenizer"] or "", echo=values["echo"],
        images=read_images(values["images"]),
    )


def server_from(values: dict[str, Any]) -> Adapter | None:
    """The running server the options name, or None (serve the embedded model)."""
    url, grpc_url = values["url"] or values["http_url"] or "", values["grpc_url"]
    if not url and not grpc_url:
        if values["api"] != "auto":
            raise UsageError(f"--api {values['api']} needs --url (the server's address)")
        return None
    return adapter_for(url, values["api"], grpc_url)


def _embed(values: dict[str, Any]) -> int:
    try:
        server = server_from(values)
    except ClientError as exc:
        click.echo(f"error: {exc}", err=True)
        return 1
    if server is None:
        click.echo("error: --embed needs --url: the server of an embedding model", err=True)
        return 2
    with signals_raise(signal.SIGTERM):
        return run_embed(server, values["model"], values["embed"], values["timeout"],
                         Output(json=values["json_"], quiet=values["quiet"]))


def _headless(values: dict[str, Any]) -> int:
    try:
        server = server_from(values)
        settings = settings_from(values, server)
    except ClientError as exc:
        click.echo(f"error: {exc}", err=True)
        return 1
    output = Output(json=values["json_"], quiet=values["quiet"])
    try:
        with signals_raise(signal.SIGTERM):
            return run_headless(settings, values["prompt"], server, output)
    except Terminated:
        return 143


class Commands(click.Group):
    """The command group: a command whose optional part is not installed ends with the line that installs it; a
    Ctrl-C that no command answered ends with one line and exit code 130 (not click's ``Aborted!`` and 1)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            interrupted()
        except ModuleNotFoundError as exc:
            line = missing(exc)
            if line is None:
                raise
            fail(line)


@click.group(cls=Commands, invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="qaic-console", message="qaic-console %(version)s")
@headless_options
@click.pass_context
def main(ctx: click.Context, **values: Any) -> None:
    """Generate, serve and chat with LLMs on Qualcomm Cloud AI 100 through Triton.

    With --prompt and no command, answer headless and exit: the embedded model is served for the
    run unless --url names a running server; replies go to stdout, speed figures to stderr.
    Alone on a terminal, open the console TUI (qaic-console tui).
    """
    install_signals()
    if ctx.invoked_subcommand is not None:
        return
    if values["embed"] is not None:
        sys.exit(_embed(values))
    if values["prompt"] is None and sys.stdin.isatty() and sys.stdout.isatty():
        ctx.invoke(tui, http_url=values["http_url"] or values["url"], grpc_url=values["grpc_url"], api=values["api"])
        return
    if values["prompt"] is None:  # the main job on the embedded default: without a terminal, a chat answer
        if not (values["url"] or values["http_url"] or values["grpc_url"] or values["quiet"]):
            click.echo(DEMO_NOTE, err=True)
        values.update(prompt=DEMO_PROMPTS, chat=True)
    sys.exit(_headless(values))


@main.command(context_settings=CONTEXT_SETTINGS)
def doctor() -> None:
    """Check tritonserver, the Python backend stub, QAIC packages, the embedded model and ports."""
    rows, ok = run_doctor()
    click.echo(format_rows(rows))
    if not ok:
        sys.exit(1)


@main.group(context_settings=CONTEXT_SETTINGS)
def artifacts() -> None:
    """Qualcomm's release-artifacts layout (generator, sample clients, backend folder) for the containers."""


@artifacts.command("export", context_settings=CONTEXT_SETTINGS)
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Replace existing llm-models/ and qaic_backend_python/ folders.")
def export_artifacts(directory: Path, force: bool) -> None:
    """Write DIRECTORY/llm-models/ (generate_llm_model_repo.py, tests/*-response/client_example_*.py) and
    DIRECTORY/qaic_backend_python/; they run without qaic-console installed (Python 3.8 is enough)."""
    from repo_gen.artifacts import export
    from repo_gen.writer import RepoError

    try:
        folders = export(directory, force=force)
    except (RepoError, OSError) as exc:
        fail(" ".join(str(exc).split()))
    for folder in folders:
        click.echo(f"wrote {folder}")
    click.echo(f"e.g. cd {folders[0]} && python generate_llm_model_repo.py --model_name mistral_7b "
               f"--aic_binary_dir <path/to/qpc> --python_backend_dir {folders[1]}")


@main.command(context_settings=CONTEXT_SETTINGS)
@click.option("--url", required=True, help=URL_HELP + ".")
def models(url: str) -> None:
    """List the models a running server serves: state, interface, modes, type, ignored controls."""
    from console.commands.models import format_models, served_models

    try:
        title, rows = served_models(url)
    except ClientError as exc:
        fail(str(exc))
    click.echo(title)
    click.echo(format_models(rows) if rows else "no models")


main.add_command(repo_group, "repo")
main.add_command(client, "client")
main.add_command(bench_group, "bench")
main.add_command(web, "web")
main.add_command(tui, "tui")
main.add_command(onnx_group, "onnx")
main.add_command(check, "check")
main.add_command(openai_command, "openai")
main.add_command(metrics_command, "metrics")
main.add_command(serve, "serve")
main.add_command(eval_group, "eval")
main.add_command(deploy_group, "deploy")
