"""The request pipeline every front end uses: settings -> model info -> prompts -> call.

:func:`prepare` reads the model's config (once per :class:`Endpoint`/model when the caller keeps
the info), applies the chat template (the history only for a single prompt), picks the timeouts
and the inputs the model declares, and returns the call ready to iterate. Headless, the TUI, the
web UI and the bench all send through it.

An endpoint is a Triton server's (HTTP and gRPC) or an OpenAI-compatible server's (its base URL
``http://host:port/v1``). The pipeline is the same for both; with an OpenAI-compatible server the
chat template is the server's: chat mode sends the messages (system, history, prompt) instead.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from console.clients import (
    OPENAI,
    TRITON,
    Call,
    ClientError,
    Event,
    Failure,
    GenerationParams,
    ModelInfo,
    Timeouts,
    generate,
    infer,
    interface_of,
    model_info,
    new_request_id,
    openai_call,
    stream,
)
from console.clients.openai_api import OpenAIServer, base_url, resolve_api

from .template import Progress, chat_messages, chat_prompts
from .turns import Turn, history

MODES = ("stream", "batch", "generate")
DEFAULT_IDLE_TIMEOUT = 300.0
History = Sequence[dict[str, str]]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Endpoint:
    """Where the server answers: a Triton server's HTTP and gRPC ``host:port`` (either may be unknown), or
    an OpenAI-compatible server's base URL in ``http_url`` (``api`` openai)."""

    http_url: str | None = None
    grpc_url: str | None = None
    api: str = TRITON

    @classmethod
    def at(cls, url: str, api: str = "auto", grpc_url: str | None = None) -> Endpoint:
        """The server ``url`` names: an OpenAI-compatible one when it ends with ``/v1`` (or ``api`` says so),
        else Triton at ``url`` for both protocols (gRPC at ``grpc_url`` when given)."""
        if resolve_api(url, api) == OPENAI:
            return cls(base_url(url), None, OPENAI)
        return cls(url, grpc_url or url)

    @property
    def kind(self) -> str:
        """What the UIs call the server: ``OpenAI`` or ``Triton``."""
        return "OpenAI" if self.api == OPENAI else "Triton"

    def url(self, mode: str, protocol: str = "http") -> tuple[str, str]:
        """(url, protocol) a mode needs; ClientError naming the missing endpoint."""
        if self.api == OPENAI:
            if mode not in ("stream", "batch"):
                raise ClientError(f"{mode} mode is Triton's: an OpenAI-compatible server answers stream or batch mode")
            if not self.http_url:
                raise ClientError("no OpenAI-compatible server: give its base URL (http://host:port/v1)")
            return self.http_url, OPENAI
        grpc = mode == "stream" or (mode == "batch" and protocol == "grpc")
        url, name = (self.grpc_url, "gRPC") if grpc else (self.http_url, "HTTP")
        if not url:
            raise ClientError(f"{mode} mode needs the server's {name} endpoint (host:port)")
        return url, "grpc" if grpc else "http"


@dataclass(frozen=True)
class Settings:
    """Everything one send needs besides the prompts."""

    model: str
    mode: str = "stream"  # stream: gRPC, token by token; batch: one response; generate: HTTP generate
    protocol: str = "http"  # batch transport (gRPC batch calls can be cancelled on the server)
    params: GenerationParams = field(default_factory=GenerationParams)
    timeout: float | None = None  # whole call, s; None: the model's default (600 KV / 6000 causal); 0: none
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT  # stream: s between responses; None or 0: none
    chat: bool = False  # apply the model's chat template
    system: str = ""
    tokenizer: str = ""  # local tokenizer folder for the chat template (embedded models have their own)
    echo: bool = False  # batch: the reply starts with the prompt (exclude_input_in_output=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ClientError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name in ("timeout", "idle_timeout"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ClientError(f"{name.replace('_', ' ')} must be >= 0 (0 disables), got {value:g}")

    @property
    def templated(self) -> bool:
        return self.chat or bool(self.system)


@dataclass
class Prepared:
    """A request ready to go: what is sent, to which model, and the call to iterate."""

    info: ModelInfo
    sent: list[str]
    call: Call
    ignored: list[str]  # set controls this model has no input for (not sent)
    seconds: float  # spent preparing (model config, chat template) before sending


def params_for(settings: Settings, request_id: str) -> GenerationParams:
    """The wire parameters: the controls, the echo choice (streams send new text only) and the id."""
    exclude = True if settings.mode == "stream" else not settings.echo
    return settings.params.replace(exclude_input_in_output=exclude, request_id=request_id)


