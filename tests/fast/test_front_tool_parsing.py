"""Tool calls and the Responses API on the front, without a server: the tools checked, the grammar that forces a
call, the conversation as a Qwen2-style Hermes template (written here, on a tiny random-weight model's folder)
and the embedded template (which renders no tools) give it, the three parsers whole and streamed, and the
Responses bodies read as chats. The served front: e2e/test_front_tools.py."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tiny_models import save_tiny
from transformers import AutoTokenizer

from backend_model.models import prepare_embedded
from console.clients import ModelInfo
from console.front import responses, tools
from console.front.errors import APIError
from console.front.mapping import parse
from console.front.replies import Shape, usage
from console.front.tokenizers import Tokenizers
from console.front.toolcalls import PARSERS, Reader, parser_for

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}}
# Qwen2.5's tool-calling template, shortened (the same tags and the same handling of tools, calls and results)
QWEN_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% else %}You are Qwen.{% endif %}

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>{% for tool in tools %}
{{ tool | tojson }}{% endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0]['role'] == 'system' %}<|im_start|>system
{{ messages[0]['content'] }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.content %}{{ message.content }}{% endif %}
{%- for tool_call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ tool_call.function.name }}", "arguments": {{ tool_call.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% endif %}{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
HISTORY = [{"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                 "arguments": '{"city": "Paris"}'}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]


@pytest.fixture(scope="module")
def embedded_tokenizer():
    return AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory, embedded_tokenizer):
    """A tiny random-weight Qwen2 model's folder whose tokenizer has the Hermes tool template."""
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    tokenizer.chat_template = QWEN_TEMPLATE
    return save_tiny("qwen2_window", tmp_path_factory.mktemp("qwen_tools"), tokenizer)


def chat(body: dict):
    return parse({"model": "m", "messages": HISTORY[:1], **body}, chat=True)


def refusal(body: dict) -> APIError:
    with pytest.raises(APIError) as caught:
        chat(body)
    return caught.value


def prompt(folder, body: dict) -> tuple[str, str]:
    """The prompt a chat body gets from the front with ``folder``'s tokenizer, and the parser it chooses."""
    job = parse({"model": "m", **body}, chat=True)
    tokenizers, info = Tokenizers([str(folder)]), ModelInfo("m", True, True)
    text = asyncio.run(tokenizers.chat_prompt(info, job.messages, job.tools))
    return text, asyncio.run(tokenizers.tool_parser(info, None)).name


# --------------------------------------------------------------------------- the request


def test_tools_are_checked_and_the_choice_defaults_to_auto() -> None:
    job = chat({"tools": [WEATHER, TIME]})
    assert job.tools.choice == "auto" and job.tools.parallel and job.tools.active and job.structured == ""
    assert chat({"tools": [WEATHER], "tool_choice": "none"}).tools.active is False
    assert chat({"tools": []}).tools is None and chat({"tool_choice": "none"}).tools is None
    for body, param, words in (
            ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
             "'nope', which is not among the tools (get_weather)"),
            ({"tool_choice": "required"}, "tool_choice", "tool_choice needs tools"),
            ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice", "tool_choice must be one of"),
            ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools", "tool 1 of 1 must be"),
            ({"tools": [WEATHER, WEATHER]}, "tools", "different names"),
            ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
            ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
             "response_format", "not both")):
        error = refusal(body)
        assert error.param == param and words in str(error), (body, str(error))
    with pytest.raises(APIError) as caught:
        parse({"model": "m", "prompt": "hi", "tools": [WEATHER]}, chat=False)
    assert caught.value.param == "tools"


