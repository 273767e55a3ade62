"""The Server pane's tritonserver log: condensed (errors, loads, the backend's own lines, no wide tables), or raw."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from textual.widgets import Log

from console.server import LOG_KEEP, logparse

TITLES = {False: "tritonserver log (Ctrl+G: raw)", True: "tritonserver log, raw (Ctrl+G: condensed)"}


class ServerLogView(Log):
    """The log's lines as they come, condensed unless :attr:`raw`; ``kept`` gives the lines so far (to redraw)."""

    def __init__(self, kept: Callable[[int], Iterable[str]], **kwargs: Any) -> None:
        super().__init__(max_lines=LOG_KEEP, **kwargs)
        self.kept = kept
        self.raw = False

    def on_mount(self) -> None:
        self.border_title = TITLES[self.raw]

    def _shown(self, line: str) -> str | None:
        return line if self.raw else logparse.condensed(line)

    def add(self, line: str) -> None:
        """One more line of the server's (left out when the condensed view leaves it out)."""
        shown = self._shown(line)
        if shown is not None:
            self.write_line(shown)  # follows the tail

    def toggle(self) -> bool:
        """Show the raw log, or the condensed one again (the lines kept so far, redrawn); True when raw."""
        self.raw = not self.raw
        self.clear()
        self.write_lines([s for s in map(self._shown, self.kept(LOG_KEEP)) if s is not None])
        self.border_title = TITLES[self.raw]
        return self.raw
