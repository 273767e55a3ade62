"""Requests to an OpenAI-compatible server: streamed as server-sent events, or answered once.

The ``openai`` client sends one request per prompt (``a|b`` prompts go out together, merged by
:func:`~.call.fan_out`): ``/v1/chat/completions`` with the messages (the server applies the chat
template) or ``/v1/completions`` with the raw prompt. A reader thread runs the request on an event loop of its
own and hands over what arrives; the caller's thread applies the network and idle timeouts as for Triton
streams. A cancel, a timeout or an abandoned iteration cancels the request, which closes its connection at
once, streamed or not: that is how the API cancels (vLLM stops a request whose client went away; llama.cpp's
server stops a stream, but finishes an unstreamed request). Streams ask for ``stream_options.include_usage``;
output tokens come from the server's ``usage`` when it sends one, else the text chunks are counted
(``ReplyStats.output_tokens_source`` says which).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .abortable import Abortable
from .call import Arrived, Broke, Call, Ended
from .errors import BadRequest, ClientError
from .events import Event, Failure, ModelInfo, Reply, TextDelta, Timeouts
from .images import data_url, placed
from .openai_api import CANCEL_NOTE, OPENAI, api_error, base_url, client_options, model_info, request_headers, tls
from .openai_interface import OpenAIInterface, server_of
from .params import GenerationParams
from .stats import reply_stats

Messages = list[dict[str, str]]
UNSTREAMED_NOTE = ("connection closed; a server such as llama.cpp's finishes an unstreamed request (stream mode "
                   "stops one)")
STOPPED_NOTE = "connection closed (vLLM stops a request whose client went away, streamed or not)"


def choice_text(choice: Any, chat: bool) -> str:
    """The text of one choice: a chat chunk's ``delta.content`` (a whole answer's ``message.content``),
    a completion's ``text``."""
    if not chat:
        return getattr(choice, "text", None) or ""
    part = getattr(choice, "delta", None) or getattr(choice, "message", None)
    return (getattr(part, "content", None) or "") if part is not None else ""


def _usage(usage: Any) -> tuple[int | None, int | None]:
    """(completion tokens, prompt tokens) of a ``usage`` object, when sent."""
    if usage is None:
        return None, None
    return getattr(usage, "completion_tokens", None), getattr(usage, "prompt_tokens", None)


@dataclass
class ChunkFolder:
    """A stream's chunks folded into text deltas and, at the end, the reply with its figures."""

    chat: bool
    text: str = ""
    arrivals: list[float] = field(default_factory=list)
    finish_reason: str = ""
    usage: Any = None

    def add(self, chunk: Any, at: float) -> Iterator[TextDelta]:
        """The new text of one chunk (``at``: seconds since the request was sent)."""
        if getattr(chunk, "usage", None) is not None:  # include_usage: the last chunk, no choices
            self.usage = chunk.usage
        for choice in chunk.choices or ():
            piece = choice_text(choice, self.chat)
            if piece:
                self.arrivals.append(at)
                self.text += piece
                yield TextDelta(0, piece, at, first=len(self.arrivals) == 1)
            if getattr(choice, "finish_reason", None):
                self.finish_reason = choice.finish_reason

    def reply(self, prompt: str, latency: float) -> Reply:
        completion, prompt_tokens = _usage(self.usage)
        stats = reply_stats(self.arrivals, latency, completion, prompt_tokens, streamed=True, source="usage")
        return Reply(0, prompt, self.text, self.finish_reason, stats)


def answer(completion: Any, prompt: str, chat: bool, latency: float) -> Reply:
    """The reply of an unstreamed request."""
    choice = completion.choices[0] if completion.choices else None
    tokens, prompt_tokens = _usage(getattr(completion, "usage", None))
    stats = reply_stats((), latency, tokens, prompt_tokens, streamed=False, source="usage")
    return Reply(0, prompt, choice_text(choice, chat) if choice else "",
                 (getattr(choice, "finish_reason", None) or "") if choice else "", stats)


