"""The answers built as their models (:mod:`.protocol`): whole completions, stream chunks as server-sent events ending
in ``[DONE]``, ``usage``, and the two logprobs shapes (completions: parallel lists; chat: one entry per token)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from .mapping import Job
from .protocol import (
    ChatChoice,
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    ChatLogProb,
    ChatLogProbs,
    ChatLogProbsEntry,
    ChatMessage,
    ChatStreamChoice,
    CompletionChoice,
    CompletionLogProbs,
    CompletionResponse,
    CompletionStreamResponse,
    DeltaMessage,
    Reply,
    UsageInfo,
)

DONE = b"data: [DONE]\n\n"
FINISH = {"eos": "stop", "stop": "stop", "length": "length", "ctx_len": "length", "cancelled": "abort",
          "abort": "abort"}  # the backends' reasons -> OpenAI's (anything else: stop)


def sse(data: dict[str, Any] | Reply) -> bytes:
    """One server-sent event."""
    if isinstance(data, Reply):
        data = data.wire()
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def finish_reason(reason: str | None) -> str:
    return FINISH.get(reason or "", "stop")


def usage(prompt_tokens: int | None, completion_tokens: int | None) -> UsageInfo:
    total = None if prompt_tokens is None or completion_tokens is None else prompt_tokens + completion_tokens
    return UsageInfo(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=total)


def _bytes(entry: dict[str, Any]) -> bytes:
    """A token's UTF-8 bytes (the backend names them where a token is part of a character)."""
    return bytes(entry["bytes"]) if "bytes" in entry else entry["token"].encode()


def completion_logprobs(tokens: list[dict[str, Any]], offset: int, text: str) -> CompletionLogProbs:
    """The completions shape of the backend's entries (``backend_model.engine.logprobs``), their text from character
    ``offset`` of the choice's text; ``text``: theirs (a token's offset is where its bytes begin, in characters: a
    token ending inside a character starts that character, a special token or a stop string's adds nothing). An
    entry whose ``logprob`` is None (an echoed prompt's first token: nothing before it) has no alternatives."""
    offsets, done = [], b""
    for token in tokens:
        offsets.append(offset + min(len(done.decode("utf-8", errors="ignore")), len(text)))
        done += _bytes(token)
    return CompletionLogProbs(
        tokens=[t["token"] for t in tokens], token_logprobs=[t["logprob"] for t in tokens],
        top_logprobs=[None if t["logprob"] is None else {o["token"]: o["logprob"] for o in t["top"]} for t in tokens],
        text_offset=offsets)


def chat_logprobs(tokens: list[dict[str, Any]]) -> ChatLogProbs:
    """The chat shape of the backend's entries."""

    def entry(token: dict[str, Any]) -> dict[str, Any]:
        return {"token": token["token"], "logprob": token["logprob"], "bytes": list(_bytes(token))}

    return ChatLogProbs(content=[ChatLogProbsEntry(**entry(t), top_logprobs=[ChatLogProb(**entry(o)) for o in t["top"]])
                                 for t in tokens], refusal=None)


class Shape:
    """The envelope of one answer: its id, creation time and model, and the chat or completions fields of its choice
    ``index`` (``like``: another choice's shape of the same answer, whose id and time it shares)."""

    def __init__(self, job: Job, index: int = 0, like: Shape | None = None) -> None:
        self.job, self.chat, self.index = job, job.chat, index
        self.id: str = like.id if like else f"{'chatcmpl' if job.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created: int = like.created if like else int(time.time())
        self.sent = 0  # characters of the choice's text sent so far (completions' text offsets)

    def head(self, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion" if self.chat else "text_completion") + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": kind, "created": self.created, "model": self.job.model}

    def _wanted(self, tokens: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        """``tokens`` if the request asked for log-probabilities."""
        return None if self.job.logprobs is None else tokens

    def _chat_logprobs(self, tokens: list[dict[str, Any]] | None) -> ChatLogProbs | None:
        tokens = self._wanted(tokens)
        return None if tokens is None else chat_logprobs(tokens)

    def _completion_logprobs(self, tokens: list[dict[str, Any]] | None, text: str) -> CompletionLogProbs | None:
        tokens = self._wanted(tokens)
        return None if tokens is None else completion_logprobs(tokens, self.sent, text)

    def _chunk(self, choices: list[Any], counts: UsageInfo | None = None) -> bytes:
        """A stream event of ``choices``; ``usage`` (``counts``, else null) only when the client asked for it."""
        kind = ChatCompletionStreamResponse if self.chat else CompletionStreamResponse
        chunk = kind(**self.head(True), choices=choices)
        if self.job.include_usage:
            chunk.usage = counts
        return sse(chunk)

    def chunk(self, text: str, first: bool = False, finish: str | None = None,
              tokens: list[dict[str, Any]] | None = None, calls: list[dict[str, Any]] | None = None) -> bytes:
        """One stream event carrying ``text`` (``first``: the chat answer's role too; ``finish``: its end;
        ``calls``: tool calls' ``delta.tool_calls`` entries)."""
        choice: ChatStreamChoice | CompletionChoice
        if self.chat:
            calls_only = self.job.tools is not None and self.job.tools.forced  # content null, as OpenAI sends it
            delta = DeltaMessage(role="assistant", content=text or (None if calls_only else "")) if first else (
                DeltaMessage(content=text) if text else DeltaMessage())
            if calls:
                delta.tool_calls = calls
            choice = ChatStreamChoice(index=self.index, delta=delta, logprobs=self._chat_logprobs(tokens),
                                      finish_reason=finish)
        else:
            choice = CompletionChoice(index=self.index, text=text, logprobs=self._completion_logprobs(tokens, text),
                                      finish_reason=finish)
        self.sent += len(text)
        return self._chunk([choice])

    def usage_chunk(self, counts: UsageInfo) -> bytes:
        """The stream's last event when ``stream_options.include_usage``: no choices, the usage."""
        return self._chunk([], counts)

    def choice(self, text: str, finish: str, tokens: list[dict[str, Any]] | None = None,
               calls: list[dict[str, Any]] | None = None) -> ChatChoice | CompletionChoice:
        """This choice whole, in an answer that is not streamed (``calls``: its ``message.tool_calls``)."""
        if self.chat:
            message = ChatMessage(role="assistant", content=text or None if calls else text)
            if calls:
                message.tool_calls = calls
            return ChatChoice(index=self.index, message=message, logprobs=self._chat_logprobs(tokens),
                              finish_reason=finish)
        return CompletionChoice(index=self.index, text=text, logprobs=self._completion_logprobs(tokens, text),
                                finish_reason=finish)

    def answer(self, choices: list[Any], counts: UsageInfo) -> ChatCompletionResponse | CompletionResponse:
        """The answer of a request that is not streamed, of ``choices``."""
        kind = ChatCompletionResponse if self.chat else CompletionResponse
        return kind(**self.head(False), choices=choices, usage=counts)

    def whole(self, text: str, finish: str, counts: UsageInfo, tokens: list[dict[str, Any]] | None = None,
              calls: list[dict[str, Any]] | None = None) -> ChatCompletionResponse | CompletionResponse:
        """The one answer of a request that is not streamed."""
        return self.answer([self.choice(text, finish, tokens, calls)], counts)
