"""Every kind of answer the front writes, whole and streamed, byte for byte as recorded in
``tests/fixtures/front_wire.json`` (ids and times aside): the answers' models must put the same JSON on the wire,
which the openai SDK, LangChain and lm-eval read. Only when the wire is meant to change: delete the file, run the test
once (it records the answers and fails), check the new file's changes and commit them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fake_upstream import FakeUpstream, answer, full_info, post

GOLDEN = Path(__file__).parent.parent / "fixtures" / "front_wire.json"
CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hi"}]}
ASK = {"model": "smollm2", "prompt": "Once"}
RESPONSE = {"model": "smollm2", "input": "Say hi"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
ENTRIES = [[{"id": 1, "token": "Hé", "logprob": -0.5, "top": [{"id": 1, "token": "Hé", "logprob": -0.5}]}],
           [{"id": 2, "token": "\ufffd", "bytes": [226, 130], "logprob": -1.25, "top": []}]]
STREAM = {"stream": True}
USAGE = {"stream": True, "stream_options": {"include_usage": True}}
KINDS: dict[str, tuple[str, dict[str, Any], list[Any] | None]] = {
    "chat": ("/v1/chat/completions", CHAT, None),
    "chat stream": ("/v1/chat/completions", {**CHAT, **STREAM}, None),
    "chat stream usage": ("/v1/chat/completions", {**CHAT, **USAGE}, None),
    "chat logprobs": ("/v1/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 1},
                      answer("Hé", "x", logprobs=ENTRIES)),
    "chat logprobs stream": ("/v1/chat/completions", {**CHAT, **STREAM, "logprobs": True, "top_logprobs": 1},
                             answer("Hé", "x", logprobs=ENTRIES)),
    "chat tool": ("/v1/chat/completions", {**CHAT, "tools": [WEATHER]}, answer(CALL, finish="stop")),
    "chat tool stream": ("/v1/chat/completions", {**CHAT, **STREAM, "tools": [WEATHER]}, answer(CALL, finish="stop")),
    "chat forced tool stream": ("/v1/chat/completions", {**CHAT, **STREAM, "tools": [WEATHER],
                                                         "tool_choice": "required"}, answer(CALL, finish="stop")),
    "chat no counts": ("/v1/chat/completions", CHAT, answer("Hi", input_tokens=None)),
    "completion": ("/v1/completions", ASK, None),
    "completion stream": ("/v1/completions", {**ASK, **USAGE}, None),
    "completion n echo": ("/v1/completions", {**ASK, "n": 2, "echo": True}, answer("Hi", n=1)),
    "completion echo only stream": ("/v1/completions", {**ASK, **STREAM, "echo": True, "max_tokens": 0}, None),
    "completion logprobs": ("/v1/completions", {**ASK, "logprobs": 1}, answer("Hé", "x", logprobs=ENTRIES)),
    "completion logprobs stream": ("/v1/completions", {**ASK, **STREAM, "logprobs": 1},
                                   answer("Hé", "x", logprobs=ENTRIES)),
    "response": ("/v1/responses", RESPONSE, answer("Hi", finish="stop")),
    "response incomplete": ("/v1/responses", {**RESPONSE, "max_output_tokens": 5, "temperature": 0}, None),
    "response stream": ("/v1/responses", {**RESPONSE, **STREAM}, answer("Hi", finish="stop")),
    "response tool": ("/v1/responses", {**RESPONSE, "tools": [{"type": "function", **WEATHER["function"]}]},
                      answer(CALL, finish="stop")),
    "response tool stream": ("/v1/responses", {**RESPONSE, **STREAM, "tools": [{"type": "function",
                                                                                **WEATHER["function"]}]},
                             answer(CALL, finish="stop")),
}


def wire(path: str, body: dict[str, Any], script: list[Any] | None) -> str:
    """The answer's body, its ids and times made the same on every run."""
    upstream = FakeUpstream(full_info("smollm2"))
    if script is not None:
        upstream.enqueue(script)
    text = post(upstream, path, body).text
    text = re.sub(r'"(chatcmpl|cmpl|resp|msg|fc|call)([-_])[0-9a-f]{8,}"', r'"\1\2ID"', text)
    return re.sub(r'"(created|created_at)":\d+', r'"\1":0', text)


def test_every_answer_is_on_the_wire_as_recorded() -> None:
    got = {kind: wire(*case) for kind, case in KINDS.items()}
    if not GOLDEN.exists():
        GOLDEN.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
        raise AssertionError(f"recorded {GOLDEN}: check it and run again")
    recorded = json.loads(GOLDEN.read_text())
    for kind in KINDS:
        assert got[kind] == recorded[kind], kind
