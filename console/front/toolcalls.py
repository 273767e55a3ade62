"""Tool calls on the answer side: the calls read out of a model's text, whole or as it streams, in OpenAI's shape.

Three formats are read (:data:`PARSERS`, ``--tool-call-parser``; else the one the model's chat template names,
else Hermes, the form the front's own tool prompt asks for):

* ``hermes`` (Qwen2/2.5/3, Hermes, SmolLM2): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one
  object or a list of them per tag, text around the tags being the answer's content;
* ``llama3`` (Llama 3.1-3.3 JSON tool calling): the whole answer one JSON object ``{"name", "parameters"}`` (or
  several separated by ``;``), after an optional ``<|python_tag|>``;
* ``mistral``: ``[TOOL_CALLS]`` then a JSON list of ``{"name", "arguments"}`` (the marker is optional at the start,
  as a tokenizer that drops special tokens leaves the list alone).

With ``tool_choice: "auto"`` what the model wrote is read by its parser and text that does not parse as calls is
content, not a call. A named function's answer is the call's arguments (the grammar made it so); a required
call's is a JSON list of calls (:meth:`.tools.Tools.grammar`). A stream sends content up to where a call may
begin, holding back only text that could be the start of a marker.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .tools import Tools

DECODER = json.JSONDecoder()


@dataclass
class Call:
    """One function call: its name and its arguments as a JSON string."""

    name: str
    arguments: str
    id: str = ""

    def __post_init__(self) -> None:
        self.id = self.id or f"call_{uuid.uuid4().hex[:24]}"

    def openai(self) -> dict[str, Any]:
        """The call as ``message.tool_calls`` holds it."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def _values(text: str, separators: str = ",;") -> list[Any] | None:
    """The JSON values ``text`` holds one after another (whitespace or ``separators`` between), None unless all of it
    is JSON."""
    values: list[Any] = []
    at = 0
    while True:
        while at < len(text) and (text[at].isspace() or (values and text[at] in separators)):
            at += 1
        if at == len(text):
            return values
        try:
            value, at = DECODER.raw_decode(text, at)
        except ValueError:
            return None
        values.append(value)


def _calls(values: list[Any], key: str = "arguments") -> list[Call] | None:
    """The calls of decoded objects (lists flattened) with a ``name`` and their arguments under ``key`` or the other
    common key, None when any is not one."""
    flat = [v for value in values for v in (value if isinstance(value, list) else [value])]
    calls = []
    for value in flat:
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return None
        arguments = value.get(key, value.get("parameters" if key == "arguments" else "arguments", {}))
        if isinstance(arguments, str):  # some models write the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(arguments, dict):
            return None
        calls.append(Call(value["name"], json.dumps(arguments, ensure_ascii=False)))
    return calls or None


def _hermes(text: str) -> tuple[str, list[Call]]:
    content, calls, at = [], [], 0
    for match in re.finditer(r"<tool_call>(.*?)(?:</tool_call>|$)", text, re.DOTALL):
        found = _calls(_values(match.group(1)) or [])
        if found is None:  # not a call: the text stays content
            continue
        content.append(text[at:match.start()])
        calls += found
        at = match.end()
    content.append(text[at:])
    return "".join(content).strip() if calls else text, calls


def _llama3(text: str) -> tuple[str, list[Call]]:
    body = text.strip().removeprefix("<|python_tag|>")
    calls = _calls(_values(body, ";") or [], "parameters")
    return ("", calls) if calls else (text, [])


def _mistral(text: str) -> tuple[str, list[Call]]:
    head, marker, body = text.partition("[TOOL_CALLS]")
    if not marker:
        head, body = "", text
    calls = _calls(_values(body) or [])
    return (head.strip(), calls) if calls else (text, [])


@dataclass(frozen=True)
class Parser:
    """A format: where calls may begin (``markers`` anywhere, ``leading`` only at the answer's start) and how the
    text from there is read (content and calls)."""

    name: str
    markers: tuple[str, ...]
    leading: tuple[str, ...]
    read: Callable[[str], tuple[str, list[Call]]]


