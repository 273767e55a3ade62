"""The bundled backend in a real tritonserver on the embedded model, driven with tritonclient."""

from __future__ import annotations

import json
import urllib.error
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from triton_wire import Stream, generate, http_infer, joined, tensor
from tritonclient.utils import InferenceServerException

from backend_model.build import BackendSettings, build_engine
from backend_model.engine.sampling import SamplingParams
from repo_gen.samples import SAMPLES

pytestmark = pytest.mark.server
PROMPTS = ["My name is", "Maroon bells"]
KV_MODELS = {"smollm2_kv": "smollm2_decoupled", "smollm2_causal": "smollm2_causal_decoupled"}


@pytest.fixture(scope="module")
def inprocess(embedded_repo):
    """The same engines in this process, built from the same model folders and parameters (precision too)."""
    engines = {}
    for name in KV_MODELS:
        params = SAMPLES[name].parameters()
        engine, _ = build_engine(BackendSettings.from_model_dir(embedded_repo / name, params), progress=lambda m: None)
        engines[name] = engine
    return engines


@pytest.mark.parametrize("batch_model", list(KV_MODELS))
def test_batch_stream_and_generate_agree_with_the_engine_in_process(embedded_server, inprocess, batch_model):
    stream_model = KV_MODELS[batch_model]
    expected = [s.text for s in inprocess[batch_model].generate(PROMPTS, SamplingParams(max_tokens=12))]
    batch = http_infer(embedded_server, batch_model, PROMPTS, max_tokens=12, exclude_input_in_output=True)
    assert [t.decode() for t in batch["text_output"]] == expected
    assert list(batch["output_tokens"]) == [12, 12]
    echo = http_infer(embedded_server, batch_model, PROMPTS[:1], max_tokens=12)
    assert echo["text_output"][0].decode() == PROMPTS[0] + expected[0]  # the prompt is echoed by default
    stream = Stream(embedded_server)
    try:
        stream.send(stream_model, PROMPTS, "s1", max_tokens=12)
        responses = stream.collect()["s1"]
    finally:
        stream.close()
    assert joined(responses) == expected
    assert [final for _, final, _ in responses].count(True) == 1 and responses[-1][1]
    assert len(responses) > 2  # one response per decode step, not one at the end
    for i, prompt in enumerate(PROMPTS):
        body = {"prompt": prompt, "id": "42", "max_tokens": 12, "exclude_input_in_output": True}
        assert generate(embedded_server, batch_model, body)["text_output"] == expected[i]
        events = generate(embedded_server, stream_model, {"prompt": prompt, "max_tokens": 12}, stream=True)
        assert "".join(e["text_output"] for e in events) == expected[i]
        assert events[-1]["finish_reason"] == "length"


def test_the_seed_generate_call_works_as_written(embedded_server):
    reply = generate(embedded_server, "smollm2_kv", {"prompt": "My name is", "id": "42"})
    assert reply["id"] == "42"
    assert reply["text_output"].startswith("My name is") and len(reply["text_output"]) > 40
    assert reply["finish_reason"] in ("eos", "ctx_len")


def test_concurrent_batch_requests_are_served_together(embedded_server):
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(http_infer, embedded_server, "smollm2_kv", [p], max_tokens=24,
                               exclude_input_in_output=True) for p in PROMPTS * 2]
        results = [f.result(timeout=300) for f in futures]
    texts = [r["text_output"][0].decode() for r in results]
    assert texts[0] == texts[2] and texts[1] == texts[3] and texts[0] != texts[1]
    log = "\n".join(embedded_server.log_tail(400))
    assert log.count("smollm2_kv: request") >= 4


def test_more_streams_than_slots_all_complete(embedded_server):
    stream = Stream(embedded_server)
    try:
        for i in range(10):  # full_batch_size is 8: two wait for a free slot
            stream.send("smollm2_decoupled", [f"Count to {i}:"], f"r{i}", max_tokens=6)
        got = stream.collect(count=10)
    finally:
        stream.close()
    assert sorted(got) == sorted(f"r{i}" for i in range(10))
    for responses in got.values():
        assert [final for _, final, _ in responses].count(True) == 1
        assert joined(responses)[0]


def test_cancelled_stream_frees_its_slot_and_the_log_says_so(embedded_server):
    stream = Stream(embedded_server)
    stream.send("smollm2_decoupled", ["1, 2, 3, 4,"], "long", max_tokens=400)
    try:
        result, error = stream.events.get(timeout=120)  # the first token arrived: the request runs
        assert error is None and not result.get_response().parameters["triton_final_response"].bool_param
    finally:
        stream.close(cancel=True)
    follow = Stream(embedded_server)
    try:
        follow.send("smollm2_decoupled", ["My name is"], "after", max_tokens=5)
        responses = follow.collect()["after"]
    finally:
        follow.close()
    assert joined(responses)[0]
    log = "\n".join(embedded_server.log_tail(400))
    assert "request long prompts=1" in log and "finish=cancelled" in log


