"""A fake server at the adapter seam: an :class:`~console.core.adapters.base.Adapter` kind that plays scripted
replies through the real :class:`~console.clients.call.Call` machinery (timeouts, cancel, fan-out), so a front end
cannot tell it from a served model.

The ``fake_server`` fixture (``tests/conftest.py``) registers the kind and gives a :class:`FakeServer`; a front end
reaches it at :attr:`FakeServer.url` (``fake://1``) as it reaches any server by URL. A test queues what the next
request gets (:meth:`FakeServer.enqueue`: text pieces with delays, usage, a failure, a hang) and reads what the
server saw (:attr:`FakeServer.requests`: the prompts as sent, the controls, whether it was cancelled). Without a
script a request gets the default reply: ``max_tokens`` words (16 when unset), ``length``.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import pytest

from console.clients import (
    CONTROLS,
    Call,
    ClientError,
    Event,
    Failure,
    GenerationParams,
    ModelInfo,
    NotServed,
    Reply,
    ServerFault,
    Tensor,
    TextDelta,
    Timeouts,
    Unreachable,
    reply_stats,
)
from console.clients.call import Arrived, Broke, Ended
from console.clients.embeddings import EmbeddingModel, Vectors
from console.core.adapters.base import SERVER, Adapter, Framed, History, Progress, States, quiet
from console.core.template import chat_messages, chat_prompts
from console.server.embedded import EMBEDDED_DEFAULTS

SCHEME = "fake://"
HANG_LIMIT = 600.0  # s a hang waits for a cancel before it gives up (no test waits that long)
WORDS = ("Once", "upon", "a", "time", "a", "fake", "model", "answered", "every", "prompt", "with", "the", "same")


def bundled_info(name: str, decoupled: bool = True, use_kv_cache: bool = True) -> ModelInfo:
    """A model with the bundled backend's interface (``prompt``, ``stream`` and every offered control in; text,
    finish reason and token counts out), named as an embedded sample so the embedded tokenizer gives it a chat
    template."""
    inputs = (Tensor("prompt", "BYTES"), Tensor("stream", "BOOL", (1,), True),
              *(Tensor(c.name, c.datatype, (-1,) if c.multiple else (1,), True) for c in CONTROLS))
    outputs = tuple(Tensor(n, t) for n, t in (("text_output", "BYTES"), ("finish_reason", "BYTES"),
                                              ("input_tokens", "INT32"), ("output_tokens", "INT32")))
    return ModelInfo(name, decoupled, use_kv_cache, "embedded", inputs=inputs, outputs=outputs)


def with_images(info: ModelInfo) -> ModelInfo:
    """``info`` as the bundled backend's image-text-to-text model: its ``task``, its ``messages`` and ``images``
    inputs."""
    return dataclasses.replace(info, inputs=(*info.inputs, Tensor("messages", "BYTES", (-1,), True),
                                             Tensor("images", "BYTES", (-1,), True)),
                               parameters={**info.parameters, "task": "image_text_to_text"})


def plain_info(name: str, decoupled: bool = False) -> ModelInfo:
    """A model with only ``prompt`` in and ``text_output`` out, and no chat template here (no tokenizer known)."""
    return ModelInfo(name, decoupled, True, inputs=(Tensor("prompt", "BYTES"),),
                     outputs=(Tensor("text_output", "BYTES"),))


def embedding_info(name: str = "minilm", sizes: str = "8,4", max_seq_len: int = 16, batch: int = 4) -> ModelInfo:
    """A model with the bundled backend's embedding interface (``text`` or ``token_ids`` in; ``embedding`` and
    ``input_tokens`` out), normalising, cut to any of ``sizes``, at most ``batch`` inputs a request."""
    return ModelInfo(name, False, None, inputs=(Tensor("text", "BYTES", (1,), True),
                                                Tensor("token_ids", "BYTES", (1,), True)),
                     outputs=(Tensor("embedding", "FP32", (-1,)), Tensor("input_tokens", "INT32", (1,))),
                     max_batch_size=batch, parameters={"task": "embedding", "normalize": "true", "dimensions": sizes,
                                                       "max_seq_len": str(max_seq_len), "pooling": "mean"})


def fake_vector(item: str | list[int], size: int = 8) -> list[float]:
    """A fake model's unit vector for a text (its characters counted in ``size`` bins) or token ids (the same for
    the ids): alike inputs get alike vectors."""
    counts = [0.0] * size
    for unit in item:
        counts[(ord(unit) if isinstance(unit, str) else unit) % size] += 1.0
    norm = sum(c * c for c in counts) ** 0.5 or 1.0
    return [c / norm for c in counts]


def fake_tokens(item: str | list[int]) -> int:
    """A fake model's token count: a text's words, or its ids."""
    return len(item.split()) if isinstance(item, str) else len(item)


def with_adapters(info: ModelInfo, *adapters: str, max_loras: int | None = None) -> ModelInfo:
    """``info`` serving these LoRA adapters (each in ``adapters/<name>``, as the generator writes them) through its
    ``lora_name`` input."""
    folders = json.dumps({name: f"adapters/{name}" for name in adapters})
    parameters = {**info.parameters, "lora_adapters": folders,
                  **({"max_loras": str(max_loras)} if max_loras is not None else {})}
    lora_name = Tensor("lora_name", "BYTES", (1,), True)
    return replace(info, parameters=parameters, inputs=(*info.inputs, lora_name))


# --------------------------------------------------------------------------- what a request gets


@dataclass(frozen=True)
class Piece:
    """Text for prompt ``index``, sent ``after`` s after the previous step."""

    text: str
    index: int = 0
    after: float = 0.0


@dataclass(frozen=True)
class Fail:
    """The server (or the connection) fails the request ``after`` s after the previous step."""

    message: str
    error: type[ClientError] = ServerFault
    after: float = 0.0


@dataclass(frozen=True)
class Hang:
    """The server goes quiet: nothing more comes until the request is cancelled."""


@dataclass(frozen=True)
class Gate:
    """The server holds the rest of the answer until the test opens the gate: a wait that no timing decides."""

    opened: threading.Event = field(default_factory=threading.Event, compare=False)


Step = Piece | Fail | Hang | Gate


@dataclass(frozen=True)
class Script:
    """One request's answer: its steps, then each prompt's finish reason and usage (None: the pieces counted)."""

    steps: tuple[Step, ...]
    finish: tuple[str, ...] = ("length",)
    output_tokens: tuple[int | None, ...] | None = None
    input_tokens: int | None = None


def reply(*pieces: str, every: float = 0.0, finish: str = "length", output_tokens: int | None = None) -> Script:
    """A one-prompt answer: ``pieces`` of text ``every`` s apart."""
    return Script(tuple(Piece(p, 0, every) for p in pieces), (finish,), (output_tokens,))


def replies(*answers: Sequence[str], every: float = 0.0, finish: Sequence[str] = ()) -> Script:
    """An ``a|b`` answer: each prompt's pieces, interleaved one step each (a prompt whose pieces ran out is done)."""
    steps = [Piece(p, i, every) for row in itertools.zip_longest(*answers) for i, p in enumerate(row) if p is not None]
    return Script(tuple(steps), tuple(finish) or ("length",) * len(answers))


