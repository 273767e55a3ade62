"""The Responses API (``POST /v1/responses``): its body read as the chat completion it asks for, and the answer
in its shapes (a ``response`` object; streamed, the ``response.*`` events).

``input`` (text, or items: messages with text and ``input_image`` parts, ``function_call`` and
``function_call_output``), ``instructions`` (the system message), ``max_output_tokens``, ``temperature``, ``top_p``,
function ``tools``, ``tool_choice``, ``parallel_tool_calls`` and ``text.format`` become the chat fields of the same
meaning, checked by
:mod:`.mapping` and :mod:`.tools` as a chat's are; the answer's text is a ``message`` output item and each call a
``function_call`` item. This server keeps no responses: ``previous_response_id`` (and ``conversation``) are
refused by name, the client sends the whole conversation as ``input`` (as the Agents SDK does by default).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from . import mapping
from .answer import Answer
from .errors import APIError, bad_request
from .protocol import (
    STORED,
    FunctionCallItem,
    OutputItem,
    OutputMessage,
    OutputText,
    ResponsesRequest,
    ResponsesResponse,
    ResponseUsage,
    UsageInfo,
    validated,
)
from .replies import sse

CHAT_NAMES = {"messages": "input", "max_tokens": "max_output_tokens", "response_format": "text"}
SAME = {"model": "model", "stream": "stream", "max_tokens": "max_output_tokens", "temperature": "temperature",
        "top_p": "top_p", "parallel_tool_calls": "parallel_tool_calls"}  # chat field -> the Responses field as it is
ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") in TEXT_PARTS
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise bad_request(f"{where}: content must be text or a list of input_text (and input_image) parts",
                      "input")


def _content(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A message's content as the chat's: its text, or its parts with each ``input_image`` an ``image_url`` part."""
    if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") == "input_image"
                                                for p in content):
        return _text(content, where)
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "input_image":
            if not isinstance(part.get("image_url"), str):
                raise bad_request(f"{where}: an input_image needs image_url (a data URL or an http(s) URL; file_id "
                                  "is not served here)", "input")
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            parts.append({"type": "text", "text": _text([part], where)})
    return parts


def _messages(given: Any) -> list[dict[str, Any]]:
    """The chat messages of ``input``."""
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    if not isinstance(given, list) or not given:
        raise bad_request("input must be text or a non-empty list of items", "input")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(given):
        where = f"input item {i + 1} of {len(given)}"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message" and item.get("role") in ROLES:
            messages.append({"role": item["role"], "content": _content(item.get("content"), where)})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _text(output, where)})
        else:
            raise bad_request(f"{where}: this server reads messages (roles {', '.join(ROLES)}), function_call and "
                              f"function_call_output items, not {str(kind)[:40]!r}", "input")
    return messages


def _tool(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict) or entry.get("type") != "function":
        kind = entry.get("type") if isinstance(entry, dict) else type(entry).__name__
        raise bad_request(f"{where}: only function tools are served here, not {str(kind)[:40]!r}", "tools")
    return {"type": "function", "function": {k: entry.get(k) for k in ("name", "description", "parameters")}}


def _format(text: Any) -> dict[str, Any] | None:
    """``text.format`` as the chat's ``response_format`` (None for plain text)."""
    form = text.get("format") if isinstance(text, dict) else None
    if form is None or (isinstance(form, dict) and form.get("type") == "text"):
        return None
    if isinstance(form, dict) and form.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": form.get("name"), "schema": form.get("schema")}}
    if isinstance(form, dict) and form.get("type") == "json_object":
        return {"type": "json_object"}
    raise bad_request("text.format must be {\"type\": \"text\"}, json_object or json_schema", "text")


