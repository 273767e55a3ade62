"""The ``qaic-console web`` command (Gradio is imported only when it runs)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from console.commands.options import server_options
from console.core.adapters import URL_HELP
from console.core.controller import ServerController, Snapshot
from console.server.embedded import DEFAULT_MODELS
from console.server.errors import repository_not_found
from console.server.ports import port_taken
from console.web.files import private_folder, remove, sweep

if TYPE_CHECKING:
    from console.web.app import Served
    from console.web.login import Login

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def begin(controller: ServerController, url: str | None, grpc_url: str | None, repository: Path | None,
          models: Sequence[str], start: bool | None, api: str = "auto") -> str:
    """Connect ``controller`` to the server at ``url``, or start one (default: unless ``url``); what happened.

    Without a repository the embedded samples are served, ``models`` (default: the stream and batch
    defaults) loaded. ClientError / ServerError / OSError when it cannot.
    """
    said = []
    if url:
        said.append(controller.connect(url, grpc_url or "", api).message)
    if start if start is not None else not url:
        controller.start(repository, tuple(models) or (() if repository else DEFAULT_MODELS))
        said.append("starting tritonserver (progress and log in the Server tab) ...")
    return "\n".join(said)


def terminal_echo() -> Callable[[Snapshot], None]:
    """Say on the terminal too when the server becomes ready, fails or stops (the page says it all)."""
    said = {"phase": ""}

    def echo(snap: Snapshot) -> None:
        if snap.phase != said["phase"] and snap.phase in ("ready", "failed", "stopped"):
            click.echo(f"{'error: ' if snap.phase == 'failed' else ''}{snap.message}", err=snap.phase == "failed")
        said["phase"] = snap.phase

    return echo


@click.command("web", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve the page on (0.0.0.0 exposes it to the network, over plain HTTP).")
@click.option("--port", type=int, default=None, help="Port (default: 7860 or the next free one).")
@click.option("--no-auth", is_flag=True,
              help="No login: any program or web page that reaches the port may use the console (loopback only; "
                   "default: a token in the printed URL, then a cookie).")
@click.option("--share", is_flag=True, help="Also open a public gradio.live link (off unless given).")
@click.option("--url", default=None,
              help=URL_HELP + " to use; no server is started.")
@server_options("--api", "--grpc-url", "--metrics-url", "--prometheus")
@click.option("--model-repository", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Repository to serve (default: the embedded SmolLM2 samples, stream and batch models).")
@click.option("--model", "models", multiple=True,
              help="Model to load (repeatable; default: every model of --model-repository, or the embedded "
                   "stream and batch samples).")
@click.option("--start/--no-start", default=None,
              help="Start tritonserver with the page (default: yes, unless --url is given).")
def web(host: str, port: int | None, no_auth: bool, share: bool, url: str | None, api: str, grpc_url: str | None,
        metrics_url: str | None, prometheus: str | None, model_repository: Path | None, models: tuple[str, ...],
        start: bool | None) -> None:
    """A browser console: server control, stream and batch chat, live speed figures.

    It prints the address to open, with a token (as Jupyter does); the browser then keeps a cookie. Scripts
    send the token as `Authorization: Bearer <token>`. The page's files (exported transcripts) stay in a
    private folder, removed when the console exits.
    """
    from console.web.login import Login

    try:
        login = Login.new(host, auth=not no_auth)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    taken = port_taken(port) if port is not None else None
    if taken:  # before any tritonserver starts
        click.echo(f"error: {taken}: choose another --port or leave it out (7860 or the next free one)", err=True)
        sys.exit(1)
    if model_repository is not None and not model_repository.is_dir():
        click.echo(f"error: {repository_not_found(model_repository)}", err=True)
        sys.exit(1)
    for left in sweep():
        click.echo(f"note: removed {left}, left by a web console that was killed", err=True)
    folder = private_folder()  # before Gradio is imported
    controller = ServerController(on_change=terminal_echo())
    served = None
    try:
        with _terminated_as_interrupt():
            served = _serve(controller, login, folder, host, port, share, url, grpc_url, api, model_repository,
                            models, start, metrics_url or "", prometheus or "")
            served.block()
    except KeyboardInterrupt:
        pass
    finally:
        controller.stop(closing=True)
        if served is not None:
            served.close()  # the folder with it
        else:
            remove(folder)


def _serve(controller: ServerController, login: Login, folder: Path, host: str, port: int | None, share: bool,
           url: str | None, grpc_url: str | None, api: str, repository: Path | None, models: tuple[str, ...],
           start: bool | None, metrics_url: str = "", prometheus: str = "") -> Served:
    """Begin (connect or start a server), launch the page and say where to open it."""
    from console.clients import ClientError
    from console.server import ServerError
    from console.web.app import launch
    from console.web.handlers import WebConsole

    try:
        said = begin(controller, url, grpc_url, repository, models, start, api)
        if said:
            click.echo(said)
    except (ClientError, ServerError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    served = launch(WebConsole(controller, folder), host=host, port=port, share=share, block=False, login=login,
                    metrics_url=metrics_url, prometheus=prometheus)
    click.echo(f"qaic-console web on {served.url}" + (f" and {served.share_url}" if served.share_url else ""))
    if login.token is None:
        click.echo(f"warning: --no-auth: any program or web page that reaches {served.demo.local_url} can use this "
                   "console (start servers, chat, read the transcripts)", err=True)
    if host not in LOOPBACK:
        click.echo(f"warning: --host {host} serves the page beyond this machine over plain HTTP: whoever can read "
                   "the traffic can read the token", err=True)
    click.echo("press Ctrl-C to stop")
    return served


@contextlib.contextmanager
def _terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the console as Ctrl-C does (the server stopped, the private folder removed)."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
