"""``qaic-console tui``: the click command that opens the console."""

from __future__ import annotations

import click

from console.core.adapters import APIS, api_help

from . import run


@click.command("tui", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--http-url", default=None,
              help="host:port of a running tritonserver's HTTP endpoint, or an OpenAI-compatible server's base URL "
                   "(http://host:port/v1); connects at start.")
@click.option("--grpc-url", default=None, help="host:port of its gRPC endpoint (the Stream pane needs it).")
@click.option("--api", type=click.Choice(APIS), default="auto", show_default=True,
              help=api_help("--http-url"))
@click.option("--metrics-url", default=None,
              help="The server's metrics page (host:port or a URL) for the Server pane's metrics, when it is not its "
                   "own (Triton: the HTTP port + 2; an OpenAI-compatible server: /metrics beside /v1).")
@click.option("--model-repository", "repository", default=None, type=click.Path(file_okay=False),
              help="Repository for the Server pane's Start and Generate (default: llm_model_dir).")
@click.option("--export-dir", default=None, type=click.Path(file_okay=False),
              help="Where Ctrl+S writes the transcript (default: the current directory).")
def tui(http_url: str | None, grpc_url: str | None, api: str, metrics_url: str | None, repository: str | None,
        export_dir: str | None) -> None:
    """Open the console: Server pane (generate, start, connect), Stream and Batch chat panes.

    Keys: F2/F3/F4 switch panes, Enter sends, Esc stops a reply, Ctrl+S exports, Ctrl+P lists every
    command; on the Server pane F5 serves the embedded SmolLM2 samples.
    """
    run(http_url=http_url, grpc_url=grpc_url, api=api, repository=repository, export_dir=export_dir,
        metrics_url=metrics_url)