def chat_body(body: Any) -> dict[str, Any]:
    """The chat completion a Responses body asks for; APIError 400 naming the Responses field."""
    request = validated(ResponsesRequest, body)
    for name in STORED:
        if request.taken(name) not in (None, False):
            raise bad_request(f"{name} is not supported: this server stores no responses; send the whole "
                              "conversation as input", name)
    if request.taken("include"):
        raise bad_request("include is not supported here (only [])", "include")
    tools = request.tools or []
    choice = request.taken("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    messages = _messages(request.taken("input"))
    if request.instructions is not None:
        messages.insert(0, {"role": "system", "content": request.instructions})
    chat = {"messages": messages, "tool_choice": choice, "response_format": _format(request.taken("text")),
            "tools": [_tool(t, f"tool {i + 1} of {len(tools)}") for i, t in enumerate(tools)] or None,
            **{ours: request.taken(theirs) for ours, theirs in SAME.items()}}
    return {name: value for name, value in chat.items() if value is not None}


def job(body: Any) -> mapping.Job:
    """The chat job of a Responses body; errors name the Responses fields."""
    try:
        parsed = mapping.parse(chat_body(body), chat=True)
    except APIError as exc:
        exc.param = CHAT_NAMES.get(exc.param or "", exc.param)
        raise
    parsed.media_param = "input"
    return parsed


def _usage(counts: UsageInfo) -> ResponseUsage:
    return ResponseUsage(input_tokens=counts.prompt_tokens, input_tokens_details={"cached_tokens": 0},
                         output_tokens=counts.completion_tokens, output_tokens_details={"reasoning_tokens": 0},
                         total_tokens=counts.total_tokens)


def _output_text(text: str) -> OutputText:
    return OutputText(type="output_text", text=text, annotations=[], logprobs=[])


def _message(text: str, item_id: str, status: str = "completed") -> OutputMessage:
    return OutputMessage(type="message", id=item_id, status=status, role="assistant",
                         content=[_output_text(text)] if status == "completed" else [])


def _function_call(call: dict[str, Any], item_id: str, status: str = "completed") -> FunctionCallItem:
    return FunctionCallItem(type="function_call", id=item_id, call_id=call["id"], name=call["function"]["name"],
                            arguments=call["function"]["arguments"] if status == "completed" else "", status=status)


class ResponseAnswer(Answer):
    """One answer in the Responses API's shapes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.id, self.created = _new_id("resp"), int(time.time())
        self.sequence = 0

    def response(self, status: str, output: list[OutputItem], counts: UsageInfo | None) -> ResponsesResponse:
        tools = self.job.tools
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return ResponsesResponse(
            id=self.id, object="response", created_at=self.created, status=status, error=None,
            incomplete_details=incomplete, model=self.job.model, output=output,
            parallel_tool_calls=tools.parallel if tools else True,
            tool_choice=tools.choice if tools and not tools.named else (
                {"type": "function", "name": tools.named} if tools else "auto"),
            tools=[{"type": "function", **t["function"]} for t in (tools.functions if tools else [])],
            temperature=self.job.controls.get("temperature"), top_p=self.job.controls.get("top_p"),
            max_output_tokens=self.job.controls.get("max_tokens"), truncation="disabled",
            text={"format": {"type": "text"}}, metadata={}, store=False, previous_response_id=None, reasoning=None,
            usage=_usage(counts) if counts is not None else None)

    @property
    def status(self) -> str:
        return "incomplete" if self.finish == "length" else "completed"

    async def whole(self) -> ResponsesResponse:
        text, calls = await self.outcome()
        output: list[OutputItem] = [_message(text, _new_id("msg"))] if text or not calls else []
        output += [_function_call(call.openai(), _new_id("fc")) for call in calls]
        return self.response(self.status, output, await self.counts())

    def event(self, kind: str, **fields: Any) -> bytes:
        self.sequence += 1
        data = {"type": kind, "sequence_number": self.sequence - 1, **fields}
        return f"event: {kind}\n".encode() + sse(data)

    async def events(self, first: str, pieces: AsyncGenerator[str, None]) -> AsyncGenerator[bytes, None]:
        output: list[OutputItem] = []
        text_at: int | None = None  # the output index of the open message item
        said = ""  # its text so far
        calls: dict[int, tuple[int, FunctionCallItem]] = {}  # a call's index -> its output index and item
        try:
            yield self.event("response.created", response=self.response("in_progress", [], None).wire())
            yield self.event("response.in_progress", response=self.response("in_progress", [], None).wire())
            piece, last = first, False
            while True:
                text, deltas = self.read(piece, last)
                if text:
                    if text_at is None:
                        text_at = len(output)
                        output.append(_message("", _new_id("msg"), "in_progress"))
                        yield self.event("response.output_item.added", output_index=text_at,
                                         item=output[text_at].wire())
                        opened = OutputText(type="output_text", text="", annotations=[])  # no logprobs yet
                        yield self.event("response.content_part.added", item_id=output[text_at].id,
                                         output_index=text_at, content_index=0, part=opened.wire())
                    said += text
                    yield self.event("response.output_text.delta", item_id=output[text_at].id,
                                     output_index=text_at, content_index=0, delta=text, logprobs=[])
                for delta in deltas:
                    if "id" in delta:
                        opened_call = _function_call(delta, _new_id("fc"), "in_progress")
                        calls[delta["index"]] = (len(output), opened_call)
                        output.append(opened_call)
                        yield self.event("response.output_item.added", output_index=len(output) - 1,
                                         item=opened_call.wire())
                    at, call = calls[delta["index"]]
                    call.arguments += delta["function"]["arguments"]
                    yield self.event("response.function_call_arguments.delta", item_id=call.id,
                                     output_index=at, delta=delta["function"]["arguments"])
                if last:
                    break
                more = await anext(pieces, None)
                last = more is None
                piece = more or ""
            for at, item in enumerate(output):
                for event in self.closing(at, item, said):
                    yield event
            status = self.status
            yield self.event(f"response.{status}", response=self.response(status, output, await self.counts()).wire())
        except APIError as exc:
            yield self.event("error", code=exc.code or exc.type, message=str(exc), param=exc.param)
        finally:
            await pieces.aclose()

    def closing(self, at: int, item: OutputItem, said: str) -> list[bytes]:
        """The events that end output item ``at`` (made whole in place; ``said``: a message's text)."""
        item.status = "completed"
        if isinstance(item, FunctionCallItem):
            return [self.event("response.function_call_arguments.done", item_id=item.id, output_index=at,
                               name=item.name, arguments=item.arguments),
                    self.event("response.output_item.done", output_index=at, item=item.wire())]
        part = _output_text(said)
        item.content = [part]
        return [self.event("response.output_text.done", item_id=item.id, output_index=at, content_index=0,
                           text=said, logprobs=[]),
                self.event("response.content_part.done", item_id=item.id, output_index=at, content_index=0,
                           part=part.wire()),
                self.event("response.output_item.done", output_index=at, item=item.wire())]
