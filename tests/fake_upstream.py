"""A fake upstream for the OpenAI front (:class:`~console.front.protocol.Upstream`): served models, their context
lengths and a metrics page, and scripted responses played through the front's real
:class:`~console.front.upstream.Generation`, so the app's routes cannot tell it from a tritonserver.

A model may serve LoRA adapters (:func:`fake_server.with_adapters`). A test queues what the next request gets
(:meth:`FakeUpstream.enqueue`: responses' outputs, a model's error after them, a hang) and reads what it was sent
(:attr:`FakeUpstream.sent`: the prompts and controls, whether the request was closed before its end) and the adapters it
was told to serve (:attr:`FakeUpstream.changes`). Without a script a
request gets :func:`answer` ("Hello world", ``length``, 3 + 2 tokens). :func:`client` drives an app through
``httpx.ASGITransport``, its lifespan included.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from fake_server import bundled_info, fake_tokens, fake_vector, with_images

from console.clients import GenerationParams, ModelInfo, NotServed, Tensor
from console.front.app import create_app
from console.front.errors import APIError, ModelError, from_client_error
from console.front.state import Front
from console.front.tokenizers import Tokenizers

Outputs = dict[str, Any]
WIRED = (Tensor("logprobs", "INT64", (1,), True), Tensor("structured_outputs", "BYTES", (1,), True))
Step = Outputs | Exception | asyncio.Event  # an Event: wait for it (a hang until it is set)


def answer(*pieces: str, finish: str = "length", n: int = 1, input_tokens: int | None = 3,
           logprobs: Sequence[Sequence[dict[str, Any]]] | None = None) -> list[Step]:
    """Each piece a response for each of ``n`` prompts; the last carries the finish reason and the counts (output
    tokens: one per piece). ``logprobs``: each piece's entries."""
    steps: list[Step] = [{"text_output": [piece] * n} for piece in pieces]
    for step, entries in zip(steps, logprobs or ()):
        step["logprobs"] = [list(entries)] * n
    last = steps[-1] if steps else {"text_output": [""] * n}
    last.update(finish_reason=[finish] * n, input_tokens=[input_tokens] * n if input_tokens is not None else None,
                output_tokens=[len(pieces)] * n)
    return steps if steps else [last]


def full_info(name: str) -> ModelInfo:
    """The bundled backend's model as it is served: also its ``logprobs`` and ``structured_outputs`` inputs and its
    ``logprobs`` output."""
    info = bundled_info(name)
    return dataclasses.replace(info, inputs=(*info.inputs, *WIRED),
                               outputs=(*info.outputs, Tensor("logprobs", "BYTES", (-1,))))


def image_info(name: str) -> ModelInfo:
    """The bundled backend's image-text-to-text model as it is served."""
    return with_images(full_info(name))


@dataclass
class Sent:
    """One request the upstream was sent: its model, prompts and controls; ``closed``: it was left before its end."""

    model: str
    prompts: list[str]
    params: GenerationParams
    closed: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)  # its responses ended, however