def test_required_and_named_calls_are_forced_by_a_grammar_of_the_functions_schemas() -> None:
    named = chat({"tools": [WEATHER, TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert named.structured == "tool_choice" and named.fields["structured_outputs"] == "tool_choice"
    assert named.controls["structured_outputs"] == {"json": {**TIME["function"]["parameters"],
                                                             "additionalProperties": False}}
    required = chat({"tools": [WEATHER, TIME], "tool_choice": "required", "parallel_tool_calls": False})
    schema = required.controls["structured_outputs"]["json"]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate([{"name": "get_weather", "arguments": {"city": "Oslo"}}], schema)
    for wrong in ([], [{"name": "get_weather", "arguments": {}}], [{"name": "other", "arguments": {}}],
                  [{"name": "get_time", "arguments": {}}] * 2):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)
    with pytest.raises(jsonschema.ValidationError):  # no property the function does not have
        jsonschema.validate([{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}], schema)
    parallel = chat({"tools": [WEATHER], "tool_choice": "required"}).controls["structured_outputs"]["json"]
    jsonschema.validate([{"name": "get_weather", "arguments": {"city": c}} for c in "ab"], parallel)


def test_the_grammars_schemas_close_every_object_that_leaves_its_properties_open() -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "object", "properties": {
        "k": {"type": "string"}}}}, "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
        "ref": {"$ref": "#/$defs/point"}}, "$defs": {"point": {"properties": {"x": {"type": "number"}}}}}
    strict = tools.closed(schema)
    assert strict["additionalProperties"] is False and strict["properties"]["tags"]["items"]["additionalProperties"] \
        is False and strict["$defs"]["point"]["additionalProperties"] is False
    assert strict["properties"]["extra"]["additionalProperties"] == {"type": "integer"}  # given: kept
    fits = {"tags": [{"k": "a"}], "extra": {"n": 1}, "ref": {"x": 1.5}}
    jsonschema.validate(fits, strict)
    jsonschema.validate(fits, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tags": [{"k": "a", "other": 1}]}, strict)


def test_a_hermes_template_renders_the_tools_and_the_history_itself(qwen_folder) -> None:
    text, parser = prompt(qwen_folder, {"messages": HISTORY, "tools": [WEATHER]})
    assert parser == "hermes" and json.dumps(WEATHER) in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in text
    assert "# Tools" in text and text.count("You may call") == 1  # the template's words, not the front's too
    plain, _ = prompt(qwen_folder, {"messages": HISTORY, "tools": [WEATHER], "tool_choice": "none"})
    assert "<tools>" not in plain and "<tool_response>" in plain


def test_a_template_without_tools_gets_them_in_the_fronts_system_message(embedded_tokenizer) -> None:
    assert tools.abilities(embedded_tokenizer) == (False, False)
    job = parse({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, *HISTORY],
                 "tools": [WEATHER]}, chat=True)
    text = tools.render(embedded_tokenizer, job.messages, job.tools)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\n\nYou may call one or more functions")
    assert json.dumps(WEATHER) in system
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>" in text
    assert parser_for(embedded_tokenizer.chat_template).name == "hermes"


# --------------------------------------------------------------------------- the answer


