"""The client's errors: one class per way a request fails.

Code decides by class (``except Unreachable``, ``isinstance(exc, Timeout)``); :attr:`ClientError.kind` names the
class where a report writes it down (a Failure's ``error_kind`` in headless and exported JSON, the bench's error
counts, the mark of a failed reply). Which class a transport's exception is, is decided in one place:
:func:`console.clients.failures.error_class`.
"""

from __future__ import annotations

CANCEL_NOTE = "request cancelled on the server"


class ClientError(RuntimeError):
    """A request that cannot be made or answered; ``str()`` is one line. Raised as one of the classes below, which
    say how; caught as this one."""

    kind = "bad_request"


class BadRequest(ClientError):
    """Rejected before sending: a value, an option or a prompt the console cannot send."""


class UsageError(BadRequest):
    """What a command was given is wrong: a flag, a combination of flags, or a local file or folder it names (a
    bench prompts file that does not parse, a tokenizer folder that is missing)."""


class Timeout(ClientError):
    """The network timeout of the whole call fired (or the transport's own)."""

    kind = "timeout"


class IdleTimeout(Timeout):
    """Streaming: no response for too long."""

    kind = "idle_timeout"


class Cancelled(ClientError):
    """Cancelled by the caller (Stop, Ctrl-C) or on the server."""

    kind = "cancelled"


class Unexpected(ClientError):
    """Something else went wrong in the console on the way (a chat template that fails to load ...)."""

    kind = "error"


class Unreachable(ClientError):
    """The server cannot be reached, or went away during the request."""

    kind = "connection"


class ServerFault(ClientError):
    """The server or the model answered with an error of its own."""

    kind = "server"


class NotServed(ServerFault):
    """The server does not serve the model asked for (its message names the ones it serves)."""


class Refused(ServerFault):
    """The model refused the request as bad input (Triton's INVALID_ARG: HTTP 400, gRPC INVALID_ARGUMENT)."""
