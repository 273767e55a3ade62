"""Log-probabilities, scored continuations and structured output through a real tritonserver (stream and batch).

The served models answer as the same engine does in this process (built from the same model folder); the console's
clients read the ``logprobs`` output into their replies; a continuation is scored over the wire; a JSON schema gives
JSON that validates and ends the reply with "stop"; a grammar that cannot compile is a 400 and the model keeps serving.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
import tritonclient.http as httpclient
from triton_wire import tensor
from tritonclient.utils import InferenceServerException

from backend_model.build import BackendSettings, build_engine
from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from console.clients import GenerationParams, Reply, TextDelta, infer, stream
from console.server import TritonServer
from repo_gen.samples import SAMPLES

pytestmark = pytest.mark.server
BATCH, STREAM = "smollm2_kv", "smollm2_decoupled"  # the same int4 engine, batch and decoupled
PROMPTS = ["The capital of France is", "My name is"]
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0,
                                                                               "maximum": 120}}}


@pytest.fixture(scope="module")
def served(embedded_repo, embedded_server: TritonServer) -> tuple[TritonServer, Engine]:
    """(server, engine): the session's tritonserver on the embedded samples, and the batch sample's engine built in
    this process from the same model folder."""
    engine, _ = build_engine(BackendSettings.from_model_dir(embedded_repo / BATCH, SAMPLES[BATCH].parameters()),
                             progress=lambda m: None)
    return embedded_server, engine


def raw_infer(server, inputs: list) -> dict:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300)
    try:
        result = client.infer(BATCH, inputs)
        return {n: result.as_numpy(n) for n in ("text_output", "finish_reason", "output_tokens", "logprobs")}
    finally:
        client.close()


def test_stream_and_batch_carry_the_engines_logprobs(served) -> None:
    server, engine = served
    expected = engine.generate(PROMPTS, SamplingParams(max_tokens=10, logprobs=3))
    params = GenerationParams(max_tokens=10, logprobs=3)
    batch = infer(server.http_url, BATCH, PROMPTS, params).replies()
    events = list(stream(server.grpc_url, STREAM, PROMPTS, params))
    streamed = [e for e in events if isinstance(e, Reply)]
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert [r.index for r in streamed] == [0, 1] and len(deltas) > 2
    for seq, one, each in zip(expected, batch, streamed):
        assert one.text == each.text == seq.text
        assert [e["id"] for e in one.logprobs] == [e["id"] for e in each.logprobs] == seq.tokens
        assert [e["logprob"] for e in one.logprobs] == pytest.approx([e.logprob for e in seq.logprobs], abs=1e-5)
        assert [[t["id"] for t in e["top"]] for e in each.logprobs] == [[i for i, _ in e.top] for e in seq.logprobs]
        assert "".join(e["token"] for e in one.logprobs) == seq.text  # each token's text, in order
    for delta in deltas:  # a step's entries come with its text
        assert "".join(e["token"] for e in delta.logprobs) == delta.text
    assert infer(server.http_url, BATCH, PROMPTS[:1], GenerationParams(max_tokens=3)).replies()[0].logprobs is None


def test_a_continuation_is_scored_over_the_wire_as_the_engine_scores_it(served) -> None:
    server, engine = served
    prompt = engine.encode(PROMPTS[0])
    forced = engine.tokenizer(" Paris, of course.", add_special_tokens=False).input_ids
    seq = engine.prepare(prompt, SamplingParams(), forced=forced)
    engine.enqueue([seq])
    while not seq.finished:
        engine.step()
    got = raw_infer(server, [tensor(httpclient, "prompt", [PROMPTS[0]]),
                             tensor(httpclient, "continuation", [json.dumps(" Paris, of course.")]),
                             tensor(httpclient, "exclude_input_in_output", [True], bool)])
    entries = json.loads(got["logprobs"][0])
    assert [e["id"] for e in entries] == forced and got["output_tokens"][0] == len(forced)
    assert [e["logprob"] for e in entries] == pytest.approx([e.logprob for e in seq.logprobs], abs=1e-5)
    assert got["text_output"][0].decode() == " Paris, of course." and got["finish_reason"][0] == b"length"
    by_ids = raw_infer(server, [tensor(httpclient, "prompt", [PROMPTS[0]]),
                                tensor(httpclient, "continuation", [json.dumps(forced)])])
    assert json.loads(by_ids["logprobs"][0]) == entries  # token ids score the same
    with pytest.raises(InferenceServerException, match="outside the vocabulary"):
        raw_infer(server, [tensor(httpclient, "prompt", [PROMPTS[0]]),
                           tensor(httpclient, "continuation", [json.dumps([10**7])])])


def test_a_json_schema_gives_valid_json_in_stream_and_batch(served) -> None:
    server, _ = served
    prompt = served[1].tokenizer.apply_chat_template(
        [{"role": "user", "content": "Describe a baker as JSON with name and age."}], tokenize=False,
        add_generation_prompt=True)
    params = GenerationParams(max_tokens=48, structured_outputs={"json": PERSON})
    for reply in (infer(server.http_url, BATCH, [prompt], params).replies()[0],
                  stream(server.grpc_url, STREAM, [prompt], params).replies()[0]):
        jsonschema.validate(json.loads(reply.text), PERSON)
        assert reply.finish_reason == "stop", reply.text


def test_a_grammar_that_cannot_compile_is_a_400_and_the_model_keeps_serving(served) -> None:
    server, _ = served
    bad = [tensor(httpclient, "prompt", ["Hi"]), tensor(httpclient, "structured_outputs", ['{"regex": "("}'])]
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        with pytest.raises(InferenceServerException, match="structured_outputs cannot be compiled") as caught:
            client.infer(BATCH, bad)
        assert caught.value.status() in ("400", 400, "StatusCode.INVALID_ARGUMENT")
    finally:
        client.close()
    good = raw_infer(server, [tensor(httpclient, "prompt", ["Hi"]), tensor(httpclient, "max_tokens", [2], np.int64)])
    assert good["output_tokens"][0] == 2 and good["logprobs"] is None
