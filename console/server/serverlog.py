"""A running tritonserver's output as it arrives: the last lines, failed model loads, the shutdown's state."""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections import deque
from collections.abc import Callable

from . import logparse

LOG_KEEP = 500

LogCallback = Callable[[str], None]


class ServerLog:
    """Reads a server's merged stdout/stderr in a thread; ``on_log`` hears every line."""

    def __init__(self) -> None:
        self._lines: deque[str] = deque(maxlen=LOG_KEEP)
        self._failures: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self.on_log: LogCallback | None = None
        self.exit_expired = threading.Event()  # tritonserver gave up waiting at shutdown: it may hang on a dead stub

    def follow(self, proc: subprocess.Popen[str]) -> None:
        """Start reading ``proc``'s output (forgetting what an earlier process said)."""
        with self._lock:
            self._lines.clear()
            self._failures.clear()
        self._reader = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._reader.start()

    def join(self, timeout: float) -> None:
        """Wait for the reader to reach the end of the output."""
        if self._reader is not None:
            self._reader.join(timeout=timeout)

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        with contextlib.suppress(ValueError, OSError):  # the pipe closed under us by a stop
            for raw in proc.stdout:
                self.record(raw.rstrip("\n"))

    def record(self, line: str) -> None:
        failed = logparse.failed_model(line)
        if logparse.EXIT_EXPIRED in line:
            self.exit_expired.set()
        with self._lock:
            self._lines.append(line)
            if failed:
                self._failures.append(failed)
        if self.on_log is not None:
            with contextlib.suppress(Exception):
                self.on_log(line)

    def tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines."""
        with self._lock:
            lines = list(self._lines)
        return lines[-n:] if n > 0 else []

    def first_failure(self) -> tuple[str, str] | None:
        """(model, reason) of the first model that failed to load, if any."""
        with self._lock:
            return self._failures[0] if self._failures else None
