"""One request's answer, whole or streamed: :func:`answer` runs a checked job on the model it names, and
:class:`Answer` writes a chat's answer in OpenAI's shapes (:class:`~.completions.Completion` a completion's;
:class:`~.responses.ResponseAnswer` the Responses API's).

A request's model (or an adapter of one: :mod:`.served`) is found and its controls checked against the model's
interface, the chat template applied (:mod:`.tokenizers`), then one streamed request goes upstream. A stream's first
response is awaited before the answer starts, so a refusal still gets its status; later errors end the stream with an
error event. A client that goes away cancels its upstream request: a stream through the framework's disconnect watch, an
answer that is not streamed through :func:`~.wire.unless_gone`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from console.clients import ClientError, GenerationParams, ModelInfo, interface_of, new_request_id

from . import mapping, media
from .completions import Completion
from .errors import APIError, bad_request, from_client_error
from .protocol import Reply, UsageInfo
from .replies import DONE, Shape, finish_reason, sse, usage
from .state import Front
from .toolcalls import Call, Parser, Reader
from .upstream import Generation
from .wire import EventStream, Gone, read_body, unless_gone


class Answer:
    """One request's answer to the client, built from one :class:`Generation`."""

    def __init__(self, front: Front, job: mapping.Job, generation: Generation, parser: Parser | None = None) -> None:
        self.front, self.job, self.generation = front, job, generation
        self.shape = Shape(job)
        self.reader = Reader(job.tools, parser) if job.tools is not None and job.tools.active and parser else None

    async def counts(self) -> UsageInfo:
        """``usage``: the model's counts, else the front's tokenizer's."""
        gen, tokenizers = self.generation, self.front.tokenizers
        prompt = gen.value("input_tokens")
        completion = gen.value("output_tokens")
        if prompt is None and not gen.params.images:  # a prompt with images: only the model can count it
            prompt = await tokenizers.count(gen.info, gen.prompt)
        if completion is None:
            completion = await tokenizers.count(gen.info, gen.text)
        return usage(prompt, completion)

    @property
    def finish(self) -> str:
        reason = finish_reason(self.generation.value("finish_reason"))
        return "tool_calls" if reason == "stop" and self.reader is not None and self.reader.calls else reason

    def read(self, piece: str, last: bool = False) -> tuple[str, list[dict[str, Any]]]:
        """The content of the answer's next ``piece`` (or of its end) and the tool calls' new stream entries."""
        if self.reader is None:
            return piece, []
        return self.reader.end() if last else self.reader.feed(piece)

    async def outcome(self) -> tuple[str, list[Call]]:
        """The whole answer: its content and its tool calls."""
        async for _ in self.generation.pieces():
            pass
        text = (self.generation.prompt if self.job.echo else "") + self.generation.text
        return self.reader.whole(text) if self.reader is not None else (text, [])

    async def whole(self) -> Reply:
        text, calls = await self.outcome()
        return self.shape.whole(text, self.finish, await self.counts(), self.generation.tokens(),
                                [call.openai() for call in calls] or None)

    async def stream(self, request: Request, headers: dict[str, str]) -> Response:
        pieces = self.generation.pieces()
        try:
            first = await unless_gone(request, anext(pieces, None))
        except BaseException:
            await pieces.aclose()
            raise
        return EventStream(self.events(first or "", pieces), headers=headers)

    async def events(self, first: str, pieces: AsyncGenerator[str, None]) -> AsyncGenerator[bytes, None]:
        shape, tokens = self.shape, self.generation.tokens
        try:
            if self.job.echo:
                yield shape.chunk(self.generation.prompt)
            text, calls = self.read(first)
            yield shape.chunk(text, first=True, tokens=tokens(), calls=calls)
            async for piece in pieces:
                new = tokens()
                text, calls = self.read(piece)
                if text or new or calls:
                    yield shape.chunk(text, tokens=new, calls=calls)
            text, calls = self.read("", last=True)
            if text or calls:
                yield shape.chunk(text, calls=calls)
            yield shape.chunk("", finish=self.finish, tokens=tokens())
            if self.job.include_usage:
                yield shape.usage_chunk(await self.counts())
        except APIError as exc:
            yield sse(exc.body())
        finally:
            await pieces.aclose()
        yield DONE


async def with_images(front: Front, job: mapping.Job, info: ModelInfo, params: GenerationParams) -> GenerationParams:
    """``params`` carrying the job's images, loaded and checked, and its messages (the model's server renders them
    with its processor's template); a 400 naming the images' field when the model takes none or an image breaks a
    rule."""
    refusal = interface_of(info).no_images()
    if refusal:
        raise bad_request(refusal, job.media_param)
    images = await media.load(job.images, front.media, front.fetcher, job.media_param)
    return params.replace(chats=True, images=tuple(images))


async def answer(front: Front, request: Request, job: mapping.Job, kind: type[Answer] = Answer) -> Response:
    """``job``'s answer, whole or streamed: a completion, or a chat in the shapes of ``kind``."""
    target = await (front.served.target(job.model) if job.model else front.served.only())
    info, job.model = target.info, target.name
    request_id = new_request_id()
    try:
        interface = interface_of(info)
    except ClientError as exc:
        raise from_client_error(exc, "model") from None
    params = mapping.check_model(job, interface, target.adapter).replace(request_id=request_id)
    if job.chat and job.images:
        params = await with_images(front, job, info, params)
        generation = Generation(front.upstream, info, json.dumps(job.messages), params, info.default_timeout,
                                front.metrics.waiting)
        result: Answer | Completion = kind(front, job, generation)
    elif job.chat:
        prompt = await front.tokenizers.chat_prompt(info, job.messages, job.tools)
        parser = await front.tokenizers.tool_parser(info, front.tool_parser) if job.tools is not None else None
        generation = Generation(front.upstream, info, prompt, params, info.default_timeout, front.metrics.waiting)
        result = kind(front, job, generation, parser)
    else:
        result = Completion(front, job, info, params)
    headers = {"x-request-id": request_id}  # the Triton request's id (its log names it)
    try:
        if job.stream:
            return await result.stream(request, headers)
        return JSONResponse((await unless_gone(request, result.whole())).wire(), headers=headers)
    except Gone:
        return Response(status_code=499)
    except APIError as exc:
        raise mapping.blame(job, exc) from None


def answering(front: Front, path: str, job: Callable[[Any], mapping.Job], kind: type[Answer] = Answer) -> APIRouter:
    """The route ``POST path``: its body read as a job by ``job``, answered by :func:`answer`."""
    routes = APIRouter()

    @routes.post(path)
    async def post(request: Request) -> Response:
        return await answer(front, request, job(await read_body(request)), kind)

    return routes
