"""A server's metrics followed over time: each scrape's figures against the previous one, and a short history.

:class:`MetricsWatch` is what the consoles hold: :meth:`MetricsWatch.look` scrapes the page the server's adapter
names (or the address the user typed instead), at most every ``min_interval`` seconds whatever the number of
callers, and returns a :class:`Look`: where the page is, one line about it, each model's figures and their recent
history. Thread-safe (the web's browser tabs share one).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from .figures import Figures, window
from .scrape import MetricsError, Scrape, metrics_endpoint, scrape

KEEP = 60  # scrapes of history per model
MIN_INTERVAL_S = 1.0
GIVE = "give --metrics-url"  # how to name the page on the command line (the consoles name their field)


class Located(Protocol):
    """What a server adapter says about its metrics page."""

    def metrics(self) -> tuple[str | None, str]: ...


@dataclass(frozen=True)
class Look:
    """The metrics as last read: ``url`` (None: the server has none), one line about them, figures, history."""

    url: str | None
    note: str
    figures: tuple[Figures, ...] = ()
    history: dict[str, tuple[Figures, ...]] = field(default_factory=dict)
    ok: bool = False
    down: tuple[str, ...] = ()  # a fleet's servers whose last scrape failed

    def series(self, model: str, name: str) -> list[float]:
        """A figure's recent values for ``model`` (a row's label; missing ones as 0), oldest first."""
        if name == "occupancy":
            return [f.occupancy or 0.0 for f in self.history.get(model, ())]
        return [f[name] or 0.0 for f in self.history.get(model, ())]


NONE = Look(None, "no metrics: no server")


def locate(server: Located | None, override: str = "", give: str = GIVE) -> tuple[str | None, str]:
    """The metrics page to read and how it was found: ``override`` (typed by the user) wins over the adapter's; a
    page guessed or not found says how to ``give`` it (the command line's flag, a console's field)."""
    if override.strip():
        return metrics_endpoint(override), "given"
    if server is None:
        return None, "no server"
    url, how = server.metrics()
    if not how:
        return url, how
    return url, f"{how}: {give} if it is elsewhere" if url else f"{how}: {give}"


class MetricsWatch:
    """One server's metrics page, read when asked (not more often than ``min_interval``), with a short history
    (``give``: how to name another page, said when it is guessed or not found)."""

    def __init__(self, keep: int = KEEP, min_interval: float = MIN_INTERVAL_S, give: str = GIVE) -> None:
        self.keep, self.min_interval, self.give = keep, min_interval, give
        self._lock = threading.Lock()
        self._last: Scrape | None = None
        self._history: dict[str, deque[Figures]] = {}
        self._look = NONE

    def look(self, server: Located | None, override: str = "") -> Look:
        """The figures now (a fresh scrape unless the last one is younger than ``min_interval``)."""
        url, how = locate(server, override, self.give)
        with self._lock:
            if url is None:
                self._reset()
                self._look = Look(None, f"no metrics: {how}")
                return self._look
            if self._last is not None and self._last.url != url:
                self._reset()
            if self._look.url == url and self._last is not None and \
                    time.monotonic() - self._last.at < self.min_interval:
                return self._look
        try:
            now = scrape(url)
        except MetricsError as exc:
            look = Look(url, f"{exc}{f'; {how}' if how and how != 'given' else ''}")
            with self._lock:
                self._reset()
                self._look = look
            return look
        with self._lock:
            figures = window(self._last, now)
            self._last = now
            for fig in figures:
                self._history.setdefault(fig.label, deque(maxlen=self.keep)).append(fig)
            said = f" ({how})" if how and how != "given" else ""
            self._look = Look(url, f"metrics: {url}{said}", tuple(figures),
                              {m: tuple(h) for m, h in self._history.items()}, ok=True)
            return self._look

    def _reset(self) -> None:
        self._last, self._history = None, {}
