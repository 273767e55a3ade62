"""The ``qaic-console`` command line."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from console.bench.cli import bench_group
from console.clients import ClientError
from console.core.adapters import APIS, Adapter, adapter_for, api_help
from console.core.controller import ServerController
from console.core.controls import click_options, params_from_options
from console.core.request import DEFAULT_IDLE_TIMEOUT, MODES, Settings
from console.doctor import format_rows, run_doctor
from console.eval.cli import eval_group
from console.headless import Output
from console.headless import run as run_headless
from console.seed_clients import client
from console.server.embedded import DEMO_NOTE, DEMO_PROMPTS, EMBEDDED_DEFAULTS, START_TIMEOUT
from console.tui.command import tui
from console.twin.cli import check, onnx_group
from console.web.command import web
from repo_gen.cli import repo_group

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


class _Terminated(Exception):
    """SIGTERM arrived."""


def fail(message: str) -> None:
    """One line on stderr prefixed ``error:``, exit code 1."""
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _exit_on_sigterm() -> None:
    """SIGTERM exits like Ctrl-C does, so ``atexit`` stops any tritonserver this process started."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


@contextlib.contextmanager
def _signals_raise(*signums: int) -> Iterator[None]:
    """Turn these signals into ``_Terminated`` in the main thread (no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise _Terminated()

    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


# --------------------------------------------------------------------------- headless


def headless_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The headless options of the ``qaic-console`` group (the controls come from the controls table)."""
    options = [
        click.option("--prompt", default=None,
                     help="Answer this prompt headless and exit; 'a|b' sends two prompts in one request "
                          "(\\| is a literal |)."),
        click.option("--mode", type=click.Choice(MODES), default="stream", show_default=True,
                     help="stream: gRPC, token by token; batch: one inference response; generate: the HTTP "
                          "generate endpoint."),
        click.option("--model", default=None,
                     help="Model name (default: smollm2_decoupled for stream, smollm2_kv otherwise; an "
                          "OpenAI-compatible server's first model). Causal models recompute every token: on a CPU "
                          "they are slow (about 5 tok/s here); ask for few tokens (--max-tokens 16), or 0 for the "
                          "server's default (32 tokens on a CPU)."),
        click.option("--url", default=None,
                     help="host:port of a running tritonserver (its HTTP or its gRPC endpoint: the other one is its "
                          "neighbour port), or the base URL of an OpenAI-compatible server (http://host:port/v1); "
                          "without it the embedded model is served for the run."),
        click.option("--api", type=click.Choice(APIS), default="auto", show_default=True,
                     help=api_help("--url")),
        click.option("--http-url", default=None, help="host:port of the server's HTTP endpoint."),
        click.option("--grpc-url", default=None, help="host:port of the server's gRPC endpoint."),
        click.option("--protocol", type=click.Choice(("http", "grpc")), default="http", show_default=True,
                     help="Batch mode transport; over gRPC a timeout also cancels the request on the server."),
        click.option("--timeout", type=float, default=None,
                     help="Network timeout in s for the whole call (default: 600 for KV-cache models, "
                          "6000 for causal ones; 0 disables)."),
        click.option("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT, show_default=True,
                     help="Stream mode: seconds without a response before giving up (0 disables)."),
        click_options(),
        click.option("--system", default=None, help="System message (implies --chat)."),
        click.option("--chat", is_flag=True,
                     help="Apply the model's chat template (embedded models: their own tokenizer; others "
                          "need --tokenizer)."),
        click.option("--tokenizer", default=None, type=click.Path(file_okay=False),
                     help="Local tokenizer folder for --chat."),
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
    return Settings(
        model, mode, values["protocol"], params_from_options(values),
        values["timeout"], values["idle_timeout"] or None, chat=values["chat"] or bool(values["system"]),
        system=values["system"] or "", tokenizer=values["tokenizer"] or "", echo=values["echo"],
    )


def server_from(values: dict[str, Any]) -> Adapter | None:
    """The running server the options name, or None (serve the embedded model)."""
    url, grpc_url = values["url"] or values["http_url"] or "", values["grpc_url"]
    if not url and not grpc_url:
        if values["api"] != "auto":
            raise ClientError(f"--api {values['api']} needs --url (the server's address)")
        return None
    return adapter_for(url, values["api"], grpc_url)


def _headless(values: dict[str, Any]) -> int:
    try:
        server = server_from(values)
        settings = settings_from(values, server)
    except ClientError as exc:
        click.echo(f"error: {exc}", err=True)
        return 1
    output = Output(json=values["json_"], quiet=values["quiet"])
    try:
        with _signals_raise(signal.SIGTERM):
            return run_headless(settings, values["prompt"], server, output)
    except _Terminated:
        return 143


@click.group(invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@headless_options
@click.pass_context
def main(ctx: click.Context, **values: Any) -> None:
    """Generate, serve and chat with LLMs on Qualcomm Cloud AI 100 through Triton.

    With --prompt and no command, answer headless and exit: the embedded model is served for the
    run unless --url names a running server; replies go to stdout, speed figures to stderr.
    Alone on a terminal, open the console TUI (qaic-console tui).
    """
    _exit_on_sigterm()
    if ctx.invoked_subcommand is not None:
        return
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
@click.option("--url", required=True,
              help="host:port of the server's HTTP endpoint, or an OpenAI-compatible server's http://host:port/v1.")
def models(url: str) -> None:
    """List the models a running server serves: state, interface, modes, type, ignored controls."""
    from console.served import format_models, served_models

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
main.add_command(eval_group, "eval")


# --------------------------------------------------------------------------- serve

POLL_SECONDS = 2.0


def _print_ready(controller: ServerController) -> None:
    snap, server = controller.poll(), controller.server
    click.echo(snap.message)
    for row in snap.models:
        click.echo(f"  model {row.name}: {row.state or 'not loaded'}{f' ({row.reason})' if row.reason else ''}")
    click.echo(f"  binary  {server.binary if server else '?'}")
    for label, address in snap.server.addresses() if snap.server else ():
        click.echo(f"  {label:<7} {address}")
    click.echo("press Ctrl-C to stop")


def _watch(controller: ServerController) -> str:
    """Follow the server until it fails; the reason. A model whose backend dies is reloaded meanwhile."""
    while True:
        time.sleep(POLL_SECONDS)
        snap = controller.poll()
        if snap.phase == "failed":
            return snap.message


@main.command(context_settings={**CONTEXT_SETTINGS, "ignore_unknown_options": True})
@click.option("--model-repository", "model_repository", required=True, type=click.Path(path_type=Path),
              help="Triton model repository directory.")
@click.option("--model", "models", multiple=True,
              help="Load only this model (repeatable; default: every model of the repository).")
@click.option("--http-port", type=int, default=None, help="HTTP port (default: a free one).")
@click.option("--grpc-port", type=int, default=None, help="gRPC port (default: a free one).")
@click.option("--metrics-port", type=int, default=None, help="Metrics port (default: a free one).")
@click.option("--tritonserver", "binary", default=None,
              help="tritonserver binary (default: $QAIC_TRITONSERVER, /opt/tritonserver, the nvidia-pytriton wheel).")
@click.option("--timeout", type=float, default=START_TIMEOUT, show_default=True,
              help="Seconds to wait for readiness.")
@click.option("--log-verbose", type=int, default=0, show_default=True, help="tritonserver --log-verbose level.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address tritonserver listens on (0.0.0.0 exposes it to the network).")
@click.option("--stop-stale", is_flag=True,
              help="Stop tritonservers that a console which is gone left on this repository or these ports.")
@click.option("--python-env", type=click.Path(path_type=Path), default=None,
              help="Virtual or conda environment the Python models run in (default: this console's), e.g. one "
                   "with vllm; a model's own EXECUTION_ENV_PATH parameter still wins for that model.")
@click.option("--backend-dir", "backends", multiple=True, type=click.Path(path_type=Path),
              help="Folder of Python-based backends (NAME/model.py; Triton's vLLM backend as vllm/model.py) the "
                   "models' `backend: \"NAME\"` can name (repeatable).")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def serve(model_repository: Path, models: tuple[str, ...], http_port: int | None, grpc_port: int | None,
          metrics_port: int | None, binary: str | None, timeout: float, log_verbose: int, host: str,
          stop_stale: bool, python_env: Path | None, backends: tuple[Path, ...], extra: tuple[str, ...]) -> None:
    """Run tritonserver on a model repository in the foreground until Ctrl-C or SIGTERM.

    A model that fails to load is named (FAILED, with the reason) and the others serve; a model whose
    Python backend dies is reported and reloaded. Arguments after the options (or after --) go to
    tritonserver as they are, e.g.
    `qaic-console serve --model-repository llm_model_dir -- --log-info=false`.
    """
    if not model_repository.is_dir():
        fail(f"model repository not found: {model_repository}")
    started = threading.Event()
    controller = ServerController(on_change=lambda snap: snap.phase != "starting" and started.set(),
                                  on_log=click.echo)
    try:
        with _signals_raise(signal.SIGTERM):
            controller.start(model_repository, models, timeout, http_port=http_port, grpc_port=grpc_port,
                             metrics_port=metrics_port, binary=binary, log_verbose=log_verbose, extra_args=extra,
                             host=host, stop_stale=stop_stale, exclusive=True, python_env=python_env,
                             backends=backends)
            started.wait()
            if controller.snapshot.phase == "failed":
                fail(controller.snapshot.message)
            _print_ready(controller)
            fail(_watch(controller))
    except (KeyboardInterrupt, _Terminated):
        click.echo("stopping tritonserver ...")
    finally:
        _stop(controller)
    click.echo("stopped")


def _stop(controller: ServerController) -> None:
    """Stop gracefully; a second Ctrl-C / SIGTERM meanwhile kills it at once."""
    server = controller.server
    try:
        with _signals_raise(signal.SIGINT, signal.SIGTERM):
            controller.stop()
    except _Terminated:
        if server is not None:
            server.stop(grace=0)
