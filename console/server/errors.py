"""The one error type of the server package."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def repository_not_found(path: Any) -> str:
    """The one line for a model repository that is not there, with the command that writes one."""
    return (f"model repository not found: {path} (qaic-console repo samples --embedded -o {path} writes the embedded "
            "samples there)")


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


class PortTaken(ServerError):
    """tritonserver exited because a port it was to listen on was taken."""


class StaleServerError(ServerError):
    """Servers a console that is gone left on this repository or these ports (``servers``)."""

    def __init__(self, servers: Sequence[Any]) -> None:
        pids = " ".join(str(s.pid) for s in servers)
        found = "; ".join(s.describe() for s in servers)
        super().__init__(f"found {found}: stop it first (qaic-console serve --stop-stale, the console's "
                         f"'stop stale servers' choice, or `kill {pids}`)")
        self.servers = list(servers)
