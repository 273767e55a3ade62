"""The client's typed errors: the one mapping from each transport's exceptions (by status code, else by type, never by
message) and the front's one table of statuses."""

from __future__ import annotations

import http.client
import urllib.error
from pathlib import Path

import aiohttp
import grpc
import httpx
import openai
import pytest
from tritonclient.utils import InferenceServerException

from console.bench.prompts import SyntheticPrompts, read_jsonl
from console.clients import (
    BadRequest,
    Cancelled,
    ClientError,
    Failure,
    IdleTimeout,
    NotServed,
    Refused,
    ServerFault,
    Timeout,
    Timeouts,
    Unreachable,
    UsageError,
)
from console.clients.failures import error_class, wire_error
from console.core.adapters import adapter_for
from console.core.request import Settings
from console.front.errors import from_client_error

REQUEST = httpx.Request("POST", "http://127.0.0.1:9/v1/completions")
MISLEADING = "model 'm' is not served; unknown model; restricted; already in use"  # words decide nothing


def triton(status: str | None) -> InferenceServerException:
    return InferenceServerException(MISLEADING, status=status)


def rpc(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=MISLEADING)


def openai_status(status: int) -> openai.APIStatusError:
    response = httpx.Response(status, request=REQUEST, json={"error": {"message": MISLEADING}})
    return openai.APIStatusError(MISLEADING, response=response, body=None)


@pytest.mark.parametrize(("exc", "expected"), [
    (triton("StatusCode.UNAVAILABLE"), Unreachable),
    (triton("StatusCode.DEADLINE_EXCEEDED"), Timeout),
    (triton("StatusCode.CANCELLED"), Cancelled),
    (triton("StatusCode.INVALID_ARGUMENT"), Refused),
    (triton("StatusCode.NOT_FOUND"), NotServed),
    (triton("StatusCode.INTERNAL"), ServerFault),
    (triton("400"), Refused),
    (triton("500"), ServerFault),
    (triton(None), ServerFault),  # a gRPC stream's error: a message and no status
    (rpc(grpc.StatusCode.UNAVAILABLE), Unreachable),
    (rpc(grpc.StatusCode.INVALID_ARGUMENT), Refused),
    (rpc(grpc.StatusCode.UNKNOWN), ServerFault),
    (aiohttp.ServerDisconnectedError(), Unreachable),
    (aiohttp.ServerTimeoutError(), Timeout),
    (openai.APITimeoutError(request=REQUEST), Timeout),
    (openai.APIConnectionError(request=REQUEST), Unreachable),
    (openai_status(400), Refused),
    (openai_status(404), NotServed),
    (openai_status(500), ServerFault),
    (urllib.error.HTTPError("http://h/v2", 400, MISLEADING, None, None), Refused),  # an OSError with a status
    (ConnectionRefusedError(111, "Connection refused"), Unreachable),
    (TimeoutError("timed out"), Timeout),
    (http.client.BadStatusLine(MISLEADING), Unreachable),
    (ValueError(MISLEADING), ServerFault),
    (NotServed(MISLEADING), NotServed),
])
def test_each_transport_exception_has_one_class_whatever_it_says(exc: BaseException, expected: type) -> None:
    assert error_class(exc) is expected


def test_a_wire_error_keeps_its_class_and_says_where() -> None:
    error = wire_error(ConnectionRefusedError(111, "Connection refused"), "127.0.0.1:9", "http")
    assert type(error) is Unreachable and str(error) == "cannot reach tritonserver at 127.0.0.1:9 (HTTP): " \
                                                      "connection refused"
    assert wire_error(error, "elsewhere:1", "grpc") is error  # already the client's: not worded twice


def test_reports_name_the_class_as_before() -> None:
    assert [c.kind for c in (Timeout, IdleTimeout, Cancelled, Unreachable, ServerFault, NotServed, Refused,
                             ClientError)] == ["timeout", "idle_timeout", "cancelled", "connection", "server", "server",
                                              "server", "bad_request"]
    failure = Failure.of(NotServed("model 'x' is not served"), 0.5)
    assert (failure.kind, failure.time) == ("server", 0.5)
    with pytest.raises(NotServed, match="'x'"):
        raise failure.exception()
    fired = Timeouts(network=10, idle=10).nearest(0.0, 0.0)  # both at once: no comparison of classes
    assert fired is not None and fired[0] == 10


@pytest.mark.parametrize(("error", "status", "param", "code"), [
    (Unreachable("x"), 503, None, None),
    (Timeout("x"), 504, None, None),
    (IdleTimeout("x"), 504, None, None),
    (NotServed("x"), 404, "model", "model_not_found"),
    (Refused("x"), 400, "prompt", None),
    (ServerFault("x"), 502, None, None),
    (ClientError("x"), 400, "prompt", None),
])
def test_the_front_gives_each_class_its_status(error: ClientError, status: int, param: str | None,
                                               code: str | None) -> None:
    api = from_client_error(error, "prompt")
    assert (api.status, api.param, api.code, str(api)) == (status, param, code, "x")


def test_a_refused_value_is_a_bad_request_and_a_bad_flag_or_local_file_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="^mode must be one of"):
        Settings("m", mode="nope")
    with pytest.raises(BadRequest, match="^empty server URL$"):
        adapter_for("")
    with pytest.raises(UsageError, match="^--input-tokens-mean must be >= 1, got 0$"):
        SyntheticPrompts(0, 0.0, None)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"text": "a"}\n{not json\n')
    with pytest.raises(UsageError, match=r"prompts.jsonl:2: not JSON"):
        read_jsonl(prompts)
    assert issubclass(UsageError, BadRequest) and UsageError.kind == BadRequest.kind == ClientError.kind


def test_the_base_class_is_caught_never_raised() -> None:
    """Each raise names how the request failed (BadRequest, UsageError, Unreachable ...); the base class is what
    callers catch."""
    console = Path(__file__).resolve().parents[2] / "console"
    raising = {str(path.relative_to(console.parent)) for path in console.rglob("*.py")
               if "raise ClientError(" in path.read_text()}
    assert raising == set()