class OpenAICall(Call):
    """One request per prompt to ``model`` at the base URL ``url``; ``messages`` (one list per prompt) make
    it a chat request, else the prompts are completed as they are."""

    protocol = OPENAI
    cancel_note = CANCEL_NOTE

    def __init__(self, url: str, model: str | ModelInfo, prompts: Sequence[str], params: GenerationParams,
                 timeouts: Timeouts, streaming: bool = True, messages: Sequence[Messages] | None = None) -> None:
        super().__init__(url, model, prompts, params, timeouts)
        self.url = base_url(url)
        self.streaming = streaming
        self.messages = [list(m) for m in messages] if messages is not None else None
        if self.messages is not None and len(self.messages) != len(self.prompts):
            raise BadRequest(f"{len(self.messages)} message lists for {len(self.prompts)} prompts")
        if not streaming:
            self.cancel_note = STOPPED_NOTE if self.info and server_of(self.info).stops_when_left else UNSTREAMED_NOTE

    def _fresh(self) -> None:
        super()._fresh()
        self._running = Abortable()  # the request in flight, on an event loop of its own

    @property
    def chat(self) -> bool:
        return self.messages is not None

    def model_info(self) -> ModelInfo:
        if self.info is None:
            self.info = model_info(self.url, self.model)
        return self.info

    def part(self, index: int) -> OpenAICall:
        clone = super().part(index)
        assert isinstance(clone, OpenAICall)
        if self.messages is not None:
            clone.messages = [self.messages[index]]
        return clone

    def request_body(self) -> dict[str, Any]:
        """The ``create`` arguments of this call's one prompt (the controls the API has, the stream switch)."""
        interface = self.interface()
        if not isinstance(interface, OpenAIInterface):
            raise BadRequest(f"model {self.model} is not an OpenAI-compatible server's")
        fields, extra = interface.body(self.params)
        body: dict[str, Any] = {"model": self.model, **fields, "stream": self.streaming}
        if extra:
            body["extra_body"] = extra
        if self.streaming:
            body["stream_options"] = {"include_usage": True}
        images = [{"type": "image_url", "image_url": {"url": data_url(image)}} for image in self.params.images]
        if self.messages is not None:
            body["messages"] = placed(self.messages[0], images)
        elif images:
            raise BadRequest("images go in chat requests (/v1/chat/completions): leave out --raw")
        else:
            body["prompt"] = self.prompts[0]
        return body

    def _request(self) -> Iterator[Event]:
        t0 = time.perf_counter()
        try:
            body = self.request_body()
        except ClientError as exc:
            yield Failure.of(exc, time.perf_counter() - t0)
            return
        body["timeout"], body["extra_headers"] = self.timeouts.backstop(), request_headers(self.url)
        folder = ChunkFolder(self.chat)
        t0 = last = time.perf_counter()
        threading.Thread(target=self._read, args=(body,), name="qc-openai", daemon=True).start()
        ended = False  # the reader is done: nothing to abort
        try:
            while True:
                got = self._next(t0, last)
                if isinstance(got, Failure):
                    yield got
                    return
                ended = not isinstance(got, Arrived) or not self.streaming
                if isinstance(got, Broke):
                    yield Failure.of(api_error(got.error, self.url, lost=bool(folder.arrivals)), got.at - t0)
                    return
                if isinstance(got, Ended):
                    yield folder.reply(self.prompts[0], got.at - t0)
                    return
                if not self.streaming:
                    yield answer(got.data, self.prompts[0], self.chat, got.at - t0)
                    return
                last = got.at
                yield from folder.add(got.data, last - t0)
        finally:
            if not ended:  # cancelled, timed out or abandoned: the server must see the client go
                self._running.abort()

    def _read(self, body: dict[str, Any]) -> None:
        """The reader thread: the request on an event loop of its own, so it can be aborted from any thread,
        which closes its connection at once (streamed or not)."""
        try:
            self._running.run(self._ask(body))
        except asyncio.CancelledError:
            pass  # aborted: the caller has said why already
        except Exception as exc:
            self._arrive(Broke(exc))

    async def _ask(self, body: dict[str, Any]) -> None:
        """Send; hand over each chunk (or the one answer), then the end."""
        import openai

        http = openai.DefaultAsyncHttpxClient(verify=tls())  # the call's own connection, closed with it
        async with openai.AsyncOpenAI(**client_options(self.url), http_client=http) as api:
            endpoint = api.chat.completions if self.chat else api.completions
            answered = await endpoint.create(**body)
            if not self.streaming:
                self._arrive(Arrived(answered))
                return
            async for chunk in answered:
                self._arrive(Arrived(chunk))
            self._arrive(Ended())


def openai_call(url: str, model: str | ModelInfo, prompts: Sequence[str], params: GenerationParams | None = None,
                timeouts: Timeouts | None = None, streaming: bool = True,
                messages: Sequence[Messages] | None = None) -> OpenAICall:
    """A call to an OpenAI-compatible server at ``url`` (``http://host:port/v1``); iterate it for events,
    ``cancel()`` from any thread."""
    return OpenAICall(url, model, prompts, params or GenerationParams(), timeouts or Timeouts(), streaming, messages)
