"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with the status that fits.

Every refusal of the front is an :class:`APIError`; the app's handlers turn it, and the framework's own
errors (an unknown route, a wrong method), into that shape. An error Triton reports is classified here too
(:func:`upstream_error`): a gRPC stream carries only the message, so a request the model refused before it
answered anything is the client's (400), unless the message is one of the backend's own failures.
"""

from __future__ import annotations

from typing import Any

from console.clients import CONNECTION, TIMEOUT, ClientError

INVALID = "invalid_request_error"
SERVER_FAULTS = ("generation failed", "the model failed")  # the bundled backend's words for its own failures
STATUS_TYPES = {400: INVALID, 401: "authentication_error", 404: INVALID, 405: INVALID, 413: INVALID,
                500: "server_error", 502: "server_error", 503: "service_unavailable", 504: "timeout"}


class APIError(Exception):
    """A request the front answers with an error: ``str()`` is the one-line message."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str | None = None) -> None:
        super().__init__(" ".join(message.split()))
        self.status, self.param, self.code = status, param, code
        self.type = kind or STATUS_TYPES.get(status, INVALID if status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param, code)


def from_client_error(exc: ClientError, param: str | None = None) -> APIError:
    """A console ClientError (a control out of range, a model that is not served, Triton unreachable)."""
    if exc.kind == CONNECTION:
        return APIError(503, str(exc))
    if exc.kind == TIMEOUT:
        return APIError(504, str(exc))
    if "is not served" in str(exc):
        return APIError(404, str(exc), "model", "model_not_found")
    return bad_request(str(exc), param)


def upstream_error(message: str, answered: bool) -> APIError:
    """An error the model reported on its stream; ``answered``: text had come before it."""
    server_side = answered or message.startswith(SERVER_FAULTS)
    return APIError(500 if server_side else 400, message)