def test_two_prompts_in_one_request_and_an_error_request_each_end_with_one_final(embedded_server):
    stream = Stream(embedded_server)
    try:
        stream.send("smollm2_decoupled", PROMPTS, "two", max_tokens=4)
        stream.send("smollm2_decoupled", [""], "empty", max_tokens=4)
        got = stream.collect(count=2)
    finally:
        stream.close()
    assert len(joined(got["two"])) == 2 and all(joined(got["two"]))
    errors = got.get("error", [])
    assert len(errors) == 1 and "the prompt is empty" in errors[0][2]


@pytest.mark.parametrize(("values", "controls", "message"), [
    ([""], {}, "the prompt is empty"),
    (["ok", ""], {}, "prompt 2 of 2 is empty"),  # numbered as the console numbers them
    (["ok", "word " * 600], {}, "prompt 2 of 2 is 601 tokens but ctx_len is 512: .*; nothing was generated"),
    ([b"\xff\xfe bad bytes"], {}, "prompt[0] is not valid UTF-8"),
    (["hi"], {"temperature": -1.0}, "temperature must be a number >= 0, got -1"),
    (["hi"], {"max_tokens": -5}, "max_tokens must be an integer >= 0 and <= 2147483647, got -5"),
    (["hi"], {"top_k": -2}, "top_k must be an integer >= 0 and <= 2147483647, got -2"),
    (["hi"], {"repetition_penalty": 0.0}, "repetition_penalty must be a number > 0, got 0"),
])
def test_bad_requests_get_a_clear_error_and_the_model_keeps_serving(embedded_server, values, controls, message):
    with pytest.raises(InferenceServerException, match=message.replace("[", r"\[").replace("]", r"\]")):
        http_infer(embedded_server, "smollm2_kv", values, **controls)
    good = http_infer(embedded_server, "smollm2_kv", ["Hello"], max_tokens=3)
    assert good["finish_reason"][0] == b"length"


def test_wrong_tensor_types_are_refused_by_triton(embedded_server):
    client = httpclient.InferenceServerClient(embedded_server.http_url)
    try:
        bad = [tensor(httpclient, "prompt", ["hi"]), tensor(httpclient, "max_tokens", [3.5], np.float32)]
        with pytest.raises(InferenceServerException, match="max_tokens"):
            client.infer("smollm2_kv", bad)
        numeric_prompt = [tensor(httpclient, "prompt", [1.0], np.float32)]
        with pytest.raises(InferenceServerException, match="prompt"):
            client.infer("smollm2_kv", numeric_prompt)
    finally:
        client.close()
    with pytest.raises(urllib.error.HTTPError):
        generate(embedded_server, "smollm2_kv", {"prompt": "hi", "max_tokens": "many"})
    assert http_infer(embedded_server, "smollm2_kv", ["Hello"], max_tokens=2)["output_tokens"][0] == 2


def test_the_vllm_backend_names_genai_perf_sends(embedded_server):
    """genai-perf --service-kind triton --backend vllm: text_input, stream, sampling_parameters, exclude_input."""
    sampling = json.dumps({"max_tokens": 24, "min_tokens": 24, "ignore_eos": True})
    stream = Stream(embedded_server)
    try:
        stream.client.async_stream_infer("smollm2_decoupled", [
            tensor(grpcclient, "text_input", ["My name is"]), tensor(grpcclient, "stream", [True], bool),
            tensor(grpcclient, "sampling_parameters", [sampling]),
            tensor(grpcclient, "exclude_input_in_output", [True], bool)], request_id="g1",
            enable_empty_final_response=True)
        stream.client.async_stream_infer("smollm2_decoupled", [
            tensor(grpcclient, "text_input", ["My name is"]), tensor(grpcclient, "stream", [False], bool),
            tensor(grpcclient, "sampling_parameters", [sampling])], request_id="g2", enable_empty_final_response=True)
        got = stream.collect(count=2)
    finally:
        stream.close()
    streamed, once = got["g1"], got["g2"]
    assert len(streamed) > 2 and [final for _, final, _ in streamed].count(True) == 1  # new text per step
    assert len([r for r in once if r[0] is not None]) == 1  # stream=false: one answer ...
    assert once[-1][0][0] == "My name is" + joined(streamed)[0]  # ... echoing the prompt, as vLLM's does
    body = {"text_input": "My name is", "sampling_parameters": sampling, "exclude_input_in_output": True}
    assert generate(embedded_server, "smollm2_kv", body)["output_tokens"] == 24  # min_tokens + ignore_eos: exact
