"""Log-probabilities and structured output through the OpenAI-compatible front, before a real tritonserver serving
the embedded samples, with the real ``openai`` SDK.

What the front answers is compared with the bundled backend's own ``logprobs`` output for the same greedy request
over gRPC (the console's stream client): the front asked for them and reshaped them, losing nothing.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from console.clients import GenerationParams, Reply, info_from_config, stream
from console.core.template import chat_prompts

pytestmark = pytest.mark.server

STREAM, BATCH = "smollm2_decoupled", "smollm2_kv"
PROMPT = "The capital of France is"
QUESTION = "Describe a baker as JSON with name and age."
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0,
                                                                               "maximum": 120}}}


@pytest.fixture(scope="module")
def sdk(front) -> openai.OpenAI:
    return openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)


def backend_reply(server, model: str, prompt: str, **controls) -> Reply:
    """The model's answer and ``logprobs`` entries through the console's gRPC stream (what the front must give)."""
    return stream(server.grpc_url, model, [prompt], GenerationParams(**controls)).replies()[0]


def templated(server, question: str) -> str:
    info = info_from_config(STREAM, server.handle.model_config(STREAM))
    return chat_prompts([question], info)[0]


@pytest.mark.parametrize("model", [STREAM, BATCH])
def test_completions_logprobs_are_the_backends_streamed_or_not(sdk, embedded_server, model) -> None:
    want = backend_reply(embedded_server, model, PROMPT, max_tokens=8, logprobs=3)
    assert len(want.logprobs) == 8
    whole = sdk.completions.create(model=model, prompt=PROMPT, max_tokens=8, logprobs=3).choices[0]
    assert whole.text == want.text
    got = whole.logprobs
    assert got.tokens == [e["token"] for e in want.logprobs] and "".join(got.tokens) == want.text
    assert got.token_logprobs == [e["logprob"] for e in want.logprobs]
    assert got.top_logprobs == [{t["token"]: t["logprob"] for t in e["top"]} for e in want.logprobs]
    assert all(len(top) == 3 for top in got.top_logprobs)
    assert got.text_offset == [len("".join(got.tokens[:i])) for i in range(8)]
    chunks = [c.choices[0] for c in sdk.completions.create(model=model, prompt=PROMPT, max_tokens=8, logprobs=3,
                                                           stream=True) if c.choices]
    assert "".join(c.text for c in chunks) == want.text
    streamed = [c.logprobs for c in chunks if c.logprobs is not None]
    assert [t for lp in streamed for t in lp.tokens] == got.tokens
    assert [v for lp in streamed for v in lp.token_logprobs] == got.token_logprobs
    assert [o for lp in streamed for o in lp.text_offset] == got.text_offset  # offsets into the whole text
    for chunk in chunks:  # a chunk carries its own tokens' entries
        assert "".join(chunk.logprobs.tokens if chunk.logprobs else []) == chunk.text


def test_chat_logprobs_with_top_logprobs_are_the_backends_streamed_or_not(sdk, embedded_server) -> None:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    want = backend_reply(embedded_server, STREAM, templated(embedded_server, messages[0]["content"]), max_tokens=40,
                         logprobs=2)
    answer = sdk.chat.completions.create(model=STREAM, messages=messages, max_tokens=40, logprobs=True,
                                         top_logprobs=2).choices[0]
    assert answer.message.content == want.text
    content = answer.logprobs.content
    assert answer.finish_reason == "stop" and content[-1].token == "<|im_end|>"  # the end of sequence is scored too
    assert [(c.token, c.logprob) for c in content] == [(e["token"], e["logprob"]) for e in want.logprobs]
    assert all(c.bytes == list(c.token.encode()) for c in content)
    assert [[(t.token, t.logprob) for t in c.top_logprobs] for c in content] == \
        [[(t["token"], t["logprob"]) for t in e["top"]] for e in want.logprobs]
    assert all(len(c.top_logprobs) == 2 for c in content)
    assert content[0].top_logprobs[0].logprob >= content[0].top_logprobs[1].logprob
    chunks = list(sdk.chat.completions.create(model=STREAM, messages=messages, max_tokens=40, logprobs=True,
                                              top_logprobs=2, stream=True))
    streamed = [c for chunk in chunks if chunk.choices and chunk.choices[0].logprobs
                for c in chunk.choices[0].logprobs.content]
    assert [(c.token, c.logprob, c.bytes) for c in streamed] == [(c.token, c.logprob, c.bytes) for c in content]
    bare = sdk.chat.completions.create(model=STREAM, messages=messages, max_tokens=4, logprobs=True).choices[0]
    assert len(bare.logprobs.content) == 4 and all(c.top_logprobs == [] for c in bare.logprobs.content)
    assert sdk.chat.completions.create(model=STREAM, messages=messages, max_tokens=4).choices[0].logprobs is None


@pytest.mark.parametrize("stream_it", [False, True])
def test_a_json_schema_answer_validates(sdk, stream_it) -> None:
    form = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    asked = dict(model=STREAM, messages=[{"role": "user", "content": QUESTION}], max_tokens=48, response_format=form,
                 logprobs=True)
    if stream_it:
        chunks = [c.choices[0] for c in sdk.chat.completions.create(**asked, stream=True) if c.choices]
        text, finish = "".join(c.delta.content or "" for c in chunks), chunks[-1].finish_reason
        tokens = [t.token for c in chunks if c.logprobs for t in c.logprobs.content]
    else:
        choice = sdk.chat.completions.create(**asked).choices[0]
        text, finish = choice.message.content, choice.finish_reason
        tokens = [t.token for t in choice.logprobs.content]
    jsonschema.validate(json.loads(text), PERSON)
    assert finish == "stop", text
    assert "".join(tokens) == text  # the grammar's tokens, scored as the model saw them, the last one included
    anything = sdk.chat.completions.create(model=BATCH, messages=[{"role": "user", "content": QUESTION}],
                                           max_tokens=48, response_format={"type": "json_object"})
    assert isinstance(json.loads(anything.choices[0].message.content), dict)


def test_guided_choice_and_regex_answer_within_them(sdk) -> None:
    choices = ["Lyon", "Paris", "Marseille"]
    for body in ({"guided_choice": choices}, {"structured_outputs": {"choice": choices}}):
        answer = sdk.completions.create(model=STREAM, prompt=PROMPT, max_tokens=8, extra_body=body).choices[0]
        assert answer.text in choices and answer.finish_reason == "stop"
    number = sdk.completions.create(model=BATCH, prompt="The year is", max_tokens=8,
                                    extra_body={"guided_regex": " [0-9]{4}"}).choices[0].text
    assert len(number) == 5 and number[1:].isdigit()


@pytest.mark.parametrize(("body", "param"), [
    ({"guided_regex": "("}, "guided_regex"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
     "response_format"),
    ({"structured_outputs": {"grammar": "start: x"}}, "structured_outputs"),
])
@pytest.mark.parametrize("stream_it", [False, True])
def test_a_bad_grammar_is_a_400_in_openais_shape_and_the_server_keeps_serving(front, sdk, body, param,
                                                                               stream_it) -> None:
    response = httpx.post(f"{front.base_url}/completions", timeout=60,
                          json={"model": STREAM, "prompt": "Hi", "max_tokens": 4, "stream": stream_it, **body})
    error = response.json()["error"]
    assert response.status_code == 400 and set(error) == {"message", "type", "param", "code"}, response.text
    assert error["param"] == param and error["message"].startswith("structured_outputs")
    assert "\n" not in error["message"]
    assert sdk.completions.create(model=STREAM, prompt="Hi", max_tokens=2).usage.completion_tokens == 2