def failure(message: str, error: type[ClientError] = ServerFault, after: float = 0.0, *pieces: str) -> Script:
    """``pieces`` of text, then the request fails with ``message`` (``error``: ServerFault, Unreachable ...)."""
    return Script((*(Piece(p) for p in pieces), Fail(message, error, after)))


def gated(gate: Gate, script: Script) -> Script:
    """``script`` held back before its first step until ``gate`` opens."""
    return replace(script, steps=(gate, *script.steps))


def hang(*pieces: str, every: float = 0.0) -> Script:
    """``pieces`` of text, then silence until cancelled (a stuck server; the call's timeouts and Stop end it)."""
    return Script((*(Piece(p, 0, every) for p in pieces), Hang()))


def default_script(prompts: Sequence[str], params: GenerationParams) -> Script:
    """``max_tokens`` words per prompt (16 when unset, 0: 16), a few ms apart: ``length``."""
    count = params.get("max_tokens") or 16
    words = [(" " if i else "") + WORDS[i % len(WORDS)] for i in range(count)]
    return replies(*([words] * len(prompts)), every=0.002, finish=["length"] * len(prompts))


# --------------------------------------------------------------------------- what the server saw


@dataclass
class Request:
    """One request as the fake server saw it."""

    model: str
    mode: str
    prompts: list[str]  # as sent (after a chat template applied by the client)
    params: GenerationParams
    messages: list[list[dict[str, str]]] | None  # the chat messages, when the server applies the template
    cancelled: threading.Event = field(default_factory=threading.Event)  # the client cancelled it on the server
    ended: threading.Event = field(default_factory=threading.Event)  # answered in full or failed by the server

    @property
    def request_id(self) -> str:
        return self.params.request_id or ""


