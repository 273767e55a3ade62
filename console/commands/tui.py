"""``qaic-console tui``: the click command that opens the console."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from console.commands.options import server_options
from console.server.errors import repository_not_found
from console.tui import run

NO_TERMINAL = ("the console needs a terminal (stdin and stdout are not one); without one, run headless: "
               "qaic-console --prompt \"...\" (add --url HOST:PORT for a running server)")


def refusal(repository: str | None) -> str | None:
    """Why the console cannot open here, before anything starts: a repository that is not there, no terminal."""
    if repository is not None and not Path(repository).expanduser().is_dir():
        return repository_not_found(repository)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):  # Textual would spin without one
        return NO_TERMINAL
    return None


@click.command("tui", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--http-url", default=None,
              help="host:port of a running tritonserver's HTTP endpoint, or an OpenAI-compatible server's base URL "
                   "(http://host:port/v1); connects at start.")
@server_options("--grpc-url", "--api", "--metrics-url", "--prometheus", url="--http-url")
@click.option("--model-repository", "repository", default=None, type=click.Path(file_okay=False),
              help="An existing repository for the Server pane's Start and Generate (default: llm_model_dir).")
@click.option("--export-dir", default=None, type=click.Path(file_okay=False),
              help="Where Ctrl+S writes the transcript (default: the current directory).")
def tui(http_url: str | None, grpc_url: str | None, api: str, metrics_url: str | None, prometheus: str | None,
        repository: str | None, export_dir: str | None) -> None:
    """Open the console: Server pane (generate, start, connect), Stream and Batch chat panes.

    Keys: F2/F3/F4 switch panes, Enter sends, Esc stops a reply, Ctrl+S exports, Ctrl+P lists every
    command; on the Server pane F5 serves the embedded SmolLM2 samples. It needs a terminal: without one,
    qaic-console --prompt "..." answers headless.
    """
    refused = refusal(repository)
    if refused:
        click.echo(f"error: {refused}", err=True)
        sys.exit(1)
    run(http_url=http_url, grpc_url=grpc_url, api=api, repository=repository, export_dir=export_dir,
        metrics_url=metrics_url, prometheus=prometheus)
