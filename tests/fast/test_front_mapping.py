"""The front's request mapping, answer shapes and key rule, without a server (the served front: e2e/test_front.py)."""

from __future__ import annotations

import json

import pytest

from console.clients import ModelInfo, Tensor, interface_of
from console.clients import params as offered
from console.commands.openai import api_key_for
from console.front.errors import APIError, ModelError, upstream_error
from console.front.mapping import blame, check_model, parse
from console.front.replies import Shape, chat_logprobs, completion_logprobs, finish_reason, usage
from console.front.tokenizers import Tokenizers
from console.server.health import error_codes_safe


def refusal(body: dict, chat: bool = False) -> APIError:
    with pytest.raises(APIError) as caught:
        parse({"model": "m", **({"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"}),
               **body}, chat)
    return caught.value


def test_fields_become_checked_controls_named_by_their_field() -> None:
    job = parse({"model": "m", "prompt": ["hi"], "max_tokens": 8, "temperature": 0.5, "stop": "x", "seed": 0,
                 "n": 1, "presence_penalty": 0, "user": "u", "stream": True,
                 "stream_options": {"include_usage": True}}, chat=False)
    assert job.prompts == ["hi"] and job.stream and job.include_usage and job.n == 1
    assert job.controls == {"max_tokens": 8, "temperature": 0.5, "stop": ("x",), "seed": 0}
    error = refusal({"max_completion_tokens": 4, "max_tokens": 5})
    assert error.param == "max_completion_tokens" and "give max_tokens or max_completion_tokens" in str(error)
    assert refusal({"top_p": 0}).param == "top_p" and "top_p must be a number > 0" in str(refusal({"top_p": 0}))
    assert refusal({"stream": "yes"}).param == "stream"
    assert refusal({"logprobs": 21}).param == "logprobs"
    assert refusal({"top_logprobs": 2}, chat=True).param == "top_logprobs"  # needs logprobs: true
    assert refusal({"suffix": "!"}).param == "suffix"


def test_a_prompt_is_texts_or_token_ids_and_n_answers_each() -> None:
    for prompt, want in (("hi", ["hi"]), (["a", "b"], ["a", "b"]), ([1, 2], [[1, 2]]), ([[1], [2, 3]], [[1], [2, 3]])):
        assert parse({"model": "m", "prompt": prompt}, False).prompts == want
    assert parse({"model": "m", "prompt": "hi", "n": 3, "best_of": 3}, False).n == 3
    for bad in ([], [[]], ["a", ""], [1, True], [[1], "a", [-1]], {"a": 1}):
        assert refusal({"prompt": bad}).param == "prompt", bad
    assert refusal({"n": 2, "best_of": 1}).param == "best_of" and refusal({"n": 0}).param == "n"
    assert refusal({"n": 2}, chat=True).param == "n"
    assert parse({"model": "m", "prompt": "hi", "echo": True, "logprobs": 1, "max_tokens": 0}, False).echo


def test_ignore_eos_asks_for_exactly_max_tokens() -> None:
    job = parse({"model": "m", "prompt": "hi", "max_tokens": 6, "ignore_eos": True}, chat=False)
    assert job.controls["min_tokens"] == 6 and job.fields["min_tokens"] == "ignore_eos"
    assert "no other min_tokens" in str(refusal({"max_tokens": 6, "min_tokens": 2, "ignore_eos": True}))


