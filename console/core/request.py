"""The request pipeline every front end uses: settings -> model info -> prompts -> call.

:func:`prepare` reads the model's config (once per server/model when the caller keeps the info), has the
server's adapter frame the prompts (the chat template applied here, or chat messages for a server that
applies it itself; the history only for a single prompt), picks the timeouts, and returns the call ready to
iterate. Headless, the TUI, the web UI and the bench all send through it, to any kind of server.

A UI's send is an :class:`Exchange`: it runs in a thread of its own and hands each step (:class:`Sent`, every
event, :data:`DONE`) to the UI, which folds it into the turn on its own thread (:meth:`Exchange.fold`): pushed to
a callback (:meth:`Exchange.start`, e.g. Textual's ``post_message``) or pulled frame by frame (:meth:`Exchange.frames`,
e.g. a Gradio generator). A turn is only ever touched by the UI's thread.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from console.clients import (
    BadRequest,
    Call,
    ClientError,
    Event,
    Failure,
    GenerationParams,
    ModelInfo,
    Timeouts,
    Unexpected,
    interface_of,
    new_request_id,
)

from .adapters import HERE, Adapter
from .template import Progress
from .turns import Turn, history

MODES = ("stream", "batch", "generate")
DEFAULT_IDLE_TIMEOUT = 300.0
History = Sequence[dict[str, str]]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Settings:
    """Everything one send needs besides the prompts."""

    model: str
    mode: str = "stream"  # stream: gRPC, token by token; batch: one response; generate: HTTP generate
    protocol: str = "http"  # batch transport (gRPC batch calls can be cancelled on the server)
    params: GenerationParams = field(default_factory=GenerationParams)
    timeout: float | None = None  # whole call, s; None: the model's default (600 KV / 6000 causal); 0: none
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT  # stream: s between responses; None or 0: none
    chat: bool | None = False  # apply the model's chat template; None: when the model has one here
    system: str = ""
    tokenizer: str = ""  # local tokenizer folder for the chat template (embedded models have their own)
    echo: bool = False  # show each prompt before its reply (the wire carries new text only)
    images: tuple[bytes, ...] = ()  # attached to every prompt (each prompt then its own request), encoded as read

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise BadRequest(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name in ("timeout", "idle_timeout"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise BadRequest(f"{name.replace('_', ' ')} must be >= 0 (0 disables), got {value:g}")

    @property
    def templated(self) -> bool | None:
        """The chat template asked for (a system message asks for it), refused, or None: when the model has one."""
        return True if self.system else self.chat


@dataclass
class Prepared:
    """A request ready to go: what is sent, to which model, and the call to iterate."""

    info: ModelInfo
    sent: list[str]
    call: Call
    ignored: list[str]  # set controls this model has no input for (not sent)
    seconds: float  # spent preparing (model config, chat template) before sending
    chat: bool  # the chat template was applied (or the messages sent for the server's)
    notes: list[str] = field(default_factory=list)  # how the controls go out, where a user should know

    @property
    def controls(self) -> dict[str, Any]:
        """The controls as they go out (the console's greedy default where a server samples unless told, and "up to
        the context" as this server understands it)."""
        interface = interface_of(self.info)
        return {k: v for k, v in interface.sent(self.call.params).values.items() if k not in self.ignored}

    def begin(self, turn: Turn) -> None:
        """Record on ``turn`` what goes out (prompts as sent, controls, the model's kind) as the call is sent."""
        turn.sent, turn.ignored, turn.prepare_seconds = self.sent, self.ignored, self.seconds
        turn.chat, turn.decoupled, turn.notes = self.chat, self.info.decoupled, self.notes
        turn.params.update(self.controls)
        turn.sent_at = time.perf_counter()


def params_for(settings: Settings, request_id: str, info: ModelInfo) -> GenerationParams:
    """The wire parameters: the controls, the request id, the images and the LoRA adapter ``info`` was picked as."""
    params = settings.params.replace(request_id=request_id, images=settings.images)
    return params.replace(lora_name=info.adapter) if info.adapter else params


def prepare(server: Adapter, settings: Settings, prompts: Sequence[str], history: History = (),
            info: ModelInfo | None = None, request_id: str | None = None,
            progress: Progress = _quiet) -> Prepared:
    """Everything before the first byte is sent; ClientError when the request cannot be made.

    ``history`` (earlier user/assistant messages) is used only with the chat template and a single
    prompt: ``a|b`` prompts are answered each on their own. Settings that leave the chat template open
    (``chat=None``) apply it when the model has one here (:meth:`Adapter.has_chat_template`).
    """
    t0 = time.perf_counter()
    server.url(settings.mode, settings.protocol)  # the mode is answered there
    info = info or read_info(server, settings)
    interface = interface_of(info)
    if settings.mode != "stream":
        info.check_batch("use stream mode")
    chat = settings.templated
    if chat is None:
        chat = server.has_chat_template(info, settings.tokenizer)
        if not chat:
            progress(f"note: {info.name} has no chat template here (a tokenizer folder gives it one): the prompt "
                     "goes as typed")
    refusal = server.image_refusal(info, settings.mode, chat) if settings.images else ""
    if refusal:
        raise BadRequest(refusal)
    if chat and server.template_side(info, settings.tokenizer) == HERE and not settings.images:
        progress(f"applying the chat template of {info.name} ...")
    framed = server.frame(prompts, info, chat=chat, system=settings.system,
                          tokenizer=settings.tokenizer, history=history if len(prompts) == 1 else (),
                          progress=progress, images=bool(settings.images))
    timeouts = Timeouts(info.network_timeout(settings.timeout),
                        (settings.idle_timeout or None) if settings.mode == "stream" else None)
    params = params_for(settings, request_id or new_request_id(), info)
    call = server.call(settings.mode, settings.protocol, info, framed, params, timeouts)
    return Prepared(info, framed.sent, call, interface.ignored(settings.params), time.perf_counter() - t0, chat,
                    interface.notes(settings.params))


def read_info(server: Adapter, settings: Settings) -> ModelInfo:
    """The model's info from the server, read over the protocol the send uses."""
    return server.model_info(settings.model, settings.mode, settings.protocol)


@dataclass(frozen=True)
class Sent:
    """The request went out: what :meth:`Prepared.begin` records on the turn."""

    prepared: Prepared


class Done:
    """The exchange is over (a failure was handed over before, as an event)."""


DONE = Done()
Step = Sent | Event | Done
Deliver = Callable[[Step], None]


class Exchange:
    """One send from a UI: prepare, call, hand every step to the UI; :meth:`cancel` from any thread, also before the
    call exists (while the chat template loads)."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.call: Call | None = None
        self.cancelled = False
        self._lock = threading.Lock()

    @classmethod
    def new(cls, settings: Settings, prompts: Sequence[str], request_id: str | None = None,
            images: Sequence[str] = ()) -> Exchange:
        """The exchange of ``prompts`` with ``settings``, its turn recording the controls sent (and ``images``, the
        files ``settings.images`` were read from)."""
        recorded = {**settings.params.values, "timeout": settings.timeout}
        if settings.system:
            recorded["system"] = settings.system
        turn = Turn(settings.mode, settings.model, list(prompts), request_id or new_request_id(),
                    chat=bool(settings.templated), params=recorded, echo=settings.echo, images=list(images))
        return cls(turn)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            call = self.call
        if call is not None:
            call.cancel()

    def fold(self, step: Step) -> None:
        """Fold one step into the turn (on the thread that owns the turn)."""
        if isinstance(step, Sent):
            step.prepared.begin(self.turn)
        elif not isinstance(step, Done):
            self.turn.apply(step)

    def run(self, server: Adapter, settings: Settings, earlier: Sequence[Turn] = (),
            info: ModelInfo | None = None, deliver: Deliver | None = None) -> Turn:
        """Send, handing :class:`Sent` and every event to ``deliver`` (default: :meth:`fold`, in this thread)."""
        deliver = deliver or self.fold
        try:
            prepared = prepare(server, settings, self.turn.prompts, history(earlier, settings.mode), info,
                               self.turn.request_id)
        except ClientError as exc:
            events = _failed(exc)
        else:
            deliver(Sent(prepared))
            with self._lock:
                self.call = prepared.call
                if self.cancelled:
                    prepared.call.cancel()
            events = iter(prepared.call)
        with contextlib.closing(events) as stream_:  # closing an unfinished call cancels it
            for event in stream_:
                deliver(event)
        return self.turn

    def start(self, server: Adapter, settings: Settings, earlier: Sequence[Turn], info: ModelInfo | None,
              deliver: Deliver) -> threading.Thread:
        """:meth:`run` in a thread of its own, then :data:`DONE`; whatever the call did not turn into a Failure event
        (a chat template that fails to load ...) is handed over as one."""
        def work() -> None:
            try:
                self.run(server, settings, earlier, info, deliver)
            except Exception as exc:  # the thread's end: readable, and the UI keeps working
                said = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
                deliver(Failure(said, type(exc) if isinstance(exc, ClientError) else Unexpected))
            finally:
                deliver(DONE)

        thread = threading.Thread(target=work, name="qc-exchange", daemon=True)
        thread.start()
        return thread

    def frames(self, server: Adapter, settings: Settings, earlier: Sequence[Turn], info: ModelInfo | None,
               every: float) -> Generator[bool, None, None]:
        """:meth:`start`, folding the steps in the caller's thread: one item at least every ``every`` s while it
        runs (False), then True once it is over. Closing the iterator before the end cancels the exchange."""
        steps: queue.Queue[Step] = queue.Queue()
        self.start(server, settings, earlier, info, steps.put)
        over = False
        try:
            while not over:
                over = self._fold_waiting(steps, every)
                yield over
        finally:
            if not over:
                self.cancel()

    def _fold_waiting(self, steps: queue.Queue[Step], wait: float) -> bool:
        """Fold the steps that come within ``wait`` s (then those already queued); whether DONE came."""
        try:
            step = steps.get(timeout=wait)
        except queue.Empty:
            return False
        while not isinstance(step, Done):
            self.fold(step)
            try:
                step = steps.get_nowait()
            except queue.Empty:
                return False
        return True


def _failed(exc: ClientError) -> Generator[Event, None, None]:
    """The one event of a send that could not be made (a generator: closed as a call's events are)."""
    yield Failure.of(exc)
