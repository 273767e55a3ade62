"""The fleet followed over time, as the consoles follow one server: :class:`FleetWatch` answers
:meth:`~FleetWatch.look` with the same :class:`~console.metrics.Look` a :class:`~console.metrics.MetricsWatch`
gives, read from a Prometheus (each model in total, then per instance; the servers that are down)."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from console.metrics.figures import Figures
from console.metrics.watch import GIVE, KEEP, MIN_INTERVAL_S, Look

from .query import WINDOW, Prometheus, PrometheusError, read


def watcher(prometheus: str = "", give: str = GIVE) -> Any:
    """What a console follows: the fleet through ``prometheus`` when given, else one server's metrics page
    (``give``: how the console names another page, said when one is guessed or not found)."""
    from console.metrics import MetricsWatch

    return FleetWatch(prometheus) if prometheus else MetricsWatch(give=give)


def fleet_note(url: str, figures: tuple[Figures, ...], down: tuple[str, ...], window: str) -> str:
    instances = sorted({f.instance for f in figures if f.instance})
    said = f"fleet: {len(instances)} instance{'s' if len(instances) != 1 else ''} via Prometheus {url} " \
           f"(rates over {window})"
    return said + (f"; down (up == 0): {', '.join(down)}" if down else "")


class FleetWatch:
    """A Prometheus's view of every server, read when asked (not more often than ``min_interval``)."""

    def __init__(self, address: str, window: str = WINDOW, selector: str = "", keep: int = KEEP,
                 min_interval: float = MIN_INTERVAL_S) -> None:
        self.prometheus = Prometheus(address)
        self.window, self.selector, self.keep, self.min_interval = window, selector, keep, min_interval
        self._lock = threading.Lock()
        self._history: dict[str, deque[Figures]] = {}
        self._look: Look | None = None
        self._read_at = 0.0

    def look(self, server: Any = None, override: str = "") -> Look:
        """The fleet now (the server and metrics page a console names are not read: Prometheus scrapes them)."""
        with self._lock:
            if self._look is not None and time.monotonic() - self._read_at < self.min_interval:
                return self._look
        url = self.prometheus.url
        try:
            fleet = read(self.prometheus, self.window, self.selector)
        except PrometheusError as exc:
            with self._lock:
                self._history, self._look, self._read_at = {}, Look(url, str(exc)), time.monotonic()
                return self._look
        with self._lock:
            for fig in fleet.figures:
                self._history.setdefault(fig.label, deque(maxlen=self.keep)).append(fig)
            self._look = Look(url, fleet_note(url, fleet.figures, fleet.down, self.window), fleet.figures,
                              {label: tuple(h) for label, h in self._history.items()}, ok=True, down=fleet.down)
            self._read_at = time.monotonic()
            return self._look
