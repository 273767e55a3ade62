"""What a transport raised, as one of the client's error classes: the one mapping.

tritonclient (``InferenceServerException`` and the status it carries: gRPC's ``StatusCode.X``, HTTP's ``400``), grpc,
aiohttp, the ``openai`` client, urllib and the socket layer each raise their own exceptions. :func:`error_class` says
which :class:`~.errors.ClientError` each one is, from its status code where it has one, else from its type (the
first of its classes in :func:`_by_type`'s table); :func:`wire_error` adds the one line a Triton endpoint's failure
is worded in, and :func:`mapped` turns whatever a block raises into it (as httpx's transport maps httpcore's errors).
Nothing here reads an error's message to decide its class.
"""

from __future__ import annotations

import contextlib
import http.client
import sys
import urllib.error
from collections.abc import Iterator
from typing import Any

from tritonclient.utils import InferenceServerException

from .errors import Cancelled, ClientError, NotServed, Refused, ServerFault, Timeout, Unreachable

# a status code (gRPC's name, HTTP's number) -> the class; any other status is the server's own fault
STATUSES: dict[str, type[ClientError]] = {
    "UNAVAILABLE": Unreachable, "DEADLINE_EXCEEDED": Timeout, "CANCELLED": Cancelled,
    "INVALID_ARGUMENT": Refused, "NOT_FOUND": NotServed, "400": Refused, "404": NotServed, "422": Refused,
}
PROTOCOL_NAMES = {"http": "HTTP", "grpc": "gRPC"}
CAUSES = ("connection refused", "connection reset", "socket closed", "timed out", "no route to host",
          "network is unreachable", "name or service not known", "temporary failure in name resolution")
WRONG_PORT = " (it answers HTTP: is it tritonserver's HTTP port? gRPC is usually the HTTP port + 1, e.g. 8001)"
GONE = " (the server went away: it stopped, crashed or is restarting)"


def status_of(exc: BaseException) -> str | None:
    """The status code an exception carries (``UNAVAILABLE``, ``400``), or None."""
    status: Any = None
    grpc, openai, aiohttp = (sys.modules.get(name) for name in ("grpc", "openai", "aiohttp"))
    if isinstance(exc, InferenceServerException):
        status = exc.status()
    elif isinstance(exc, urllib.error.HTTPError):
        status = exc.code
    elif grpc is not None and isinstance(exc, grpc.RpcError) and callable(getattr(exc, "code", None)):
        status = exc.code()
    elif openai is not None and isinstance(exc, openai.APIStatusError):
        status = exc.status_code
    elif aiohttp is not None and isinstance(exc, aiohttp.ClientResponseError):
        status = exc.status
    if status is None or status == "":
        return None
    return str(getattr(status, "name", status)).removeprefix("StatusCode.")


def _by_type() -> dict[type, type[ClientError]]:
    """Exception types -> classes, for exceptions without a status (a library not imported raised nothing)."""
    table: dict[type, type[ClientError]] = {TimeoutError: Timeout, OSError: Unreachable,
                                            http.client.HTTPException: Unreachable}
    aiohttp: Any = sys.modules.get("aiohttp")
    if aiohttp is not None:
        table.update({aiohttp.ServerTimeoutError: Timeout, aiohttp.ClientConnectionError: Unreachable})
    openai: Any = sys.modules.get("openai")
    if openai is not None:
        table.update({openai.APITimeoutError: Timeout, openai.APIConnectionError: Unreachable})
    return table


def error_class(exc: BaseException) -> type[ClientError]:
    """The client's error class of what a transport raised."""
    if isinstance(exc, ClientError):
        return type(exc)
    status = status_of(exc)
    if status is not None:
        return status_class(status)
    table = _by_type()
    return next((table[cls] for cls in type(exc).__mro__ if cls in table), ServerFault)


def status_class(status: str | int) -> type[ClientError]:
    """The class of an answer with ``status`` (gRPC's name or HTTP's number)."""
    return STATUSES.get(str(status), ServerFault)


def reason_of(exc: BaseException) -> str:
    """What went wrong, in a few words: ``connection refused``, not ``<urlopen error [Errno 111] ...>``."""
    if isinstance(exc, InferenceServerException):
        return " ".join((exc.message() or type(exc).__name__).split())
    cause = exc.reason if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError) \
        else exc
    text = getattr(cause, "strerror", None) or " ".join(str(cause).split()) or type(cause).__name__
    return text[:1].lower() + text[1:] if isinstance(cause, OSError) else text


def cause_of(exc: BaseException) -> str:
    """Why a connection failed: a known cause ("connection refused" ...; gRPC's paragraph and httpx's errno
    reduced to it), else :func:`reason_of`."""
    reason = reason_of(exc)
    return next((known for known in CAUSES if known in reason.lower()), reason)


def answers_http(url: str, timeout: float = 3.0) -> bool:
    """Whether ``host:port`` answers an HTTP request (a gRPC port answers one with no HTTP); OSError when nothing
    answers there at all."""
    host, _, port = url.rpartition(":")
    conn = http.client.HTTPConnection(host or url, int(port) if port.isdigit() else 80, timeout=timeout)
    try:
        conn.request("GET", "/v2/health/live")
        conn.getresponse().read()
    except http.client.HTTPException:
        return False
    finally:
        conn.close()
    return True


def error_message(exc: BaseException, url: str, protocol: str, lost: bool = False) -> str:
    """One line for a failed call to tritonserver at ``url``; ``lost``: the server had answered before (it went
    away)."""
    if isinstance(exc, http.client.HTTPException):
        return f"{url} does not answer HTTP ({type(exc).__name__}): is it tritonserver's gRPC port? (HTTP is " \
               "usually the gRPC port - 1, e.g. 8000)"
    if error_class(exc) is not Unreachable:
        return reason_of(exc)
    what, cause = "lost the connection to" if lost else "cannot reach", cause_of(exc)
    hint = GONE if lost else ""
    if not lost and protocol.lower() == "grpc" and cause == "socket closed":  # an HTTP port, or a server gone
        hint = WRONG_PORT if _answers_http_now(url) else GONE
    shown = PROTOCOL_NAMES.get(protocol.lower(), protocol)
    return f"{what} tritonserver at {url} ({shown}): {cause}{hint}"


def _answers_http_now(url: str) -> bool:
    try:
        return answers_http(url, timeout=1.0)
    except OSError:
        return False


def wire_error(exc: BaseException, url: str, protocol: str, lost: bool = False) -> ClientError:
    """What a call to tritonserver at ``url`` raised, as the client's error (a ClientError stays as it is)."""
    if isinstance(exc, ClientError):
        return exc
    return error_class(exc)(error_message(exc, url, protocol, lost))


@contextlib.contextmanager
def mapped(url: str, protocol: str) -> Iterator[None]:
    """Whatever the block raises comes out as :func:`wire_error`'s ClientError."""
    try:
        yield
    except ClientError:
        raise
    except Exception as exc:
        raise wire_error(exc, url, protocol) from None
