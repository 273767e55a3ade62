"""The adapter protocol: what a front end may ask of a server, whatever its kind.

An :class:`Adapter` is one server at its address. It owns the URL rules, the model listing and states, the
capabilities (modes, chat template side, what the consoles say about it), the request it builds for a send
and how a send that went quiet is checked. Front ends hold an adapter and ask it; they never branch on a kind.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from console.clients import (
    BadRequest,
    Call,
    ClientError,
    GenerationParams,
    ModelInfo,
    NotServed,
    Timeouts,
    Unreachable,
    interface_of,
)
from console.clients.embeddings import EmbeddingModel, Vectors
from console.clients.params import MESSAGES

from ..template import embedded_here

SERVER, HERE, NONE = "server", "here", "none"  # who applies a model's chat template (:meth:`Adapter.template_side`)
States = dict[str, tuple[str, str]]  # model -> (state, reason)
Messages = list[dict[str, str]]
History = Sequence[dict[str, str]]
Progress = Callable[[str], None]


def quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Framed:
    """The prompts as typed and as they go out: ``sent`` is the text each prompt is sent as (after a chat template
    applied here); ``messages``, one conversation per prompt, when the server applies the chat template itself."""

    prompts: list[str]
    sent: list[str]
    messages: list[Messages] | None = None


class Adapter(ABC):
    """One server, reached at its address; every front end talks to it through these methods."""

    kind: ClassVar[str]  # the registry's key (``--api``)
    label: ClassVar[str]  # a short name for tables and status lines
    name: ClassVar[str]  # the server in a sentence ("tritonserver")
    modes: ClassVar[tuple[str, ...]]  # the send modes it answers
    server_template: ClassVar[bool] = False  # it applies the model's chat template (ask :meth:`template_side`)
    note: ClassVar[str] = ""  # what the consoles say about a server of this kind reached by URL
    rule: ClassVar[str] = ""  # the URLs :meth:`claims`, in words

    http_url: str | None = None  # where it answers HTTP (an OpenAI-compatible server: its base URL)
    grpc_url: str | None = None
    metrics_url: str | None = None  # its Prometheus metrics page, when known (given, or the server was started here)

    @classmethod
    def claims(cls, url: str) -> bool:
        """Whether ``url`` names a server of this kind when ``--api`` is ``auto``."""
        return False

    @classmethod
    @abstractmethod
    def at(cls, url: str, grpc_url: str | None = None) -> Adapter:
        """The server ``url`` (and ``grpc_url``, where the kind has one) names; ClientError on a bad URL."""

    # ---- where it answers

    @abstractmethod
    def url(self, mode: str, protocol: str = "http") -> tuple[str, str]:
        """(url, protocol) a send of ``mode`` goes to; ClientError naming what is missing."""

    @abstractmethod
    def addresses(self) -> list[tuple[str, str]]:
        """(label, address) rows for a status pane."""

    def metrics(self) -> tuple[str | None, str]:
        """Where its Prometheus metrics page is (None: it has none) and, when that is a guess, the guess in words."""
        return self.metrics_url, "" if self.metrics_url else f"{self.name} has no metrics page known here"

    def title(self) -> str:
        """Where it answers, in one line."""
        return " · ".join(f"{label} {address}" for label, address in self.addresses())

    @classmethod
    @abstractmethod
    def mode_label(cls, mode: str) -> str:
        """How a send of ``mode`` travels, in a few words ("gRPC stream")."""

    # ---- what it serves

    @abstractmethod
    def describe(self, timeout: float = 5.0) -> str:
        """What the server is, in one line (its version where it says one); ClientError when it does not answer."""

    @abstractmethod
    def connect(self, timeout: float = 3.0) -> str:
        """Check that the server answers; the line a console says on connecting. ClientError when it does not."""

    @abstractmethod
    def model_states(self, timeout: float = 5.0) -> States:
        """Every model it knows with its state; OSError when the server does not answer."""

    @abstractmethod
    def model_info(self, model: str, mode: str = "stream", protocol: str = "http", timeout: float = 10.0) -> ModelInfo:
        """What a send of ``mode`` needs to know of ``model`` (read over the protocol the send uses); ClientError
        when it is not served."""

    @abstractmethod
    def listed_info(self, model: str) -> ModelInfo:
        """A model :meth:`model_states` listed, as the model rows show it (read as cheaply as the kind allows);
        OSError or ValueError when it cannot be read."""

    def adapter_info(self, adapter: str, mode: str = "stream", protocol: str = "http",
                     timeout: float = 10.0) -> ModelInfo | None:
        """The info of the READY model that serves the LoRA adapter named ``adapter``, picked as it (adapter names are
        unique on a server), for a kind that serves adapters through their model; None when no model serves it."""
        try:
            ready = sorted(name for name, (state, _) in self.model_states(timeout).items() if state == "READY")
        except (OSError, ValueError):
            return None
        for name in ready:
            with contextlib.suppress(OSError, ClientError, ValueError):
                if adapter in self.listed_info(name).adapters:
                    return replace(self.model_info(name, mode, protocol, timeout), adapter=adapter)
        return None

    @abstractmethod
    def default_model(self, mode: str) -> str:
        """The model a send of ``mode`` goes to when none is named."""

    # ---- its model repository

    def repository(self) -> Path | None:
        """The folder it loads its models from, when that can be known here (None: it cannot)."""
        return None

    def load_model(self, model: str) -> None:
        """Load ``model`` from its repository; OSError saying why it cannot."""
        raise OSError(f"{self.name} loads no model on request")

    # ---- sending

    def template_side(self, info: ModelInfo | None = None, tokenizer: str = "") -> str:
        """Who applies ``info``'s chat template to a chat send: SERVER (chat messages are sent: the server applies
        templates, or the model takes ``messages`` and no tokenizer of it is here), HERE (a tokenizer here renders the
        prompt: a tokenizer folder is given, or the model is the embedded one and its package is installed), or NONE
        (it has none here: the prompt goes as typed). Without ``info``: SERVER, or HERE when the server does not apply
        it."""
        if self.server_template:
            return SERVER
        if info is None or tokenizer or (info.embedded and embedded_here()):
            return HERE
        if info.input(MESSAGES) is not None:
            return SERVER
        return HERE if info.embedded else NONE  # the embedded one without its package: the send says what to install

    def has_chat_template(self, info: ModelInfo, tokenizer: str) -> bool:
        """Whether a chat send can use ``info``'s chat template (applied here or by the server)."""
        return self.template_side(info, tokenizer) != NONE

    def check_mode(self, mode: str) -> None:
        """ClientError when this server does not answer ``mode``."""
        if mode not in self.modes:
            raise BadRequest(f"{mode} mode is not answered by {self.name}: it answers {' or '.join(self.modes)} "
                             "mode")

    def image_refusal(self, info: ModelInfo, mode: str, chat: bool) -> str:
        """Why images cannot go with a send of ``mode`` to ``info`` ("" when they can): the model takes none, they do
        not travel in ``mode``, or no conversation with images is rendered for it."""
        interface = interface_of(info)
        if interface.no_images():
            return interface.no_images()
        if mode == "generate":
            return "images do not go over the generate endpoint (JSON): send them in stream or batch mode"
        if chat and info.input(MESSAGES) is None:
            return (f"model {info.name} ({interface.name}) renders no conversation with images here: send the "
                    "prompt --raw, with the model's image placeholder where the image goes")
        return ""

    @abstractmethod
    def frame(self, prompts: Sequence[str], info: ModelInfo, *, chat: bool, system: str, tokenizer: str,
              history: History, progress: Progress = quiet, images: bool = False) -> Framed:
        """The prompts as they go out, with the chat template when ``chat`` (``history`` before a single prompt);
        ``images``: images go with them (a model that renders conversations gets its messages)."""

    @abstractmethod
    def call(self, mode: str, protocol: str, info: ModelInfo, framed: Framed, params: GenerationParams,
             timeouts: Timeouts) -> Call:
        """The call that sends ``framed`` to the model; iterate it for events."""

    # ---- embeddings

    def embedding_model(self) -> str:
        """The embedding model a request for vectors that names none goes to: the first one served; ClientError when
        none is (or the server does not answer)."""
        try:
            ready = sorted(name for name, (state, _) in self.model_states().items() if state == "READY")
        except OSError as exc:
            raise Unreachable(f"{self.name} does not answer: {exc}") from None
        for name in ready:
            try:
                if EmbeddingModel.of(self.listed_info(name)) is not None:
                    return name
            except (OSError, ValueError):
                continue
        raise NotServed(f"{self.name} serves no embedding model (served: {', '.join(ready) or 'none'}): name one "
                        "with --model")

    def embed(self, model: str, texts: Sequence[str], timeout: float | None, info: ModelInfo | None = None) -> Vectors:
        """The vectors of ``texts`` from the embedding model ``model`` (one row each) and each text's tokens (None:
        not sent); ``info``: the model's, already read (a bench's requests read it once); ClientError (Refused: the
        model's refusal, e.g. a text over its length)."""
        raise BadRequest(f"{self.name} answers no embeddings here")
