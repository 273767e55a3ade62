"""Failure kinds and the client's error type."""

from __future__ import annotations

TIMEOUT = "timeout"  # the network timeout of the whole call
IDLE_TIMEOUT = "idle_timeout"  # streaming: no response for too long
CANCELLED = "cancelled"  # cancelled by the caller
CONNECTION = "connection"  # server unreachable or gone
SERVER = "server"  # the server or model answered with an error
BAD_REQUEST = "bad_request"  # rejected before sending
CANCEL_NOTE = "request cancelled on the server"


class ClientError(RuntimeError):
    """A request that cannot be made or answered; ``str()`` is one line, ``kind`` a Failure kind."""

    def __init__(self, message: str, kind: str = BAD_REQUEST) -> None:
        super().__init__(message)
        self.kind = kind
