"""``qaic-console tui``: the Textual console (Server, Stream and Batch panes).

Built on the UI-free core: sends go through ``console.core.request.Exchange``, the Server pane drives a
``console.core.controller.ServerController``; network and server work runs in thread workers so the UI never
freezes.
"""

from __future__ import annotations

from pathlib import Path


def run(http_url: str | None = None, grpc_url: str | None = None, repository: str | None = None,
        export_dir: str | Path | None = None, api: str = "auto", metrics_url: str | None = None,
        prometheus: str | None = None) -> None:
    """Run the TUI until the user quits; a server it started is stopped on the way out."""
    from .app import QaicConsoleApp

    QaicConsoleApp(http_url=http_url, grpc_url=grpc_url, repository=repository, export_dir=export_dir,
                   api=api, metrics_url=metrics_url, prometheus=prometheus).run()
