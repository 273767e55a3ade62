"""Triton Inference Server: HTTP and gRPC endpoints, the repository's model states, client-side chat templates.

The URL rule: both endpoints when both are given; a lone address is asked once, when the adapter is made, which
protocol it speaks (an HTTP request to a gRPC port gets no HTTP answer), and the other endpoint is Triton's
neighbour (gRPC = HTTP + 1), said as guessed. Its accessors (``url``, ``addresses``, ``metrics``, ``handle``)
then only read what it holds: no network, no change.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
from collections.abc import Sequence
from pathlib import Path

from console.clients import (
    BadRequest,
    Call,
    ClientError,
    GenerationParams,
    ModelInfo,
    NotServed,
    Timeouts,
    generate,
    infer,
    info_from_config,
    model_info,
    normalize_url,
    stream,
)
from console.clients.call import Probe
from console.clients.embeddings import EmbeddingModel, Vectors, triton_embed
from console.clients.errors import Unreachable
from console.clients.failures import answers_http, error_message
from console.clients.params import MESSAGES
from console.clients.status import ask_status
from console.server.health import ServerHandle
from console.server.keys import key_for
from console.server.ports import listening_at

from ..template import chat_messages, chat_prompts
from .base import SERVER, Adapter, Framed, History, Progress, States, quiet

MODE_LABELS = {"stream": "gRPC stream", "batch": "HTTP batch", "generate": "HTTP generate"}


def neighbour(url: str, step: int) -> str:
    """``host:port`` with the port moved by ``step`` (Triton's defaults: HTTP 8000, gRPC 8001)."""
    host, _, port = url.rpartition(":")
    if not port.isdigit() or not 0 < int(port) + step < 65536:
        raise BadRequest(f"{url}: give the server's other endpoint too (its port cannot be guessed)")
    return f"{host}:{int(port) + step}"


def unreachable(url: str, exc: BaseException) -> Unreachable:
    """The one line for a server that does not answer HTTP at ``url``."""
    return Unreachable(error_message(exc, url, "http"))


def speaks_http(url: str, timeout: float = 3.0) -> bool:
    """Whether ``url`` answers HTTP (a gRPC port answers an HTTP request with no HTTP); ClientError when nothing
    answers there at all."""
    try:
        return answers_http(url, timeout)
    except OSError as exc:
        raise unreachable(url, exc) from None


class TritonAdapter(Adapter):
    """A tritonserver at its HTTP and gRPC endpoints (``host:port``)."""

    kind = "triton"
    label = "Triton"
    name = "tritonserver"
    modes = ("stream", "batch", "generate")
    note = "Connected to a tritonserver started elsewhere: its log is not shown here."

    def __init__(self, http_url: str | None = None, grpc_url: str | None = None, metrics_url: str | None = None,
                 key: str = "", guessed: str = "") -> None:
        self.http_url, self.grpc_url, self.metrics_url = http_url, grpc_url, metrics_url
        self._key = key  # the restricted APIs' key of a server started here
        self.guessed = guessed  # the endpoint guessed as Triton's neighbour, said on connecting (in brackets)

    @classmethod
    def at(cls, url: str, grpc_url: str | None = None) -> TritonAdapter:
        """``url`` alone (either endpoint: asked which, :meth:`lone`) or ``url`` as HTTP beside ``grpc_url``."""
        if grpc_url and grpc_url.strip():
            return cls(normalize_url(url), normalize_url(grpc_url)) if url.strip() else cls.grpc_only(grpc_url)
        return cls.lone(normalize_url(url))

    @classmethod
    def lone(cls, address: str) -> TritonAdapter:
        """An address asked once which protocol it speaks; the other endpoint is its neighbour. Unreachable when
        nothing answers there."""
        if speaks_http(address):
            grpc = neighbour(address, 1)
            return cls(address, grpc, guessed=f"gRPC guessed at {grpc}, the HTTP port + 1: give it if streaming fails")
        http = neighbour(address, -1)
        return cls(http, address, guessed=f"{address} is the gRPC endpoint; HTTP guessed at {http}, the gRPC port - 1")

    @classmethod
    def grpc_only(cls, grpc_url: str) -> TritonAdapter:
        """Only the gRPC endpoint given: HTTP is its neighbour below."""
        grpc = normalize_url(grpc_url)
        http = neighbour(grpc, -1)
        return cls(http, grpc, guessed=f"HTTP guessed at {http}, the gRPC port - 1")

    @classmethod
    def of(cls, handle: ServerHandle) -> TritonAdapter:
        """The server a :class:`ServerHandle` reaches (one started here: its ports and key are known)."""
        return cls(handle.http_url, handle.grpc_url, handle.metrics_url, key=handle.key)

    @property
    def handle(self) -> ServerHandle:
        return ServerHandle(self.http_url or "", self.grpc_url, self.metrics_url,
                            self._key or key_for(self.http_url or ""))

    def url(self, mode: str, protocol: str = "http") -> tuple[str, str]:
        self.check_mode(mode)
        grpc = mode == "stream" or (mode == "batch" and protocol == "grpc")
        url, name = (self.grpc_url, "gRPC") if grpc else (self.http_url, "HTTP")
        if not url:
            raise BadRequest(f"{mode} mode needs the server's {name} endpoint (host:port)")
        return url, "grpc" if grpc else "http"

    def metrics(self) -> tuple[str | None, str]:
        """The metrics port given or known (a server started here), else Triton's neighbour: the HTTP port + 2."""
        if self.metrics_url:
            return self.metrics_url, ""
        if not self.http_url:
            return None, "no HTTP endpoint to guess the metrics port from"
        host, _, port = self.http_url.rpartition(":")
        if not port.isdigit() or int(port) + 2 >= 65536:
            return None, "the metrics port cannot be guessed"
        return (f"http://{host}:{int(port) + 2}/metrics",
                "guessed at the HTTP port + 2, Triton's default layout")

    def addresses(self) -> list[tuple[str, str]]:
        rows = [("HTTP", self.http_url or "-"), ("gRPC", self.grpc_url or "-")]
        return rows + ([("metrics", self.metrics_url)] if self.metrics_url else [])

    @classmethod
    def mode_label(cls, mode: str) -> str:
        return MODE_LABELS[mode]

    def version(self, timeout: float = 5.0) -> str:
        """The server's version (with what an older server cannot do); ClientError when it does not answer HTTP."""
        handle = self.handle
        try:
            return handle.describe_version(timeout=timeout)
        except http.client.HTTPException as exc:
            raise Unreachable(error_message(exc, handle.http_url, "http")) from None
        except (OSError, ValueError) as exc:
            raise self._with_guess(unreachable(handle.http_url, exc)) from None

    def _with_guess(self, exc: ClientError) -> ClientError:
        """A connection error that also says which endpoint was guessed (the guess may be what is wrong)."""
        if isinstance(exc, Unreachable) and self.guessed:
            return Unreachable(f"{exc} ({self.guessed})")
        return exc

    def describe(self, timeout: float = 5.0) -> str:
        return f"tritonserver {self.version(timeout)} at {self.http_url}"

    def connect(self, timeout: float = 3.0) -> str:
        guessed = f" ({self.guessed})" if self.guessed else ""
        return f"connected to tritonserver {self.version(timeout)}{guessed}"

    def model_states(self, timeout: float = 5.0) -> States:
        try:
            return self.handle.model_states()
        except http.client.HTTPException as exc:  # not HTTP there
            raise OSError(f"{self.http_url} does not answer HTTP ({type(exc).__name__})") from None
        except urllib.error.URLError as exc:
            raise OSError(str(exc.reason)) from None

    def model_info(self, model: str, mode: str = "stream", protocol: str = "http", timeout: float = 10.0) -> ModelInfo:
        """``model``'s, or, for a LoRA adapter a model serves, that model's picked as the adapter."""
        url, protocol = self.url(mode, protocol)
        try:
            return model_info(url, model, protocol, timeout=timeout)
        except NotServed as exc:
            picked = self.adapter_info(model, mode, protocol, timeout)
            if picked is None:
                raise self._with_guess(exc) from None
            return picked
        except ClientError as exc:
            raise self._with_guess(exc) from None

    def listed_info(self, model: str) -> ModelInfo:
        return info_from_config(model, self.handle.model_config(model))

    def repository(self) -> Path | None:
        """The folder a tritonserver of this machine at this loopback address was started on (its command line)."""
        server = listening_at(self.http_url or "")
        return Path(server.repository) if server is not None and server.repository else None

    def load_model(self, model: str) -> None:
        self.handle.load_model(model)

    def default_model(self, mode: str) -> str:
        """The embedded sample for ``mode`` when the server serves it, else the first READY model that answers
        ``mode`` (generate: one answer, as batch); the sample when none does or the server does not say (the send
        then names what it serves)."""
        from console.server.embedded import EMBEDDED_DEFAULTS

        preferred = EMBEDDED_DEFAULTS[mode]
        try:
            ready = sorted(name for name, (state, _) in self.model_states().items() if state == "READY")
        except (OSError, ClientError, ValueError):
            return preferred
        answer = "stream" if mode == "stream" else "batch"
        for name in sorted(ready, key=lambda name: name != preferred):
            try:
                info = self.listed_info(name)
                if answer in info.modes and EmbeddingModel.of(info) is None:
                    return name
            except (OSError, ClientError, ValueError):
                continue
        return preferred

    def embed(self, model: str, texts: Sequence[str], timeout: float | None, info: ModelInfo | None = None) -> Vectors:
        """Over HTTP, the model's batch a request (:func:`~console.clients.embeddings.triton_embed`)."""
        info = info or self.model_info(model, "batch", "http")
        return triton_embed(self.url("batch", "http")[0], EmbeddingModel.required(info), texts, timeout)

    def frame(self, prompts: Sequence[str], info: ModelInfo, *, chat: bool, system: str, tokenizer: str,
              history: History, progress: Progress = quiet, images: bool = False) -> Framed:
        if not chat:
            return Framed(list(prompts), list(prompts))
        if self.template_side(info, tokenizer) == SERVER or (images and info.input(MESSAGES) is not None):
            # the model renders the conversations (its messages input; with images, its processor's template)
            messages = chat_messages(prompts, system=system or None, history=history)
            return Framed(list(prompts), [json.dumps(m, ensure_ascii=False) for m in messages], messages)
        return Framed(list(prompts), chat_prompts(prompts, info, system=system or None, history=history,
                                   tokenizer=tokenizer or None, progress=progress))

    def call(self, mode: str, protocol: str, info: ModelInfo, framed: Framed, params: GenerationParams,
             timeouts: Timeouts) -> Call:
        url, protocol = self.url(mode, protocol)
        if framed.messages is not None:
            params = params.replace(chats=True)
        probe = dead_backend_probe(info, mode)
        if mode == "stream":
            return stream(url, info, framed.sent, params, timeouts, probe)
        if mode == "batch":
            return infer(url, info, framed.sent, params, timeouts, protocol=protocol, probe=probe)
        return generate(url, info, framed.sent, params, timeouts, probe)


def dead_backend_probe(info: ModelInfo, mode: str) -> Probe | None:
    """How a send that went quiet tells a slow model from a dead one: the bundled backend answers ``status_of``
    (a stream only from a decoupled model: a batch model's one answer comes at its end); other backends cannot
    be asked."""
    if info.input("status_of") is None or (mode == "stream" and not info.decoupled):
        return None
    return ask_status
