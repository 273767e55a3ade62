"""The requests NVIDIA's LLM bench tools send, against the bundled backend, without templates.

genai-perf and perf_analyzer cannot run on this machine (the perf-analyzer 2.60 wheel's binary needs glibc
2.38 and GLIBCXX 3.4.32; Debian 12 has 2.36; the only other wheel, 0.1.0, is a placeholder without the
binary), so these tests send what they send, recorded from genai-perf 0.0.16's sources:

* ``--endpoint-type kserve --backend vllm --streaming`` (``inputs/converters/vllm_converter.py``; perf_analyzer
  then runs ``-i grpc --streaming``): a gRPC stream request with ``text_input`` [1] (BYTES), ``stream`` [True],
  ``exclude_input_in_output`` [True] and ``sampling_parameters`` [JSON] whose values are STRINGS
  (``{"max_tokens": "16", "min_tokens": "16"}``; ``min_tokens`` with ``--output-tokens-mean-deterministic``);
* ``--endpoint-type generate --streaming`` (``inputs/converters/triton_generate_converter.py``): HTTP
  ``POST /v2/models/<model>/generate_stream`` with ``{"text_input": ..., "stream": true, "max_tokens": 16}``,
  the payload AIPerf's Triton template sends too.

The bundled backend answers them with the same greedy text it gives its own ``prompt`` input.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from console.clients import GenerationParams, Timeouts, stream

pytestmark = pytest.mark.server

MODEL = "smollm2_decoupled"
PROMPT = "My name is"
TOKENS = 16


def own_answer(server) -> str:
    """The answer to ``PROMPT`` through the bundled backend's own inputs (``prompt``, ``max_tokens``)."""
    (reply,) = stream(server.grpc_url, MODEL, [PROMPT], GenerationParams(max_tokens=TOKENS),
                      Timeouts(120, 60)).replies()
    assert reply.finish_reason == "length"
    return reply.text


def test_genai_perf_vllm_backend_requests_over_a_grpc_stream(embedded_server) -> None:
    import queue

    import tritonclient.grpc as grpcclient

    def tensor(name: str, datatype: str, value: object) -> grpcclient.InferInput:
        array = np.array([value], dtype=np.object_ if datatype == "BYTES" else np.bool_)
        item = grpcclient.InferInput(name, [1], datatype)
        item.set_data_from_numpy(array)
        return item

    sampling = json.dumps({"max_tokens": str(TOKENS), "min_tokens": str(TOKENS)})  # genai-perf sends strings
    inputs = [tensor("text_input", "BYTES", PROMPT.encode()), tensor("stream", "BOOL", True),
              tensor("exclude_input_in_output", "BOOL", True), tensor("sampling_parameters", "BYTES",
                                                                     sampling.encode())]
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(embedded_server.grpc_url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)), stream_timeout=120)
    try:
        client.async_stream_infer(MODEL, inputs, request_id="genai-perf-1", enable_empty_final_response=True)
        pieces, steps = [], 0
        while True:
            result, error = responses.get(timeout=120)
            assert error is None, error
            text = result.as_numpy("text_output")
            if text is not None:
                steps += 1
                pieces += [t.decode() for t in text.reshape(-1)]
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    assert steps > 1, "streamed: one response per step"
    assert "".join(pieces) == own_answer(embedded_server)


def test_generate_stream_with_text_input_and_stream(embedded_server) -> None:
    body = {"text_input": PROMPT, "stream": True, "max_tokens": TOKENS}
    events = []
    with httpx.stream("POST", f"http://{embedded_server.http_url}/v2/models/{MODEL}/generate_stream", json=body,
                      timeout=120) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[len("data:"):]))
    assert all("error" not in event for event in events), events
    text = "".join("".join(e["text_output"]) if isinstance(e.get("text_output"), list) else e.get("text_output", "")
                   for e in events)
    assert len(events) > 1 and text == own_answer(embedded_server)
