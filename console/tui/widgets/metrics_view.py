"""The Server pane's metrics: per model, what the server's metrics page says, refreshed while it serves.

A table (requests/s, Triton's queue and compute time per request, the backend's slot wait, time to first token
and decode step, slots in use, requests waiting, tokens/s) and, for the model picked in the table, a minute of
tokens/s and slot occupancy plotted. It reads the page its server's adapter names (Triton's metrics port; a URL
typed in its field instead), in a thread worker, once a second; it shows only while a server answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Input, Label, Sparkline, Static

from console.core.controller import Snapshot
from console.fleet.watch import watcher
from console.metrics import HEADER, Look, rows

from .fields import Field, row, value

REFRESH_S = 1.0
GIVE = "type it in the Metrics URL field"  # said when the server's page is guessed or not found
PLOTS = (("tokens_per_s", "tok/s"), ("occupancy", "slots"))


@dataclass
class Read(Message):
    """A worker read the metrics (posted from its thread: post_message is thread-safe)."""

    look: Look


class MetricsView(Vertical):
    """The metrics of the server ``snapshot()`` names (``metrics_url``: the page to read instead of its own;
    ``prometheus``: a fleet's, shown whether or not a server is connected)."""

    DEFAULT_CSS = """
    MetricsView { height: auto; margin: 0 0 1 0; padding: 0 1; }
    MetricsView #metrics-note { color: $text-muted; }
    MetricsView DataTable { height: auto; max-height: 8; }
    MetricsView .metrics-plots { height: 2; }
    MetricsView .metrics-plots Label { width: 7; color: $text-muted; }
    MetricsView Sparkline { width: 1fr; height: 2; margin: 0 2 0 0; }
    """

    def __init__(self, snapshot: Callable[[], Snapshot], metrics_url: str = "", prometheus: str = "",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._snapshot = snapshot
        self._initial = metrics_url
        self.fleet = bool(prometheus)
        self.watching = watcher(prometheus, GIVE)  # not self.watch: a widget's watch() is textual's
        self.look: Look | None = None  # the last one shown
        self.model = ""  # the model plotted (the table's cursor row)
        self._reading = False

    def compose(self) -> ComposeResult:
        yield Static(id="metrics-note")
        yield DataTable(id="metrics-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(classes="metrics-plots"):
            for name, label in PLOTS:
                yield Label(label)
                yield Sparkline([], id=f"metrics-{name.replace('_', '-')}")
        yield row("Metrics URL", Field(self._initial, placeholder="blank: the server's own (Triton: HTTP port + 2)",
                                       id="metrics-url", compact=True))

    def on_mount(self) -> None:
        table = self.query_one("#metrics-table", DataTable)
        table.header_height = 2
        table.add_columns(*(Text("\n".join(label.rsplit(" ", 1))) for label in HEADER))  # "slot wait" over "ms"
        self.display = False
        self.set_interval(REFRESH_S, self._tick)

    def _tick(self) -> None:
        snap = self._snapshot()
        self.display = self.fleet or snap.serving or snap.phase == "unreachable"
        if self.display and not self._reading:
            self._reading = True
            self._read(snap, value(self, "#metrics-url"))

    @work(thread=True, group="metrics", exclusive=True)
    def _read(self, snap: Snapshot, override: str) -> None:
        try:
            self.post_message(Read(self.watching.look(snap.server, override)))
        finally:
            self._reading = False

    @on(Read)
    def _read_done(self, message: Read) -> None:
        self.show(message.look)

    def show(self, look: Look) -> None:
        """Render ``look``: its line, the table, the picked model's history."""
        self.look = look
        self.query_one("#metrics-note", Static).update(look.note)
        table = self.query_one("#metrics-table", DataTable)
        shown = rows(look.figures)
        if [table.get_row_at(i) for i in range(table.row_count)] != shown:
            cursor = table.cursor_row
            table.clear()
            for cells in shown:
                table.add_row(*cells, key=cells[0])
            if shown:
                table.move_cursor(row=min(cursor, len(shown) - 1))
        models = [cells[0] for cells in shown]
        if self.model not in models:
            self.model = models[0] if models else ""
        for name, _ in PLOTS:
            self.query_one(f"#metrics-{name.replace('_', '-')}", Sparkline).data = look.series(self.model, name)

    @on(DataTable.RowHighlighted, "#metrics-table")
    def _picked(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value and event.row_key.value != self.model:
            self.model = str(event.row_key.value)
            if self.look is not None:
                self.show(self.look)

    @on(Input.Submitted, "#metrics-url")
    def _url_submitted(self) -> None:
        self._tick()