def prepare(endpoint: Endpoint, settings: Settings, prompts: Sequence[str], history: History = (),
            info: ModelInfo | None = None, request_id: str | None = None,
            progress: Progress = _quiet) -> Prepared:
    """Everything before the first byte is sent; ClientError when the request cannot be made.

    ``history`` (earlier user/assistant messages) is used only with the chat template and a single
    prompt: ``a|b`` prompts are answered each on their own.
    """
    t0 = time.perf_counter()
    url, protocol = endpoint.url(settings.mode, settings.protocol)
    openai = protocol == OPENAI
    info = info or read_info(endpoint, settings)
    interface = interface_of(info)
    if settings.mode != "stream":
        info.check_batch("use stream mode")
    sent = list(prompts)
    earlier = history if len(prompts) == 1 else ()
    messages = None
    if settings.templated and openai:  # the server applies its chat template to the messages
        messages = chat_messages(prompts, system=settings.system or None, history=earlier)
        sent = [json.dumps(m, ensure_ascii=False) for m in messages]
    elif settings.templated:
        sent = chat_prompts(prompts, info, system=settings.system or None, history=earlier,
                            tokenizer=settings.tokenizer or None, progress=progress)
    timeouts = Timeouts(info.network_timeout(settings.timeout),
                        (settings.idle_timeout or None) if settings.mode == "stream" else None)
    params = params_for(settings, request_id or new_request_id())
    call: Call
    if openai:
        call = openai_call(url, info, prompts, params, timeouts, settings.mode == "stream", messages)
    elif settings.mode == "stream":
        call = stream(url, info, sent, params, timeouts)
    elif settings.mode == "batch":
        call = infer(url, info, sent, params, timeouts, protocol=protocol)
    else:
        call = generate(url, info, sent, params, timeouts)
    return Prepared(info, sent, call, interface.ignored(settings.params), time.perf_counter() - t0)


def read_info(endpoint: Endpoint, settings: Settings) -> ModelInfo:
    """The model's config from the server: Triton's model config, or an OpenAI-compatible server's model list."""
    url, protocol = endpoint.url(settings.mode, settings.protocol)
    if protocol == OPENAI:
        return OpenAIServer(url).model_info(settings.model)
    return model_info(url, settings.model, protocol)


def default_model(endpoint: Endpoint, mode: str) -> str:
    """The model a send goes to when none is named: the first an OpenAI-compatible server lists, the
    embedded sample of ``mode`` on Triton."""
    if endpoint.api == OPENAI:
        return OpenAIServer(endpoint.url(mode)[0]).model_info().name
    from console.server.embedded import EMBEDDED_DEFAULTS

    return EMBEDDED_DEFAULTS[mode]


class Exchange:
    """One send from a UI: prepare, call, fold every event into the turn; :meth:`cancel` from any thread,
    also before the call exists (while the chat template loads)."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.call: Call | None = None
        self.cancelled = False
        self._lock = threading.Lock()

    @classmethod
    def new(cls, settings: Settings, prompts: Sequence[str], request_id: str | None = None) -> Exchange:
        """The exchange of ``prompts`` with ``settings``, its turn recording the controls sent."""
        recorded = {**settings.params.values, "timeout": settings.timeout}
        if settings.system:
            recorded["system"] = settings.system
        turn = Turn(settings.mode, settings.model, list(prompts), request_id or new_request_id(),
                    chat=settings.templated, params=recorded)
        return cls(turn)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            call = self.call
        if call is not None:
            call.cancel()

    def run(self, endpoint: Endpoint, settings: Settings, earlier: Sequence[Turn] = (),
            info: ModelInfo | None = None, on_event: Callable[[Event], None] | None = None) -> Turn:
        """Send and fold every event into the turn (``on_event`` sees each one too); the turn."""
        turn = self.turn
        try:
            prepared = prepare(endpoint, settings, turn.prompts, history(earlier, settings.mode), info,
                               turn.request_id)
        except ClientError as exc:
            events: Iterable[Event] = [Failure(str(exc), exc.kind)]
        else:
            turn.sent, turn.ignored, turn.prepare_seconds = prepared.sent, prepared.ignored, prepared.seconds
            turn.sent_at = time.perf_counter()
            with self._lock:
                self.call = prepared.call
                if self.cancelled:
                    prepared.call.cancel()
            events = prepared.call
        with contextlib.closing(iter(events)) as stream_:  # closing an unfinished call cancels it
            for event in stream_:
                turn.apply(event)
                if on_event is not None:
                    on_event(event)
        return turn
