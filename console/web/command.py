"""The ``qaic-console web`` command (Gradio is imported only when it runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from console.server.embedded import DEFAULT_MODELS


@click.command("web", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve the page on (0.0.0.0 exposes it to the network: no login is asked).")
@click.option("--port", type=int, default=None, help="Port (default: 7860 or the next free one).")
@click.option("--share", is_flag=True, help="Also open a public gradio.live link (off unless given).")
@click.option("--url", default=None, help="HTTP host:port of a running tritonserver to use (no server is started).")
@click.option("--grpc-url", default=None, help="Its gRPC host:port for streaming (default: the HTTP port + 1).")
@click.option("--model-repository", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Repository to serve (default: the embedded SmolLM2 samples, stream and batch models).")
@click.option("--start/--no-start", default=None,
              help="Start tritonserver with the page (default: yes, unless --url is given).")
def web(host: str, port: int | None, share: bool, url: str | None, grpc_url: str | None,
        model_repository: Path | None, start: bool | None) -> None:
    """A browser console: server control, stream and batch chat, live speed figures."""
    from console.clients import ClientError

    from .app import launch
    from .backend import Backend

    backend = Backend()
    try:
        if url:
            click.echo(backend.connect(url, grpc_url or ""))
        if start if start is not None else not url:
            repo = str(model_repository or "")
            backend.start(repo, () if repo else DEFAULT_MODELS)
            click.echo("starting tritonserver (progress and log in the Server tab) ...")
    except (ClientError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    try:
        demo = launch(backend, host=host, port=port, share=share, block=False)
        click.echo(f"qaic-console web on {demo.local_url}" + (f" and {demo.share_url}" if demo.share_url else ""))
        if host not in ("127.0.0.1", "localhost", "::1"):
            click.echo(f"warning: --host {host} serves the page beyond this machine, without a login", err=True)
        click.echo("press Ctrl-C to stop")
        demo.block_thread()
    finally:
        backend.close()
