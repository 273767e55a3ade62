"""``POST /v1/chat/completions`` on a fake upstream, with the embedded model's chat template: the answer whole and
streamed, the prompt the template makes, tool calls read out of the text, and a client that goes away.
(Served: e2e/test_front.py, test_front_tools.py.)"""

from __future__ import annotations

import asyncio
import json

from fake_server import plain_info
from fake_upstream import FakeUpstream, answer, error, events, full_info, hang, post

from console.front.app import create_app
from console.front.state import Front

HI = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hi"}]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


def test_an_answer_is_the_assistants_message() -> None:
    body = post(FakeUpstream(), "/v1/chat/completions", HI).json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello world"}


def test_the_model_gets_the_conversation_as_its_template_renders_it() -> None:
    upstream = FakeUpstream()
    post(upstream, "/v1/chat/completions", HI)
    prompt = upstream.sent[0].prompts[0]
    assert "<|im_start|>user\nSay hi<|im_end|>" in prompt and prompt.endswith("<|im_start|>assistant\n")


def test_a_stream_starts_with_the_role_and_ends_with_the_finish() -> None:
    chunks = events(post(FakeUpstream(), "/v1/chat/completions", {**HI, "stream": True}).text)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Hello"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "length" and chunks[-1] == "[DONE]"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1]) == "Hello world"


def test_a_chat_takes_one_answer_only() -> None:
    assert error(post(FakeUpstream(), "/v1/chat/completions", {**HI, "n": 2})) == (400, "n", None)


def test_messages_must_be_a_list() -> None:
    assert error(post(FakeUpstream(), "/v1/chat/completions", {**HI, "messages": "hi"})) == (400, "messages", None)


def test_a_model_without_a_chat_template_is_refused_naming_messages() -> None:
    upstream = FakeUpstream(plain_info("p"))
    assert error(post(upstream, "/v1/chat/completions", {**HI, "model": "p"})) == (400, "messages", None)


def test_a_call_in_the_models_text_becomes_a_tool_call() -> None:
    upstream = FakeUpstream()
    upstream.enqueue(answer('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
                            finish="stop"))
    choice = post(upstream, "/v1/chat/completions", {**HI, "tools": [WEATHER]}).json()["choices"][0]
    call = choice["message"]["tool_calls"][0]["function"]
    assert choice["finish_reason"] == "tool_calls" and json.loads(call["arguments"]) == {"city": "Paris"}


def test_a_named_tool_choice_is_enforced_by_the_grammar() -> None:
    upstream = FakeUpstream(full_info("smollm2"))
    upstream.enqueue(answer('{"city": "Oslo"}', finish="stop"))
    choice = {"type": "function", "function": {"name": "get_weather"}}
    post(upstream, "/v1/chat/completions", {**HI, "tools": [WEATHER], "tool_choice": choice})
    assert upstream.sent[0].params.structured_outputs == {"json": {
        "type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": False}}


def test_a_client_that_goes_away_cancels_its_upstream_request() -> None:
    upstream = FakeUpstream()
    upstream.enqueue(hang("Hel"))
    app = create_app(Front(upstream))
    body = json.dumps(HI).encode()
    sent: list[dict] = []

    async def receive() -> dict:
        if body and not sent:
            sent.append({})
            return {"type": "http.request", "body": body, "more_body": False}
        await upstream.received.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "query_string": b"", "root_path": "", "scheme": "http", "server": ("front", 80), "client": ("c", 1),
        "http_version": "1.1", "asgi": {"version": "3.0"}}

    async def run() -> None:
        await asyncio.wait_for(app(scope, receive, send), 10)
        await asyncio.wait_for(upstream.sent[0].done.wait(), 10)

    asyncio.run(run())
    assert sent[1]["status"] == 499 and upstream.sent[0].closed
