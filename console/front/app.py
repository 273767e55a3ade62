"""The OpenAI-compatible app (FastAPI): ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``,
``/v1/responses`` (:mod:`.responses`), ``/health``,
``/version``, ``/metrics`` (:mod:`.metrics_route`) and vLLM's tokenizer routes (:mod:`.tokenize_routes`), in front of
one tritonserver.

A request is read and checked (:mod:`.mapping`), its model's config read (once) and its controls checked against
the model's interface, the chat template applied (:mod:`.tokenizers`), then one streamed request goes to Triton
(:mod:`.upstream`). A stream's first response is awaited before the answer starts, so a refusal still gets its
status; later errors end the stream with an error event. A client that goes away cancels its Triton request:
a stream through the framework's disconnect watch, an answer that is not streamed through :func:`unless_gone`.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from console.clients import CONTROLS, ModelInfo, interface_of, new_request_id
from console.clients.openai_api import FRONT as OWNER  # ``owned_by``: how a console recognises this front

from . import mapping
from .completions import Completion
from .errors import APIError
from .metrics_route import FrontMetrics, Measured, render
from .replies import DONE, Shape, finish_reason, sse, usage
from .tokenize_routes import Lengths, tokenize_router
from .tokenizers import Tokenizers
from .toolcalls import Call, Parser, Reader
from .upstream import Generation, Upstream
from .wire import EventStream, Gone, read_body, unless_gone

VERSION = metadata.version("qaic-console")


@dataclass
class Front:
    """What the app serves: the Triton server's gRPC endpoint, the API key (None: none asked), the tokenizers and
    Triton's metrics page (None: not known)."""

    triton_url: str
    api_key: str | None = None
    tokenizers: Tokenizers = field(default_factory=Tokenizers)
    metrics_url: str | None = None
    tool_parser: str | None = None  # --tool-call-parser: the format of every model's tool calls (None: its template's)
    upstream: Upstream = field(init=False)
    metrics: FrontMetrics = field(init=False)
    lengths: Lengths = field(init=False)

    def __post_init__(self) -> None:
        self.upstream = Upstream(self.triton_url)
        self.metrics = FrontMetrics()
        self.lengths = Lengths(self.metrics_url)


class Answer:
    """One request's answer to the client, built from one :class:`Generation`."""

    def __init__(self, front: Front, job: mapping.Job, generation: Generation, parser: Parser | None = None) -> None:
        self.front, self.job, self.generation = front, job, generation
        self.shape = Shape(job)
        self.reader = Reader(job.tools, parser) if job.tools is not None and job.tools.active and parser else None

    async def counts(self) -> dict[str, int | None]:
        """``usage``: the model's counts, else the front's tokenizer's."""
        gen, tokenizers = self.generation, self.front.tokenizers
        prompt = gen.value("input_tokens")
        completion = gen.value("output_tokens")
        if prompt is None:
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

    async def whole(self) -> dict[str, Any]:
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


def create_app(front: Front) -> FastAPI:
    """The app serving ``front``."""
    from . import responses  # its answers are Answers

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await front.upstream.close()

    app = FastAPI(title="qaic-console OpenAI-compatible API", version=VERSION, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(Measured, metrics=front.metrics)

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        error = APIError(exc.status_code, str(exc.detail))
        return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)

    async def authorize(request: Request) -> None:
        if front.api_key is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), front.api_key.encode()):
            raise APIError(401, "a valid API key is needed: send it as 'Authorization: Bearer <key>'",
                           code="invalid_api_key")

    @app.get("/health")
    async def health() -> Response:
        if not await front.upstream.live():
            raise APIError(503, f"tritonserver at {front.triton_url} does not answer")
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"server": OWNER, "version": VERSION, "api": "openai"}

    @app.get("/metrics")
    async def metrics() -> Response:
        try:
            served: set[str] | None = set(await front.upstream.ready())
        except APIError:
            served = None
        page, kind = await render(front.metrics, front.metrics_url, served)
        return Response(page, media_type=kind)

    app.include_router(tokenize_router(front, [Depends(authorize)]))
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorize)])

    @v1.get("/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card(info, await front.lengths.of(info.name))
                                           for info in await front.upstream.models()]}

    @v1.get("/models/{model:path}")
    async def model(model: str) -> dict[str, Any]:
        info = await front.upstream.info(model)
        return model_card(info, await front.lengths.of(info.name))

    async def answer(request: Request, job: mapping.Job, kind: type[Answer] = Answer) -> Any:
        """``job``'s answer, whole or streamed: a completion, or a chat in the shapes of ``kind``."""
        info = await front.upstream.named(job.model)
        job.model = info.name
        request_id = new_request_id()
        params = mapping.check_model(job, interface_of(info)).replace(request_id=request_id)
        if job.chat:
            prompt = await front.tokenizers.chat_prompt(info, job.messages, job.tools)
            parser = await front.tokenizers.tool_parser(info, front.tool_parser) if job.tools is not None else None
            generation = front.upstream.generate(info, prompt, params, info.default_timeout)
            result: Answer | Completion = kind(front, job, generation, parser)
        else:
            result = Completion(front, job, info, params)
        headers = {"x-request-id": request_id}  # the Triton request's id (its log names it)
        try:
            if job.stream:
                return await result.stream(request, headers)
            return JSONResponse(await unless_gone(request, result.whole()), headers=headers)
        except Gone:
            return Response(status_code=499)
        except APIError as exc:
            raise mapping.blame(job, exc) from None

    @v1.post("/completions")
    async def completions(request: Request) -> Any:
        return await answer(request, mapping.parse(await read_body(request), chat=False))

    @v1.post("/embeddings")
    async def embeddings() -> Response:
        raise APIError(404, "/v1/embeddings is not served here: it needs an embedding model (one that returns vectors, "
                       "e.g. vLLM or Text Embeddings Inference serving one), and the models this front serves generate "
                       "text", "model", "model_not_found")

    @v1.post("/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await answer(request, mapping.parse(await read_body(request), chat=True))

    @v1.post("/responses")
    async def create_response(request: Request) -> Any:
        return await answer(request, responses.job(await read_body(request)), responses.ResponseAnswer)

    app.include_router(v1)
    return app


def model_card(info: ModelInfo, max_model_len: int | None = None) -> dict[str, Any]:
    """A model as ``/v1/models`` lists it, with its context length (vLLM's ``max_model_len``; None: not known) and the
    controls it takes (the fields of the same names)."""
    interface = interface_of(info)
    return {"id": info.name, "object": "model", "created": 0, "owned_by": OWNER, "max_model_len": max_model_len,
            "controls": [c.name for c in CONTROLS if interface.wire_input(c) is not None]}
