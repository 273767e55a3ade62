"""What a benchmark prints: a progress bar on stderr while a level runs, and plain-text tables."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from .load import RequestRecord
from .results import headline, level_key, value
from .server_table import notes, server_rows

BAR = 28


class ProgressBar:
    """``[#####.....] 12/48 c=4 · 2 errors · 3.1 s`` redrawn in place on a terminal (thread-safe).

    ``total`` is a request count, or None with ``duration`` for a timed level. Off a terminal it
    prints nothing until :meth:`close`, which writes one line.
    """

    def __init__(self, label: str, stream: TextIO, total: int | None = None, duration: float | None = None,
                 live: bool | None = None) -> None:
        self.label, self.stream = label, stream
        self.total, self.duration = total, duration
        self.live = stream.isatty() if live is None else live
        self.done = self.errors = 0
        self._t0 = time.perf_counter()
        self._drawn = 0.0
        self._lock = threading.Lock()

    def __call__(self, record: RequestRecord) -> None:
        with self._lock:
            self.done += 1
            self.errors += not record.ok
            now = time.perf_counter()
            if self.live and now - self._drawn >= 0.1:
                self._drawn = now
                self.stream.write("\r" + self._line(now))
                self.stream.flush()

    def _line(self, now: float) -> str:
        elapsed = now - self._t0
        if self.total:
            fraction, count = self.done / self.total, f"{self.done}/{self.total}"
        elif self.duration:
            fraction, count = elapsed / self.duration, f"{self.done}"
        else:
            fraction, count = 0.0, f"{self.done}"
        filled = min(BAR, int(BAR * fraction))
        errors = f" · {self.errors} errors" if self.errors else ""
        return f"[{'#' * filled}{'.' * (BAR - filled)}] {count} {self.label}{errors} · {elapsed:.1f} s"

    def close(self) -> None:
        with self._lock:
            line = self._line(time.perf_counter())
            self.stream.write(("\r" if self.live else "") + line + "\n")
            self.stream.flush()


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A right-aligned plain-text table (the first column left-aligned)."""
    cells = [[cell(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def cell(item: Any) -> str:
    """A table cell: ``-`` for nothing, floats rounded (3 significant digits below 10, else 1 decimal)."""
    if item is None:
        return "-"
    if isinstance(item, float):
        return f"{item:.3g}" if abs(item) < 10 else f"{item:,.1f}"
    return str(item)


def level_rows(levels: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """(header, rows) of a run's levels: one row per level, the headline genai-perf figures."""
    columns = headline(levels)
    header = ["level", "requests", "errors", *(label for _, _, label in columns)]
    rows = [[level_key(lv), lv["request_count"], lv["error_count"],
             *(value(lv, metric, stat) for metric, stat, _ in columns)] for lv in levels]
    return header, rows


def comparison_rows(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> tuple[list[str], list[list[Any]]]:
    """(header, rows) of :func:`results.compare` rows: each run's value, and its ratio to the first run's."""
    header = ["level", "metric", *names, *(f"{n} / {names[0]}" for n in names[1:])]
    return header, [[r["level"], r["metric"], *r["values"], *r["ratios"][1:]] for r in rows]


def levels_table(levels: Sequence[dict[str, Any]]) -> str:
    """The run's console table."""
    return table(*level_rows(levels))


def adapter_tables(levels: Sequence[dict[str, Any]]) -> str:
    """Each adapter's own table, when the run spread its requests over adapters ("" when it did not)."""
    names = dict.fromkeys(name for level in levels for name in level.get("adapters", {}))
    return "".join(f"\nadapter {name}\n" + levels_table([level["adapters"][name] for level in levels
                                                          if name in level.get("adapters", {})]) for name in names)


def server_table(levels: Sequence[dict[str, Any]]) -> str:
    """The server's side of each level (its metrics, the card), then where the figures come from."""
    header, rows = server_rows(levels)
    return "\n".join(["server side", table(header, rows), *(f"  {line}" for line in notes(levels))])


def compare_table(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    """The comparison's console table."""
    return table(*comparison_rows(rows, names))