class FakeServer:
    """What the fake adapter reaches: its models, the scripts to play and every request it received."""

    _ids = itertools.count(1)

    def __init__(self, models: Sequence[ModelInfo] | None = None, server_template: bool = False) -> None:
        self.name = str(next(self._ids))
        self.url = f"{SCHEME}{self.name}"
        self.models = {m.name: m for m in models or (bundled_info("smollm2_decoupled"),
                                                     bundled_info("smollm2_kv", decoupled=False),
                                                     bundled_info("smollm2_causal", False, use_kv_cache=False))}
        self.server_template = server_template  # it applies the chat template (chat sends messages)
        self.reachable = True
        self.requests: list[Request] = []
        self.embedded: list[tuple[str, list[str]]] = []  # each embed call's model and texts
        self._scripts: collections.deque[Script] = collections.deque()
        self._lock = threading.Condition()

    def serve(self, *models: ModelInfo) -> None:
        """Serve ``models`` too."""
        self.models.update({m.name: m for m in models})

    def enqueue(self, *scripts: Script) -> None:
        """What the next requests get, in order (then the default reply)."""
        self._scripts.extend(scripts)

    def receive(self, request: Request) -> Script:
        with self._lock:
            self.requests.append(request)
            self._lock.notify_all()
        return self._scripts.popleft() if self._scripts else default_script(request.prompts, request.params)

    def request(self, request_id: str) -> Request:
        """The request with ``request_id``; AssertionError when the server never saw it."""
        found = [r for r in self.requests if r.request_id == request_id]
        assert found, f"the fake server saw no request {request_id} (saw {[r.request_id for r in self.requests]})"
        return found[0]

    def saw_cancel(self, request_id: str, timeout: float = 10.0) -> bool:
        """Whether the client cancelled ``request_id`` on the server (waits up to ``timeout`` s for it)."""
        return self.request(request_id).cancelled.wait(timeout)

    def wait_requests(self, count: int, timeout: float = 10.0) -> list[Request]:
        """The requests once ``count`` have come; AssertionError after ``timeout`` s."""
        with self._lock:
            assert self._lock.wait_for(lambda: len(self.requests) >= count, timeout), self.requests
            return list(self.requests)

    def check(self) -> None:
        if not self.reachable:
            raise Unreachable(f"cannot reach the fake server at {self.url}: connection refused")


# --------------------------------------------------------------------------- the call and the adapter


class FakeCall(Call):
    """A request to the fake server: the script is played by a reader thread into the call's queue; the waiting,
    the timeouts and the cancel are :class:`Call`'s own."""

    protocol = "fake"

    def __init__(self, server: FakeServer, mode: str, info: ModelInfo, framed: Framed, params: GenerationParams,
                 timeouts: Timeouts) -> None:
        super().__init__(server.url, info, framed.sent, params, timeouts)
        self.server, self.mode, self.messages = server, mode, framed.messages

    def part(self, index: int) -> FakeCall:
        clone = super().part(index)
        assert isinstance(clone, FakeCall)
        if self.messages is not None:
            clone.messages = [self.messages[index]]
        return clone

    def _request(self) -> Iterator[Event]:
        request = Request(self.model, self.mode, self.prompts, self.params, self.messages)
        t0 = last = time.perf_counter()
        try:
            self.server.check()
            script = self.server.receive(request)
        except ClientError as exc:
            yield Failure.of(exc, time.perf_counter() - t0)
            return
        threading.Thread(target=self._play, args=(script, request), name="qc-fake-reader", daemon=True).start()
        streamed = self.mode == "stream" and bool(self.info and self.info.decoupled)
        texts, arrivals = [""] * len(self.prompts), [[] for _ in self.prompts]
        try:
            while True:
                got = self._next(t0, last)
                if isinstance(got, Failure):
                    yield got
                    return
                if isinstance(got, Broke):
                    error = got.error
                    yield Failure(str(error), type(error) if isinstance(error, ClientError) else ServerFault,
                                  got.at - t0)
                    return
                if isinstance(got, Ended):
                    yield from self._replies(script, texts, arrivals, got.at - t0, streamed)
                    return
                last = got.at
                piece: Piece = got.data
                arrivals[piece.index].append(last - t0)
                texts[piece.index] += piece.text
                if streamed:
                    yield TextDelta(piece.index, piece.text, last - t0, len(arrivals[piece.index]) == 1)
        finally:
            if not request.ended.is_set():
                request.cancelled.set()  # what the real calls do as they end: cancel the request on the server

    def _play(self, script: Script, request: Request) -> None:
        """The server's side: each step after its delay, unless the request was cancelled meanwhile."""
        for step in script.steps:
            if isinstance(step, Gate):
                step.opened.wait(HANG_LIMIT)
                continue
            wait = HANG_LIMIT if isinstance(step, Hang) else step.after
            if request.cancelled.wait(wait) or self.cancelled:
                return
            if isinstance(step, Fail):
                request.ended.set()
                self._arrive(Broke(step.error(step.message)))
                return
            self._arrive(Arrived(step))
        request.ended.set()
        self._arrive(Ended())

    def _replies(self, script: Script, texts: list[str], arrivals: list[list[float]], latency: float,
                 streamed: bool) -> Iterator[Reply]:
        counts = script.output_tokens or (None,) * len(self.prompts)
        for i, prompt in enumerate(self.prompts):
            finish = script.finish[i] if i < len(script.finish) else script.finish[-1]
            count = counts[i] if i < len(counts) else None
            tokens = len(arrivals[i]) if count is None else count
            yield Reply(i, prompt, texts[i], finish,
                        reply_stats(arrivals[i], latency, tokens, script.input_tokens, streamed=streamed))