@pytest.mark.parametrize(("parser", "text", "content", "calls"), [
    ("hermes", 'Let me see.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "Let me see.", [("get_weather", {"city": "Paris"})]),
    ("hermes", '<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]</tool_call>'
               '<tool_call>{"name": "c", "arguments": "{\\"y\\": 2}"}</tool_call>', "",
     [("a", {}), ("b", {"x": 1}), ("c", {"y": 2})]),
    ("hermes", "<tool_call>not json</tool_call> and text", "<tool_call>not json</tool_call> and text", []),
    ("hermes", '<tool_call>{"name": "a", "arguments": {"x": 1}}', "", [("a", {"x": 1})]),  # the end tag cut off
    ("hermes", '<tool_call>{"name": "a", "arguments": {"x"', '<tool_call>{"name": "a", "arguments": {"x"', []),
    ("llama3", '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}', "",
     [("a", {"x": 1}), ("b", {})]),
    ("llama3", '{"name": "a", "arguments": {"x": 1}}', "", [("a", {"x": 1})]),
    ("llama3", '{"answer": 42}', '{"answer": 42}', []),
    ("llama3", "Paris is sunny.", "Paris is sunny.", []),
    ("mistral", 'ok [TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}]', "ok", [("a", {"x": 1})]),
    ("mistral", '[{"name": "a", "arguments": {}}]', "", [("a", {})]),
    ("mistral", "[1, 2]", "[1, 2]", []),
])
def test_each_parser_reads_its_calls_and_leaves_other_text_as_content(parser, text, content, calls) -> None:
    auto = tools.Tools([WEATHER])
    got_content, got = Reader(auto, PARSERS[parser]).whole(text)
    assert got_content == content
    assert [(c.name, json.loads(c.arguments)) for c in got] == calls
    assert all(c.id.startswith("call_") for c in got) and len({c.id for c in got}) == len(got)


TEXTS = ['Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
         "A <tool, <tool_cal and <tool_call> without JSON", "plain text < with <t brackets",
         '<tool_call>{"name": "a", "arguments": {}}</tool_call> after']


@given(st.sampled_from(TEXTS), st.lists(st.integers(0, 80), max_size=6))
def test_a_stream_gives_the_whole_answers_content_and_calls_however_it_is_cut(text, cuts) -> None:
    whole_content, whole_calls = Reader(tools.Tools([WEATHER]), PARSERS["hermes"]).whole(text)
    reader = Reader(tools.Tools([WEATHER]), PARSERS["hermes"])
    bounds = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    sent, deltas = "", []
    for start, end in zip(bounds, bounds[1:]):
        content, new = reader.feed(text[start:end])
        sent, deltas = sent + content, deltas + new
        assert "<tool_call>" not in sent  # nothing past a call's start goes out as content
    content, new = reader.end()
    sent, deltas = sent + content, deltas + new
    assert sent.strip() == whole_content.strip()
    assert [(d["function"]["name"], d["function"]["arguments"]) for d in deltas] == \
        [(c.name, c.arguments) for c in whole_calls]


def test_a_forced_stream_sends_arguments_as_they_come_and_calls_as_they_close() -> None:
    named = Reader(tools.Tools([WEATHER], "get_weather"), PARSERS["hermes"])
    pieces = ['{"ci', 'ty": "Pa', 'ris"}']
    deltas = [d for piece in pieces for d in named.feed(piece)[1]]
    assert deltas[0]["function"] == {"name": "get_weather", "arguments": '{"ci'} and deltas[0]["index"] == 0
    assert "".join(d["function"]["arguments"] for d in deltas) == '{"city": "Paris"}' and named.end() == ("", [])
    required = Reader(tools.Tools([WEATHER, TIME], "required"), PARSERS["hermes"])
    assert required.feed('[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_ti')[1][0][
        "function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    (late,) = required.feed('me", "arguments": {}}]')[1]
    assert late["index"] == 1 and late["function"]["name"] == "get_time" and required.end() == ("", [])
    cut = Reader(tools.Tools([WEATHER], "required"), PARSERS["hermes"])
    assert cut.whole('[{"name": "get_weather", "argu') == ('[{"name": "get_weather", "argu', [])


def test_the_chat_shapes_carry_the_calls() -> None:
    shape = Shape(chat({}))
    call = {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": "{}"}}
    whole = shape.whole("", "tool_calls", usage(0, 0), None, [call]).wire()
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": None, "tool_calls": [call]}
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    event = json.loads(shape.chunk("", calls=[{"index": 0, **call}])[len(b"data: "):])
    assert event["choices"][0]["delta"] == {"tool_calls": [{"index": 0, **call}]}


# --------------------------------------------------------------------------- the Responses API


def test_a_responses_body_is_the_chat_it_asks_for() -> None:
    job = responses.job({
        "model": "m", "instructions": "Be brief.", "max_output_tokens": 20, "temperature": 0.5, "include": [],
        "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}],
        "tool_choice": {"type": "function", "name": "get_weather"}, "store": False, "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]}]})
    assert job.messages == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"}, {"role": "assistant", "content": "Sunny."}]
    assert job.controls["max_tokens"] == 20 and job.tools.named == "get_weather"
    assert responses.job({"model": "m", "input": "hi"}).messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"previous_response_id": "resp_1"}, "previous_response_id", "stores no responses"),
    ({"tools": [{"type": "web_search"}]}, "tools", "only function tools"),
    ({"input": [{"type": "input_image"}]}, "input", "not 'input_image'"),
    ({"max_output_tokens": -2}, "max_output_tokens", "must be an integer"),
    ({"include": ["reasoning.encrypted_content"]}, "include", "only []"),
    ({"frobnicate": 1}, "frobnicate", "unrecognized"),
])
def test_a_responses_field_it_cannot_serve_is_refused_by_name(body, param, words) -> None:
    with pytest.raises(APIError) as caught:
        responses.job({"model": "m", "input": "hi", **body})
    assert caught.value.param == param and words in str(caught.value), str(caught.value)