def test_messages_are_normalised_and_content_other_than_text_and_images_is_refused() -> None:
    job = parse({"model": "m", "messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}, chat=True)
    assert job.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ab"}]
    audio = refusal({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
                    chat=True)
    assert "message 1 of 1: content parts must be text (or image_url in a user message)" in str(audio)
    image = refusal({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, chat=True)
    assert "message 1 of 1: an image_url part needs image_url.url" in str(image)
    parts = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]
    assert "content parts must be text" in str(refusal({"messages": [{"role": "system", "content": parts}]},
                                                       chat=True))  # images only from the user
    assert "role must be one of" in str(refusal({"messages": [{"role": "wizard", "content": "x"}]}, chat=True))
    assert refusal({"echo": True}, chat=True).param == "echo"  # a completions field


def test_a_model_gets_the_completions_default_and_its_lacking_controls_named() -> None:
    text = ModelInfo("t", False, True, inputs=(Tensor("INPUT", "BYTES", (1,)),),
                     outputs=(Tensor("OUTPUT", "BYTES", (1,)),))
    assert check_model(parse({"model": "t", "prompt": "hi"}, False), interface_of(text)).values == {}
    with pytest.raises(APIError) as caught:  # a control the model has no input for: a 400 naming the field
        check_model(parse({"model": "t", "prompt": "hi", "max_completion_tokens": 3}, False), interface_of(text))
    assert str(caught.value) == "model t (text interface) has no input for max_completion_tokens"
    bundled = ModelInfo("b", True, True, inputs=(Tensor("prompt", "BYTES"), *(
        Tensor(c.name, c.datatype, c.dims, True) for c in offered.CONTROLS)), outputs=(Tensor("text_output", "BYTES"),))
    assert check_model(parse({"model": "b", "prompt": "hi"}, False), interface_of(bundled)).max_tokens == 16
    whole = parse({"model": "b", "prompt": "hi", "max_tokens": 0}, False)  # 0: the model's default (its context)
    assert check_model(whole, interface_of(bundled)).max_tokens == 0
    chat = parse({"model": "b", "messages": [{"role": "user", "content": "hi"}]}, True)
    assert check_model(chat, interface_of(bundled)).max_tokens is None  # chat: the model's own default


def test_answer_shapes() -> None:
    job = parse({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                 "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 1}, chat=True)
    shape = Shape(job)
    first = json.loads(shape.chunk("Hé", first=True)[len(b"data: "):])
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"] == {"role": "assistant",
                                                                                          "content": "Hé"}
    assert first["usage"] is None and first["id"].startswith("chatcmpl-")
    last = json.loads(shape.usage_chunk(usage(1, None))[len(b"data: "):])
    assert last["choices"] == [] and last["usage"] == {"prompt_tokens": 1, "completion_tokens": None,
                                                       "total_tokens": None}
    top = [{"id": 5, "token": "Hé", "logprob": -0.5}]
    tokens = [{"id": 5, "token": "Hé", "logprob": -0.5, "top": top},
              {"id": 6, "token": "!", "logprob": -1.0, "top": []}]
    assert chat_logprobs(tokens).wire()["content"][0] == {"token": "Hé", "logprob": -0.5, "bytes": [72, 195, 169],
                                                   "top_logprobs": [{"token": "Hé", "logprob": -0.5,
                                                                     "bytes": [72, 195, 169]}]}
    assert completion_logprobs(tokens, 10, "Hé!").wire() == {"tokens": ["Hé", "!"], "token_logprobs": [-0.5, -1.0],
                                                      "top_logprobs": [{"Hé": -0.5}, {}], "text_offset": [10, 12]}
    halves = [{"id": 1, "token": "\ufffd", "bytes": [226, 130], "logprob": -1.0, "top": []},
              {"id": 2, "token": "\ufffd", "bytes": [172], "logprob": -2.0, "top": []},
              {"id": 3, "token": "!", "logprob": -3.0, "top": []},
              {"id": 0, "token": "<|im_end|>", "logprob": 0, "top": []}]  # a special token adds no text
    assert completion_logprobs(halves, 0, "€!").text_offset == [0, 0, 1, 2]  # bytes of one character: its offset
    assert chat_logprobs(halves).content[1].bytes == [172]
    assert [finish_reason(r) for r in ("eos", "stop", "length", "ctx_len", "", None)] == \
        ["stop", "stop", "length", "length", "stop", "stop"]


def test_error_codes_are_asked_only_of_a_tritonserver_whose_mode_cannot_crash_it() -> None:
    assert [error_codes_safe(v) for v in ("2.59.0", "2.67.9", "2.68.0", "2.71.0", "3.0", "dev", "")] == \
        [False, False, True, True, True, False, False]


def test_errors_say_whose_fault_and_the_key_rule() -> None:
    assert upstream_error(ModelError("the prompt is 9000 bytes", refused=True), answered=False).status == 400
    assert upstream_error(ModelError("the prompt is 9000 bytes"), answered=False).status == 400  # no code came
    assert upstream_error(ModelError("generation failed: boom", refused=False), answered=False).status == 500
    assert upstream_error(ModelError("the request is bad", refused=True), answered=True).status == 500
    assert api_key_for("127.0.0.1", None, False) is None and api_key_for("::1", "k", False) == "k"
    assert api_key_for("0.0.0.0", None, True) is None and api_key_for("0.0.0.0", "k", False) == "k"
    with pytest.raises(Exception, match="off loopback: give --api-key"):
        api_key_for("0.0.0.0", None, False)
    tokenizers = Tokenizers(["/all", "m=/only/m"])
    assert tokenizers.folder(ModelInfo("m", True, True)) == "/only/m"
    assert tokenizers.folder(ModelInfo("x", True, True)) == "/all"


def test_structured_output_is_checked_for_its_shape_and_one_at_a_time() -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    assert parse({"model": "m", "prompt": "hi", "response_format": schema}, False).structured == "response_format"
    assert parse({"model": "m", "prompt": "hi", "response_format": {"type": "text"}}, False).structured == ""
    assert parse({"model": "m", "prompt": "hi", "guided_regex": "[0-9]+"}, False).structured == "guided_regex"
    assert "needs json_schema.schema" in str(refusal({"response_format": {"type": "json_schema"}}))
    assert "type must be one of" in str(refusal({"response_format": {"type": "yaml"}}))
    assert refusal({"response_format": schema, "guided_regex": "a"}).param == "guided_regex"


@pytest.mark.parametrize(("body", "field", "spec"), [
    ({"response_format": {"type": "json_object"}}, "response_format", {"json_object": True}),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
     "response_format", {"json": {"type": "object"}}),
    ({"guided_json": '{"type": "integer"}'}, "guided_json", {"json": '{"type": "integer"}'}),
    ({"guided_regex": "[0-9]+"}, "guided_regex", {"regex": "[0-9]+"}),
    ({"guided_choice": ["yes", "no"]}, "guided_choice", {"choice": ["yes", "no"]}),
    ({"structured_outputs": {"choice": ["a"]}}, "structured_outputs", {"choice": ["a"]}),  # vLLM >= 0.10
])
def test_structured_output_becomes_the_structured_outputs_control(body, field, spec) -> None:
    job = parse({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}, chat=True)
    assert job.structured == field and job.controls["structured_outputs"] == spec
    assert job.fields["structured_outputs"] == field


def test_logprobs_become_the_logprobs_control_named_by_their_field() -> None:
    completion = parse({"model": "m", "prompt": "hi", "logprobs": 0}, chat=False)
    assert completion.controls["logprobs"] == 0 and completion.fields["logprobs"] == "logprobs"
    chat = parse({"model": "m", "messages": [{"role": "user", "content": "hi"}], "logprobs": True,
                  "top_logprobs": 3}, chat=True)
    assert chat.controls["logprobs"] == chat.logprobs == 3 and chat.fields["logprobs"] == "top_logprobs"
    plain = parse({"model": "m", "messages": [{"role": "user", "content": "hi"}], "logprobs": False}, chat=True)
    assert plain.logprobs is None and "logprobs" not in plain.controls
    assert refusal({"top_logprobs": 21, "logprobs": True}, chat=True).param == "top_logprobs"
    assert refusal({"guided_choice": "yes"}).param == "guided_choice"


def test_logprobs_and_structured_output_need_the_models_own_input_and_output() -> None:
    def info(name: str, inputs: tuple, outputs: tuple = ()) -> ModelInfo:
        return ModelInfo(name, True, True, inputs=(Tensor("prompt", "BYTES"), *inputs),
                         outputs=(Tensor("text_output", "BYTES"), *outputs))

    wire = tuple(Tensor(n, t, (1,), True) for n, t in (("logprobs", "INT64"), ("structured_outputs", "BYTES")))
    full = interface_of(info("b", wire, (Tensor("logprobs", "BYTES", (-1,)),)))
    job = parse({"model": "b", "prompt": "hi", "logprobs": 2, "guided_regex": "a+"}, False)
    assert check_model(job, full).values == {"logprobs": 2, "structured_outputs": {"regex": "a+"}}
    no_output = interface_of(info("o", wire))
    with pytest.raises(APIError, match=r"^model o \(qaic-console interface\) returns no logprobs here$"):
        check_model(parse({"model": "o", "prompt": "hi", "logprobs": 2}, False), no_output)
    vllm = interface_of(ModelInfo("v", True, True, inputs=(  # sampling_parameters carries them, nothing enforces
        Tensor("text_input", "BYTES"), Tensor("sampling_parameters", "BYTES", (1,), True)),
        outputs=(Tensor("text_output", "BYTES"), Tensor("logprobs", "BYTES", (-1,)))))
    assert vllm.name == "vllm"
    for body, field in (({"response_format": {"type": "json_object"}}, "response_format"),
                        ({"logprobs": True, "top_logprobs": 1}, "top_logprobs")):
        with pytest.raises(APIError) as caught:
            check_model(parse({"model": "v", "messages": [{"role": "user", "content": "hi"}], **body}, True), vllm)
        assert caught.value.param == field and str(caught.value).startswith("model v (vllm interface)")
    refusal = ModelError("structured_outputs cannot be compiled: x", refused=True)
    blamed = blame(job, upstream_error(refusal, answered=False))
    assert blamed.status == 400 and blamed.param == "guided_regex"


def test_the_console_sends_its_own_front_every_control_the_model_takes() -> None:
    from console.clients import GenerationParams, openai_info

    params = GenerationParams(max_tokens=4, temperature=0.0, repetition_penalty=1.2, min_tokens=2)
    ours = interface_of(openai_info("m", {"owned_by": "qaic-console",
                                          "controls": ["max_tokens", "temperature", "repetition_penalty"]}))
    assert ours.body(params) == ({"max_tokens": 4, "temperature": 0.0}, {"repetition_penalty": 1.2})
    assert ours.ignored(params) == ["min_tokens"]
    other = interface_of(openai_info("m"))  # any other OpenAI-compatible server: the API's fields and top_k
    assert other.ignored(params) == ["repetition_penalty", "min_tokens"]
