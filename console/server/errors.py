"""The one error type of the server package."""

from __future__ import annotations

from collections.abc import Iterable


class ServerError(RuntimeError):
    """The server could not be found, started or kept running; ``str()`` is one line saying why.

    ``log_tail`` holds the last lines of the server log (may be empty).
    """

    def __init__(self, message: str, log_tail: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.log_tail = list(log_tail)

    def details(self) -> str:
        """The message followed by the server's last log lines."""
        if not self.log_tail:
            return str(self)
        return "\n".join([str(self), "--- tritonserver log (last lines) ---", *self.log_tail])
