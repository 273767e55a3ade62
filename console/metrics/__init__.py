"""A server's metrics as the consoles show them: scrape a Prometheus page (:mod:`.scrape`), per-model figures
between two scrapes (:mod:`.figures`), followed over time with a short history (:mod:`.watch`), and the QAIC
card's telemetry (:mod:`.qaic`). UI-free: the TUI, the web page, ``qaic-console metrics`` and ``bench`` use it."""

from .figures import COLUMNS, HEADER, Figures, Window, rows, window
from .scrape import MetricsError, Scrape, metrics_endpoint, scrape
from .watch import Look, MetricsWatch

__all__ = ["COLUMNS", "HEADER", "Figures", "Look", "MetricsError", "MetricsWatch", "Scrape", "Window",
           "metrics_endpoint", "rows", "scrape", "window"]
