"""Cheap rejections first, on every protocol (issue 22's probes), against a real tritonserver serving the embedded
samples: each probe gets one line (no stack, no server path) with the client's-fault status (HTTP 400, gRPC
INVALID_ARGUMENT; a gRPC stream's errors carry only their message), and the same greedy canary answers
identically right after. Status questions answer only the asker's own request."""

from __future__ import annotations

import json
import queue
import urllib.error
import urllib.request
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from helpers import wait_until
from tritonclient.utils import InferenceServerException

from console.clients.wire import tensor
from console.server import TritonServer

pytestmark = pytest.mark.server
BATCH, STREAM = "smollm2_kv", "smollm2_decoupled"
CANARY = "My name is"
HUGE = "lorem " * (20_000_000 // 6)  # 20 MB
BIG_JSON = "lorem " * (2_000_000 // 6)  # 2 MB: a JSON body over ~4 MB crashes this tritonserver (SIGSEGV) itself
NESTED = "[" * 100_000
TOO_BIG = 2**32 + 5


@pytest.fixture(scope="module")
def server(embedded_server: TritonServer) -> TritonServer:
    """The session's tritonserver on the embedded samples: what it refuses must leave it serving the files after."""
    return embedded_server


def post(server: TritonServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON answer) of ``POST /v2/models/<path>``."""
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/{path}", data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def infer(server: TritonServer, protocol: str, inputs: list[tuple[str, str, list[Any]]]) -> tuple[str, str]:
    """(status, message) of a unary infer on the batch model (status "200" and the text when it answers)."""
    module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = module.InferenceServerClient(url)
    try:
        result = client.infer(BATCH, [tensor(module, n, t, v) for n, t, v in inputs])
        return "200", result.as_numpy("text_output")[0].decode()
    except InferenceServerException as exc:
        return str(exc.status()), exc.message()
    finally:
        client.close()


def streamed(server: TritonServer, inputs: list[tuple[str, str, list[Any]]], request_id: str = "s") -> str:
    """The error message (or the joined text) of one request on a gRPC stream to the decoupled model."""
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer(STREAM, [tensor(grpcclient, n, t, v) for n, t, v in inputs],
                                  request_id=request_id, enable_empty_final_response=True)
        text = ""
        while True:
            result, error = answers.get(timeout=300)
            if error is not None:
                return f"error: {error.message()}"
            piece = result.as_numpy("text_output")
            text += piece[0].decode() if piece is not None and piece.size else ""
            if result.get_response().parameters["triton_final_response"].bool_param:
                return text
    finally:
        client.stop_stream()
        client.close()


def canaries(server: TritonServer) -> tuple[str, str]:
    """The greedy answers to the canary prompt, from the batch model and the stream model."""
    status, batch = infer(server, "http", [("prompt", "BYTES", [CANARY]), ("max_tokens", "INT64", [8]),
                                           ("exclude_input_in_output", "BOOL", [True])])
    assert status == "200", batch
    return batch, streamed(server, [("prompt", "BYTES", [CANARY]), ("max_tokens", "INT64", [8])])


@pytest.fixture(scope="module")
def canary(server: TritonServer) -> tuple[str, str]:
    answers = canaries(server)
    assert all(answers) and answers[0] == answers[1], answers
    return answers


def one_line(message: str, needle: str) -> None:
    assert needle in message, message
    assert "\n" not in message and "Traceback" not in message and "/" not in message, message


def test_a_20_mb_prompt_is_refused_by_its_size_on_every_protocol(server, canary) -> None:
    needle = f"the prompt is {len(HUGE)} bytes, over the"  # the byte check: the prompt was never tokenised
    status, message = infer(server, "http", [("prompt", "BYTES", [HUGE])])
    assert status == "400"
    one_line(message, needle)
    status, message = infer(server, "grpc", [("prompt", "BYTES", [HUGE])])
    assert status == "StatusCode.INVALID_ARGUMENT"
    one_line(message, needle)
    one_line(streamed(server, [("text_input", "BYTES", [HUGE])]), needle)
    status, answer = post(server, f"{BATCH}/generate", {"prompt": BIG_JSON})
    assert status == 400
    one_line(answer["error"], f"the prompt is {len(BIG_JSON)} bytes, over the")
    assert canaries(server) == canary


def test_deep_or_big_json_gets_one_line_before_it_is_parsed(server, canary) -> None:
    for sampling, needle in ((NESTED, "sampling_parameters is 100000 bytes, over the 65536 this model reads"),
                             ("[" * 60_000, "sampling_parameters nests deeper than 32 levels"),
                             ('{"max_tokens": 1' + "0" * 5000 + "}", "sampling_parameters is not JSON")):
        status, answer = post(server, f"{BATCH}/generate", {"text_input": "hi", "sampling_parameters": sampling})
        assert status == 400
        one_line(answer["error"], needle)
        status, message = infer(server, "http", [("text_input", "BYTES", ["hi"]),
                                                 ("sampling_parameters", "BYTES", [sampling])])
        assert status == "400"
        one_line(message, needle)
        one_line(streamed(server, [("text_input", "BYTES", ["hi"]), ("sampling_parameters", "BYTES", [sampling])]),
                 needle)
    assert canaries(server) == canary


def test_integers_out_of_range_are_refused_never_wrapped(server, canary) -> None:
    needle = f"max_tokens must be an integer >= 0 and <= 2147483647, got {TOO_BIG}"
    for body in ({"prompt": "hi", "max_tokens": TOO_BIG},  # a JSON number: Triton makes the INT64 tensor
                 {"text_input": "hi", "sampling_parameters": json.dumps({"max_tokens": TOO_BIG})}):
        status, answer = post(server, f"{BATCH}/generate", body)
        assert status == 400
        one_line(answer["error"], needle)
    status, answer = post(server, f"{BATCH}/generate", {"prompt": "hi", "max_tokens": 2**40})
    assert status == 400 and "got 1099511627776" in answer["error"]
    json_infer = {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["hi"]},
                             {"name": "max_tokens", "shape": [1], "datatype": "INT64", "data": [TOO_BIG]}]}
    status, answer = post(server, f"{BATCH}/infer", json_infer)
    assert status == 400
    one_line(answer["error"], needle)
    status, answer = post(server, f"{BATCH}/generate", {"prompt": "hi", "max_tokens": 2**64 + 1})
    assert status != 200 and "output_tokens" not in answer  # past INT64: Triton refuses it before the model
    assert canaries(server) == canary


def test_invalid_requests_are_the_clients_fault_on_every_endpoint(server, canary) -> None:
    needle = "temperature must be a number >= 0, got -1"
    bad = [("prompt", "BYTES", ["hi"]), ("temperature", "FP32", [-1.0])]
    assert infer(server, "http", bad)[0] == "400"
    status, message = infer(server, "grpc", bad)
    assert status == "StatusCode.INVALID_ARGUMENT"
    one_line(message, needle)
    status, answer = post(server, f"{BATCH}/generate", {"prompt": "hi", "temperature": -1.0})
    assert status == 400
    one_line(answer["error"], needle)
    one_line(streamed(server, bad), needle)
    assert canaries(server) == canary


def test_unknown_inputs_are_refused_alike_on_every_protocol(server, canary) -> None:
    needle = "unexpected inference input 'max_token'"  # a typo of max_tokens
    typo = [("prompt", "BYTES", ["hi"]), ("max_token", "INT64", [4])]
    for protocol, code in (("http", "400"), ("grpc", "StatusCode.INVALID_ARGUMENT")):
        status, message = infer(server, protocol, typo)  # Triton's own check
        assert status == code and needle in message, message
    assert needle in streamed(server, typo)
    status, answer = post(server, f"{BATCH}/generate", {"prompt": "hi", "max_token": 4})  # the backend's check
    assert status == 400
    one_line(answer["error"], needle)
    assert canaries(server) == canary


def test_a_status_question_answers_only_about_the_askers_own_request(server, canary) -> None:
    long = [("max_tokens", "INT64", [0]), ("min_tokens", "INT64", [400])]  # to ctx_len: it runs for a while

    def ask(protocol: str, **question: str) -> str:
        """The answer (or the error) to a status question, over a gRPC stream or the generate endpoint."""
        if protocol == "grpc":
            return streamed(server, [(name, "BYTES", [value]) for name, value in question.items()], "question")
        status, answer = post(server, f"{BATCH}/generate", question)
        assert "output_tokens" not in answer and "input_tokens" not in answer, answer  # no token counts
        return answer["text_output"] if status == 200 else f"error: {answer['error']}"

    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    batch = grpcclient.InferenceServerClient(server.grpc_url)
    running = None
    try:
        client.async_stream_infer(STREAM, [tensor(grpcclient, n, t, v) for n, t, v in [
            ("prompt", "BYTES", ["Once upon a time"]), *long, ("status_key", "BYTES", ["key-1"])]],
            request_id="streamed", enable_empty_final_response=True)
        assert answers.get(timeout=300)[1] is None  # its first text: it runs
        running = batch.async_infer(BATCH, [tensor(grpcclient, n, t, v) for n, t, v in [
            ("prompt", "BYTES", ["Once upon a time"]), *long, ("status_key", "BYTES", ["key-b"])]],
            callback=lambda result, error: None, request_id="batched")
        assert ask("grpc", status_of="streamed", status_key="key-1") == "running"
        assert ask("grpc", status_of="streamed", status_key="key-2") == "unknown"  # another client's key
        assert ask("grpc", status_of="batched", status_key="key-1") == "unknown"
        wait_until(lambda: ask("http", status_of="batched", status_key="key-b") == "running", 120, "the batch request")
        assert ask("http", status_of="batched", status_key="key-1") == "unknown"
        for protocol in ("grpc", "http"):
            one_line(ask(protocol, status_of="batched"), "status_of needs status_key")
    finally:
        if running is not None:
            running.cancel()
        batch.close()
        client.stop_stream(cancel_requests=True)
        client.close()
    assert canaries(server) == canary