class FakeUpstream:
    """Served ``models`` (the bundled interface's ``smollm2`` by default: the embedded tokenizer's template)."""

    url = "fake-triton:8001"

    def __init__(self, *models: ModelInfo, lengths: dict[str, int] | None = None) -> None:
        self.infos = {m.name: m for m in models or (bundled_info("smollm2"),)}
        self.lengths = dict(lengths or {})
        self.alive = True
        self.page: str | None = None
        self.scripts: collections.deque[list[Step]] = collections.deque()
        self.sent: list[Sent] = []
        self.received = asyncio.Event()  # a request was sent
        self.closed = False
        self.embedded: list[list[str | list[int]]] = []  # each embed call's items
        self.refusal: Exception | None = None  # what the next embed call raises
        self.changes: list[tuple[str, dict[str, str]]] = []  # each set_adapters call's model and adapters
        self.reload_refusal: APIError | None = None  # what the next set_adapters call raises

    def enqueue(self, *scripts: list[Step]) -> None:
        self.scripts.extend(scripts)

    async def close(self) -> None:
        self.closed = True

    async def live(self) -> bool:
        return self.alive

    async def ready(self) -> list[str]:
        if not self.alive:
            raise APIError(503, f"tritonserver at {self.url} does not answer")
        return sorted(self.infos)

    async def models(self) -> list[ModelInfo]:
        return [self.infos[name] for name in await self.ready()]

    async def info(self, model: str) -> ModelInfo:
        if model not in self.infos:
            raise from_client_error(NotServed(f"model {model[:60]!r} is not served here"))
        return self.infos[model]

    async def context_length(self, model: str) -> int | None:
        return self.lengths.get(model)

    async def metrics_page(self) -> str | None:
        return self.page

    async def responses(self, info: ModelInfo, prompts: list[str], params: GenerationParams,
                        timeout: float | None) -> AsyncGenerator[Outputs, None]:
        sent = Sent(info.name, prompts, params)
        self.sent.append(sent)
        self.received.set()
        script = self.scripts.popleft() if self.scripts else answer("Hello", " world", n=len(prompts))
        try:
            for step in script:
                if isinstance(step, asyncio.Event):
                    await step.wait()
                elif isinstance(step, Exception):
                    raise step
                else:
                    yield step
        except (GeneratorExit, asyncio.CancelledError):
            sent.closed = True
            raise
        finally:
            sent.done.set()


    async def embed(self, info: ModelInfo, items: list[str | list[int]],
                    timeout: float | None) -> tuple[np.ndarray, list[int] | None]:
        """:func:`fake_vector` of each item and :func:`fake_tokens` (an embedding model's tokens, if it sends them),
        or the queued :attr:`refusal`."""
        self.embedded.append(items)
        refusal, self.refusal = self.refusal, None
        if refusal is not None:
            raise refusal
        counts = [fake_tokens(item) for item in items] if info.output("input_tokens") else None
        return np.array([fake_vector(item) for item in items], dtype=np.float32), counts


    async def set_adapters(self, model: str, adapters: dict[str, str]) -> None:
        """``model`` serves ``adapters`` from now on (recorded in :attr:`changes`), or the queued
        :attr:`reload_refusal` is raised and nothing changes."""
        self.changes.append((model, dict(adapters)))
        refusal, self.reload_refusal = self.reload_refusal, None
        if refusal is not None:
            raise refusal
        info = self.infos[model]
        self.infos[model] = dataclasses.replace(info, parameters={**info.parameters,
                                                                  "lora_adapters": json.dumps(adapters)})


def hang(*pieces: str) -> list[Step]:
    """Responses for ``pieces``, then a wait that only a cancel ends."""
    return [*({"text_output": [p]} for p in pieces), asyncio.Event()]


def failure(message: str, *pieces: str, refused: bool | None = True) -> list[Step]:
    """Responses for ``pieces``, then the model's error ``message`` with what its code says (``refused``: the
    request's fault; False: the model's own; None: no code, as from a tritonserver older than 2.68)."""
    return [*({"text_output": [p]} for p in pieces), ModelError(message, refused)]


@contextlib.asynccontextmanager
async def client(upstream: FakeUpstream, api_key: str | None = None, tokenizers: Sequence[str] = (),
                 **front: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the front's app on ``upstream`` (the app's lifespan runs around it); ``front``: the other
    fields of its :class:`Front` (``media``, ``fetcher``, ``runtime_lora``)."""
    app = create_app(Front(upstream, api_key, Tokenizers(tokenizers), **front))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://front") as http:
            yield http


def events(text: str) -> list[Any]:
    """The data of a server-sent event stream, ``[DONE]`` as the string."""
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:])
            for line in text.splitlines() if line.startswith("data: ")]


def call(upstream: FakeUpstream, method: str, path: str, api_key: str | None = None, **kwargs: Any) -> httpx.Response:
    """One request to a new app on ``upstream`` (``kwargs``: httpx's, e.g. ``json``)."""

    async def one() -> httpx.Response:
        async with client(upstream, api_key) as http:
            return await http.request(method, path, **kwargs)

    return asyncio.run(one())


def post(upstream: FakeUpstream, path: str, body: Any) -> httpx.Response:
    return call(upstream, "POST", path, json=body)


def error(response: httpx.Response) -> tuple[int, str | None, str | None]:
    """An OpenAI error's status, ``param`` and ``code`` (the message must say something)."""
    body = response.json()["error"]
    assert body["message"] and body["type"]
    return response.status_code, body["param"], body["code"]


@contextlib.contextmanager
def front_on(upstream: FakeUpstream) -> Iterator[Any]:
    """The front on ``upstream``, served over loopback for the block (its ``base_url``: ``http://.../v1``)."""
    from console.front.http_server import FrontServer
    from console.server import free_port

    front = FrontServer(Front(upstream), "127.0.0.1", free_port())
    front.start()
    try:
        yield front
    finally:
        front.stop()
