"""The ``qaic-console`` command line."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import click

from console.bench.cli import bench_group
from console.doctor import format_rows, run_doctor
from console.headless import client, headless_options, options_from_cli
from console.headless import run as run_headless
from console.server import ServerError, TritonServer
from console.tui.command import tui
from console.twin.cli import check, onnx_group
from console.web.command import web
from repo_gen.cli import repo_group

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}
DEFAULT_PROMPT = "What is the capital of France?|Write a haiku about mountains."


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


def _stop(server: TritonServer) -> None:
    """Stop gracefully; a second Ctrl-C / SIGTERM meanwhile kills it at once."""
    try:
        with _signals_raise(signal.SIGINT, signal.SIGTERM):
            server.stop()
    except _Terminated:
        server.stop(grace=0)


@click.group(invoke_without_command=True, context_settings=CONTEXT_SETTINGS)
@headless_options
@click.pass_context
def main(ctx: click.Context, **headless: object) -> None:
    """Generate, serve and chat with LLMs on Qualcomm Cloud AI 100 through Triton.

    With --prompt and no command, answer headless and exit: the embedded model is served for the
    run unless --url names a running server; replies go to stdout, speed figures to stderr.
    Alone on a terminal, open the console TUI (qaic-console tui).
    """
    _exit_on_sigterm()
    if ctx.invoked_subcommand is None:
        if headless.get("prompt") is None and sys.stdin.isatty() and sys.stdout.isatty():
            ctx.invoke(tui, http_url=headless.get("http_url"), grpc_url=headless.get("grpc_url"))
            return
        if headless.get("prompt") is None:
            # The main job on the embedded default: without a terminal, a headless chat answer.
            headless["prompt"] = DEFAULT_PROMPT
            headless["chat"] = True
        try:
            with _signals_raise(signal.SIGTERM):
                code = run_headless(options_from_cli(headless))
        except _Terminated:
            code = 143
        sys.exit(code)


@main.command(context_settings=CONTEXT_SETTINGS)
def doctor() -> None:
    """Check tritonserver, the Python backend stub, QAIC packages, the embedded model and ports."""
    rows, ok = run_doctor()
    click.echo(format_rows(rows))
    if not ok:
        sys.exit(1)


main.add_command(repo_group, "repo")
main.add_command(client, "client")
main.add_command(bench_group, "bench")
main.add_command(web, "web")
main.add_command(tui, "tui")
main.add_command(onnx_group, "onnx")
main.add_command(check, "check")


def _print_ready(server: TritonServer) -> None:
    click.echo(f"tritonserver {server.server_version()} ready (pid {server.pid})")
    for name, (state, reason) in sorted(server.model_states().items()):
        click.echo(f"  model {name}: {state}{f' ({reason})' if reason else ''}")
    click.echo(f"  binary  {server.binary}")
    click.echo(f"  HTTP    {server.http_url}")
    click.echo(f"  gRPC    {server.grpc_url}")
    click.echo(f"  metrics {server.metrics_url}")
    click.echo("press Ctrl-C to stop")


def _serve(server: TritonServer, timeout: float) -> None:
    click.echo(f"starting tritonserver on {server.model_repository} ...")
    server.start(timeout=timeout, on_log=click.echo)
    _print_ready(server)
    code = server.wait()
    fail(f"tritonserver exited with code {code}")


@main.command(context_settings=CONTEXT_SETTINGS)
@click.option(
    "--model-repository",
    "model_repository",
    required=True,
    type=click.Path(path_type=Path),
    help="Triton model repository directory.",
)
@click.option("--http-port", type=int, default=None, help="HTTP port (default: a free one).")
@click.option("--grpc-port", type=int, default=None, help="gRPC port (default: a free one).")
@click.option("--metrics-port", type=int, default=None, help="Metrics port (default: a free one).")
@click.option(
    "--tritonserver",
    "binary",
    default=None,
    help="tritonserver binary (default: $QAIC_TRITONSERVER, /opt/tritonserver, the nvidia-pytriton wheel).",
)
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds to wait for readiness.")
@click.option("--log-verbose", type=int, default=0, show_default=True, help="tritonserver --log-verbose level.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address tritonserver listens on (0.0.0.0 exposes it to the network).")
def serve(
    model_repository: Path,
    http_port: int | None,
    grpc_port: int | None,
    metrics_port: int | None,
    binary: str | None,
    timeout: float,
    log_verbose: int,
    host: str,
) -> None:
    """Run tritonserver on a model repository in the foreground until Ctrl-C or SIGTERM."""
    if not model_repository.is_dir():
        fail(f"model repository not found: {model_repository}")
    server = TritonServer(
        model_repository,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        binary=binary,
        log_verbose=log_verbose,
        host=host,
    )
    try:
        with _signals_raise(signal.SIGTERM):
            _serve(server, timeout)
    except (ServerError, OSError) as exc:
        fail(str(exc))
    except (KeyboardInterrupt, _Terminated):
        click.echo("stopping tritonserver ...")
    finally:
        _stop(server)
    click.echo("stopped")
