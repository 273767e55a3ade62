"""The answers in OpenAI's shapes: whole completions, stream chunks as server-sent events ending in ``[DONE]``,
``usage``, and the two logprobs shapes (completions: parallel lists; chat: one entry per token)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from .mapping import Job

DONE = b"data: [DONE]\n\n"
FINISH = {"eos": "stop", "stop": "stop", "length": "length", "ctx_len": "length", "cancelled": "abort",
          "abort": "abort"}  # the backends' reasons -> OpenAI's (anything else: stop)


def sse(data: dict[str, Any]) -> bytes:
    """One server-sent event."""
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def finish_reason(reason: str | None) -> str:
    return FINISH.get(reason or "", "stop")


def usage(prompt_tokens: int | None, completion_tokens: int | None) -> dict[str, int | None]:
    total = None if prompt_tokens is None or completion_tokens is None else prompt_tokens + completion_tokens
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total}


def _bytes(entry: dict[str, Any]) -> bytes:
    """A token's UTF-8 bytes (the backend names them where a token is part of a character)."""
    return bytes(entry["bytes"]) if "bytes" in entry else entry["token"].encode()


def completion_logprobs(tokens: list[dict[str, Any]], offset: int, text: str) -> dict[str, Any]:
    """The completions shape of the backend's entries (``backend_model.engine.logprobs``), their text from character
    ``offset`` of the choice's text; ``text``: theirs (a token's offset is where its bytes begin, in characters: a
    token ending inside a character starts that character, a special token or a stop string's adds nothing). An
    entry whose ``logprob`` is None (an echoed prompt's first token: nothing before it) has no alternatives."""
    offsets, done = [], b""
    for token in tokens:
        offsets.append(offset + min(len(done.decode("utf-8", errors="ignore")), len(text)))
        done += _bytes(token)
    return {"tokens": [t["token"] for t in tokens], "token_logprobs": [t["logprob"] for t in tokens],
            "top_logprobs": [None if t["logprob"] is None else {o["token"]: o["logprob"] for o in t["top"]}
                             for t in tokens], "text_offset": offsets}


def chat_logprobs(tokens: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat shape of the backend's entries."""

    def entry(token: dict[str, Any]) -> dict[str, Any]:
        return {"token": token["token"], "logprob": token["logprob"], "bytes": list(_bytes(token))}

    return {"content": [{**entry(t), "top_logprobs": [entry(o) for o in t["top"]]} for t in tokens], "refusal": None}


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

    def _logprobs(self, tokens: list[dict[str, Any]] | None, text: str) -> dict[str, Any] | None:
        if tokens is None or self.job.logprobs is None:
            return None
        return chat_logprobs(tokens) if self.chat else completion_logprobs(tokens, self.sent, text)

    def chunk(self, text: str, first: bool = False, finish: str | None = None,
              tokens: list[dict[str, Any]] | None = None, calls: list[dict[str, Any]] | None = None) -> bytes:
        """One stream event carrying ``text`` (``first``: the chat answer's role too; ``finish``: its end;
        ``calls``: tool calls' ``delta.tool_calls`` entries)."""
        logprobs = self._logprobs(tokens, text)
        self.sent += len(text)
        if self.chat:
            calls_only = self.job.tools is not None and self.job.tools.forced  # content null, as OpenAI sends it
            delta: dict[str, Any] = {"role": "assistant", "content": text or (None if calls_only else "")} \
                if first else ({"content": text} if text else {})
            if calls:
                delta["tool_calls"] = calls
            choice = {"index": self.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": self.index, "text": text, "logprobs": logprobs, "finish_reason": finish}
        extra = {"usage": None} if self.job.include_usage else {}
        return sse({**self.head(True), "choices": [choice], **extra})

    def usage_chunk(self, counts: dict[str, int | None]) -> bytes:
        """The stream's last event when ``stream_options.include_usage``: no choices, the usage."""
        return sse({**self.head(True), "choices": [], "usage": counts})

    def choice(self, text: str, finish: str, tokens: list[dict[str, Any]] | None = None,
               calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """This choice whole, in an answer that is not streamed (``calls``: its ``message.tool_calls``)."""
        logprobs = self._logprobs(tokens, text)
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text or None if calls else text}
            if calls:
                message["tool_calls"] = calls
            return {"index": self.index, "message": message, "logprobs": logprobs, "finish_reason": finish}
        return {"index": self.index, "text": text, "logprobs": logprobs, "finish_reason": finish}

    def whole(self, text: str, finish: str, counts: dict[str, int | None],
              tokens: list[dict[str, Any]] | None = None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The one answer of a request that is not streamed."""
        return {**self.head(False), "choices": [self.choice(text, finish, tokens, calls)], "usage": counts}