def registered(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    """``server`` reachable at its URL by every front end until ``monkeypatch`` undoes it (the kind registered)."""
    from console.core import adapters

    monkeypatch.setitem(adapters.KINDS, FakeAdapter.kind, FakeAdapter)
    monkeypatch.setitem(FakeAdapter.servers, server.name, server)
    return server


class FakeAdapter(Adapter):
    """The fake server at ``fake://<name>``: the servers are the ones the ``fake_server`` fixture made."""

    kind = "fake"
    label = "Fake"
    name = "the fake server"
    modes = ("stream", "batch", "generate")
    rule = "a fake:// URL is the tests' fake server"
    servers: ClassVar[dict[str, FakeServer]] = {}

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.http_url = server.url
        self.server_template = server.server_template

    @classmethod
    def claims(cls, url: str) -> bool:
        return url.startswith(SCHEME)

    @classmethod
    def at(cls, url: str, grpc_url: str | None = None) -> FakeAdapter:
        server = cls.servers.get(url.removeprefix(SCHEME))
        if server is None:
            raise ClientError(f"no fake server at {url}")
        return cls(server)

    def url(self, mode: str, protocol: str = "http") -> tuple[str, str]:
        self.check_mode(mode)
        return self.server.url, "fake"

    def addresses(self) -> list[tuple[str, str]]:
        return [(self.label, self.server.url)]

    @classmethod
    def mode_label(cls, mode: str) -> str:
        return f"fake {mode}"

    def describe(self, timeout: float = 5.0) -> str:
        self.server.check()
        return f"the fake server at {self.server.url}"

    def connect(self, timeout: float = 3.0) -> str:
        return f"connected to {self.describe(timeout)}"

    def model_states(self, timeout: float = 5.0) -> States:
        if not self.server.reachable:
            raise OSError("connection refused")
        return {name: ("READY", "") for name in self.server.models}

    def model_info(self, model: str, mode: str = "stream", protocol: str = "http", timeout: float = 10.0) -> ModelInfo:
        self.server.check()
        if model not in self.server.models:
            picked = self.adapter_info(model, mode, protocol, timeout)  # a LoRA adapter, as tritonserver's kind
            if picked is not None:
                return picked
            raise NotServed(f"model {model!r} is not served at {self.server.url}: it serves "
                            f"{', '.join(self.server.models)}")
        return self.server.models[model]

    def listed_info(self, model: str) -> ModelInfo:
        return self.server.models[model]

    def default_model(self, mode: str) -> str:
        return EMBEDDED_DEFAULTS[mode]

    def frame(self, prompts: Sequence[str], info: ModelInfo, *, chat: bool, system: str, tokenizer: str,
              history: History, progress: Progress = quiet, images: bool = False) -> Framed:
        if not chat:
            return Framed(list(prompts), list(prompts))
        if self.template_side(info, tokenizer) == SERVER or images:  # as the Triton adapter decides
            messages = chat_messages(prompts, system=system or None, history=history)
            return Framed(list(prompts), [str(m) for m in messages], messages)
        return Framed(list(prompts), chat_prompts(prompts, info, system=system or None, history=history,
                                                  tokenizer=tokenizer or None, progress=progress))

    def call(self, mode: str, protocol: str, info: ModelInfo, framed: Framed, params: GenerationParams,
             timeouts: Timeouts) -> Call:
        return FakeCall(self.server, mode, info, framed, params, timeouts)

    def embed(self, model: str, texts: Sequence[str], timeout: float | None, info: ModelInfo | None = None) -> Vectors:
        """:func:`fake_vector` of each text from an embedding model (kept in :attr:`FakeServer.embedded`)."""
        embedding = EmbeddingModel.required(info or self.model_info(model))
        embedding.check(texts)
        self.server.embedded.append((model, list(texts)))
        counts = [fake_tokens(t) for t in texts] if embedding.tokens else None
        return np.array([fake_vector(t) for t in texts], dtype=np.float32), counts