PARSERS = {p.name: p for p in (Parser("hermes", ("<tool_call>",), (), _hermes),
                               Parser("llama3", (), ("<|python_tag|>", "{"), _llama3),
                               Parser("mistral", ("[TOOL_CALLS]",), ("[",), _mistral))}
TEMPLATE_MARKS = (("<tool_call>", "hermes"), ("[TOOL_CALLS]", "mistral"), ("<|python_tag|>", "llama3"),
                  ("ipython", "llama3"))


def parser_for(template: str, given: str | None = None) -> Parser:
    """``given`` (``--tool-call-parser``), else the format the chat template names, else Hermes."""
    if given:
        return PARSERS[given]
    return PARSERS[next((name for mark, name in TEMPLATE_MARKS if mark in (template or "")), "hermes")]


def _list_items(text: str) -> list[Any]:
    """The whole items of a JSON list that may still be arriving (``[{...},{...``)."""
    items: list[Any] = []
    at = text.find("[") + 1
    if not at:
        return items
    while True:
        while at < len(text) and (text[at].isspace() or text[at] == ","):
            at += 1
        try:
            item, at = DECODER.raw_decode(text, at)
        except ValueError:
            return items
        items.append(item)


class Reader:
    """Reads one answer for the calls ``tools`` asks of it, piece by piece: :meth:`feed` each piece of text, then
    :meth:`end`; each gives the content to send and the new calls' stream deltas (``delta.tool_calls`` entries)."""

    def __init__(self, tools: Tools, parser: Parser) -> None:
        self.tools, self.parser = tools, parser
        self.calls: list[Call] = []
        self.text = ""  # all the answer's text so far
        self.held = ""  # text not yet sent as content (auto)
        self.sent_any = False
        self.capturing = False  # a call may have begun (auto): the rest is read at the end

    def _new(self, calls: list[Call]) -> list[dict[str, Any]]:
        start = len(self.calls)
        self.calls += calls
        return [{"index": start + i, **call.openai()} for i, call in enumerate(calls)]

    def feed(self, piece: str) -> tuple[str, list[dict[str, Any]]]:
        self.text += piece
        if self.tools.named:
            if not piece:
                return "", []
            if not self.calls:
                return "", self._new([Call(self.tools.named, piece)])
            self.calls[0].arguments += piece
            return "", [{"index": 0, "function": {"arguments": piece}}]
        if self.tools.choice == "required":
            found = _calls(_list_items(self.text)[len(self.calls):]) or []
            return "", self._new(found)
        return self._auto(piece), []

    def _auto(self, piece: str) -> str:
        if self.capturing:
            self.held += piece
            return ""
        self.held += piece
        start = self.held.lstrip() if not self.sent_any else None
        if start is not None and any(start.startswith(m) for m in self.parser.leading):
            self.capturing = True
            return ""
        if start is not None and any(m.startswith(start) for m in self.parser.leading):
            return ""  # nothing yet, or the start of a leading marker
        at = min((i for i in (self.held.find(m) for m in self.parser.markers) if i >= 0), default=-1)
        if at >= 0:
            send, self.held, self.capturing = self.held[:at], self.held[at:], True
        else:
            keep = max((n for m in self.parser.markers for n in range(1, len(m)) if self.held.endswith(m[:n])),
                       default=0)
            send, self.held = self.held[:len(self.held) - keep], self.held[len(self.held) - keep:]
        self.sent_any = self.sent_any or bool(send)
        return send

    def end(self) -> tuple[str, list[dict[str, Any]]]:
        """The last content and calls; a forced answer that holds no whole call is left as content."""
        if self.tools.forced:
            if self.calls:
                return "", []
            return ("", self._new([Call(self.tools.named, "{}")])) if self.tools.named and not self.text else (
                self.text, [])
        held, self.held = self.held, ""
        if not self.capturing:
            return held, []
        content, calls = self.parser.read(held)
        return content, self._new(calls)

    def whole(self, text: str) -> tuple[str, list[Call]]:
        """The content and calls of a whole answer."""
        first, _ = self.feed(text)
        last, _ = self.end()
        content = first + last
        return (content.strip() if self.calls else content), self.calls
