"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with the status that fits.

Every refusal of the front is an :class:`APIError`; the app's handlers turn it, and the framework's own
errors (an unknown route, a wrong method), into that shape. The console's errors get their status from one table
(:data:`STATUSES`, by class). A model's error on its stream is a :class:`ModelError` with the code Triton
ended the stream with (:func:`upstream_error` says whose fault it is); nothing here reads an error's text.
"""

from __future__ import annotations

from typing import Any

from console.clients import Cancelled, ClientError, NotServed, Refused, ServerFault, Timeout, Unreachable

INVALID = "invalid_request_error"
# the console's errors by class (the first of an error's classes found): status, param, code
STATUSES: dict[type[ClientError], tuple[int, str | None, str | None]] = {
    Unreachable: (503, None, None), Timeout: (504, None, None), NotServed: (404, "model", "model_not_found"),
    Refused: (400, None, None), ServerFault: (502, None, None), Cancelled: (502, None, None),  # not by the caller
    ClientError: (400, None, None)}
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
    """A console ClientError (a control out of range, a model that is not served, Triton unreachable) with the
    status of its class; ``param``: the field a bad request's value came from."""
    status, named, code = next(STATUSES[cls] for cls in type(exc).__mro__ if cls in STATUSES)
    return APIError(status, str(exc), named or (param if status == 400 else None), code)


class ModelError(Exception):
    """An error a model sent for its request: ``str()`` is its message; ``refused`` is what its code says (True:
    the request's fault, Triton's INVALID_ARG; False: the model's own; None: no code came, as from a tritonserver
    the front does not ask for codes: see :func:`console.server.health.error_codes_safe`)."""

    def __init__(self, message: str, refused: bool | None = None) -> None:
        super().__init__(message)
        self.refused = refused


def upstream_error(error: ModelError, answered: bool) -> APIError:
    """A model's ``error`` as the front answers it: 400 when it refused the request before answering (its code
    says so, or no code came), else 500 (its own failure, or one after text had come: ``answered``)."""
    return APIError(500 if answered or error.refused is False else 400, str(error))
