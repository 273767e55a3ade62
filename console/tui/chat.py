"""The Stream and Batch panes: a conversation, a prompt line, live speed figures and the controls.

Each submit runs in a thread worker: the chat template (history included unless raw mode), then a
``console.clients`` call whose events come back to the pane as messages. ``a|b`` sends two prompts
in one request, each answered in its own block (those turns do not extend the history).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Input, Static

from console.chat import chat_prompts, chat_tokenizer
from console.clients import (
    CANCELLED,
    Call,
    ClientError,
    Event,
    Failure,
    ModelInfo,
    Reply,
    TextDelta,
    Timeouts,
    format_stats,
    infer,
    model_info,
    reply_stats,
    split_prompts,
    stream,
)
from console.clients.events import new_request_id
from console.headless import DEFAULT_IDLE_TIMEOUT, EMBEDDED_DEFAULTS
from console.transcript import Turn

from .controls import Controls, Settings
from .messages import Notice

MODES = {"stream": "gRPC decoupled stream", "batch": "HTTP, one response"}
HINTS = {
    "stream": "Chat over gRPC decoupled streaming: text arrives token by token, with live time to first token, "
              "inter-token latency and tokens/s.",
    "batch": "Chat over HTTP: one response at the end, with the time waited shown meanwhile.",
}
KEY_HINT = ("Enter sends · a|b sends two prompts in one request · Esc stops (on the server too) · Ctrl+Y copies "
            "the last reply · Ctrl+S exports the transcript · Ctrl+P lists every command.\n"
            "No server yet? F2 for the Server pane, then F5 serves the embedded SmolLM2.")


def build_prompts(prompts: list[str], settings: Settings, info: ModelInfo, history: list[dict[str, str]]) -> list[str]:
    """What to send: the prompts as typed (raw mode) or through the chat template after the history."""
    if not settings.chat:
        return list(prompts)
    return chat_prompts(prompts, info, system=settings.system or None, history=history,
                        tokenizer=settings.tokenizer or None)


@dataclass
class Job:
    """A submit in flight; :meth:`cancel` may come before the call exists."""

    turn: Turn
    started: float = field(default_factory=time.perf_counter)
    call: Call | None = None
    cancelled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, call: Call) -> None:
        with self.lock:
            self.call = call
            if self.cancelled:
                call.cancel()

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            if self.call is not None:
                self.call.cancel()


class AnswerBlock(Vertical):
    """One reply: optional prompt header, the text, and its speed figures (live while streaming)."""

    def __init__(self, header: str) -> None:
        super().__init__(classes="answer pending")
        self.header = header
        self.arrivals: list[float] = []
        self.text = ""
        self.finished = False

    def compose(self) -> ComposeResult:
        if self.header:
            yield Static(Content(self.header), classes="answer-header")
        yield Static(Content("…"), classes="answer-body")
        yield Static(Content(""), classes="stats")

    def _set(self, selector: str, text: str) -> None:
        self.query_one(selector, Static).update(Content(text))

    def add(self, delta: TextDelta) -> None:
        self.arrivals.append(delta.time)
        self.text += delta.text
        self._set(".answer-body", self.text)
        self.tick(delta.time)

    def tick(self, elapsed: float) -> None:
        """Live figures: tokens so far, ttft, itl, tok/s (streaming), or the time waited."""
        if self.finished:
            return
        if self.arrivals:
            live = reply_stats(self.arrivals, max(elapsed, self.arrivals[-1]), None)
            self._set(".stats", f"▶ {format_stats(live)}")
        else:
            self._set(".stats", f"… waiting {elapsed:.1f} s · Esc stops")

    def finish(self, reply: Reply, text: str) -> None:
        self.finished = True
        self.remove_class("pending")
        self._set(".answer-body", text or "(empty reply)")
        self.set_class(not reply.ok, "failed")
        self._set(".stats", f"{reply.finish_reason or '?'} · {format_stats(reply.stats)}")

    def fail(self, failure: Failure) -> None:
        self.finished = True
        self.remove_class("pending")
        if not self.text:
            self._set(".answer-body", "(no reply)")
        stopped = failure.kind == CANCELLED
        self.add_class("stopped" if stopped else "failed")
        figures = f"{format_stats(reply_stats(self.arrivals, failure.time, None))} · " if self.arrivals else ""
        self._set(".stats", f"{'■ stopped' if stopped else '✖ ' + failure.kind} · {figures}{failure.message}")


class ChatPane(Horizontal):
    """A chat over one transport: ``mode`` is "stream" (gRPC decoupled) or "batch" (HTTP)."""

    class Sending(Message):
        def __init__(self, job: Job, sent: list[str]) -> None:
            super().__init__()
            self.job, self.sent = job, sent

    class Update(Message):
        def __init__(self, job: Job, event: Event) -> None:
            super().__init__()
            self.job, self.event = job, event

    def __init__(self, mode: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mode = mode
        self.url: str | None = None
        self.models: dict[str, ModelInfo] = {}
        self.turns: list[Turn] = []
        self.history: list[dict[str, str]] = []
        self.job: Job | None = None
        self.blocks: list[AnswerBlock] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="chat-main"):
            yield VerticalScroll(self._hint(), classes="conversation")
            yield Static(classes="status")
            yield Input(placeholder="Message · Enter sends · a|b sends two prompts · Esc stops", classes="prompt")
        yield Controls(classes="controls")

    def _hint(self) -> Static:
        return Static(Content(f"{HINTS[self.mode]}\n{KEY_HINT}"), classes="hint")

    def on_mount(self) -> None:
        self.set_interval(0.1, self._tick)
        self.show_status()

    # ---- connection

    def connect(self, url: str | None, models: dict[str, ModelInfo]) -> None:
        """Use the server at ``url`` (gRPC for stream, HTTP for batch) and offer the models it serves."""
        self.url = url
        self.models = {n: i for n, i in models.items() if self.mode == "stream" or not i.decoupled}
        names = sorted(self.models, key=lambda n: (self.mode == "stream") != self.models[n].decoupled)
        self.controls.set_models(names, EMBEDDED_DEFAULTS[self.mode])
        self.show_status()
        if url and self.models:
            with contextlib.suppress(ClientError):
                self._warm_up(self.controls.settings())

    @work(thread=True, group="warm-up", exclusive=True)
    def _warm_up(self, settings: Settings) -> None:
        """Load the chat template's tokenizer now, not on the first submit (failures show on submit)."""
        info = self.models.get(settings.model)
        if settings.chat and info is not None and (info.embedded or settings.tokenizer):
            with contextlib.suppress(Exception):
                chat_tokenizer(settings.tokenizer or None, info)

    @property
    def controls(self) -> Controls:
        return self.query_one(Controls)

    def show_status(self, extra: str = "") -> None:
        """The line under the conversation: endpoint, mode, hints (or the job's progress)."""
        chat = "chat template" if self.controls.chat else "raw prompt"
        where = self.url or "not connected (F2: Server)"
        text = extra or f"{MODES[self.mode]} · {where} · {chat}"
        self.query_one(".status", Static).update(Content(text))

    # ---- submit

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.has_class("prompt"):
            self.submit(event.value)

    def submit(self, text: str) -> bool:
        """Send ``text`` (``a|b``: several prompts); False with a notice when it cannot go."""
        try:
            if self.job is not None:
                raise ClientError("a reply is still coming: Esc stops it")
            if not text.strip():
                raise ClientError("type a message first")
            prompts = split_prompts(text)
            if not self.url:
                raise ClientError(f"not connected: the {self.mode} pane needs the server's "
                                  f"{'gRPC' if self.mode == 'stream' else 'HTTP'} URL (F2: Server pane)")
            settings = self.controls.settings()
        except ClientError as exc:
            self.post_message(Notice(str(exc), "warning"))
            return False
        request_id = new_request_id()
        params = replace(settings.params, request_id=request_id, exclude_input_in_output=True)  # new text only
        turn = Turn(self.mode, settings.model, prompts, list(prompts), request_id,
                    {k: v for k, v in vars(settings.params).items() if v not in (None, ())})
        self.turns.append(turn)
        self.job = Job(turn)
        self.query_one(".prompt", Input).value = ""
        self._show_turn(turn)
        self._run(self.job, replace(settings, params=params), self.url, list(self.history))
        return True

    def _show_turn(self, turn: Turn) -> None:
        conversation = self.query_one(".conversation", VerticalScroll)
        conversation.query(".hint").remove()
        many = len(turn.prompts) > 1
        self.blocks = [AnswerBlock(f"[{i + 1}/{len(turn.prompts)}] {p}" if many else "")
                       for i, p in enumerate(turn.prompts)]
        user = " | ".join(turn.prompts) if many else turn.prompts[0]
        conversation.mount(Static(Content(f"you › {user}"), classes="user"), *self.blocks)
        conversation.scroll_end(animate=False)

    @work(thread=True, group="chat")
    def _run(self, job: Job, settings: Settings, url: str, history: list[dict[str, str]]) -> None:
        """Worker: template, call, and every event posted back to the pane."""
        try:
            info = self.models.get(settings.model) or model_info(url, settings.model,
                                                                  "grpc" if self.mode == "stream" else "http")
            if self.mode == "batch":
                info.check_batch("use the Stream pane")
            sent = build_prompts(job.turn.prompts, settings, info, history)
            self.post_message(self.Sending(job, sent))
            network = info.network_timeout(settings.timeout)
            call: Call
            if self.mode == "stream":
                call = stream(url, settings.model, sent, settings.params, Timeouts(network, DEFAULT_IDLE_TIMEOUT))
            else:
                call = infer(url, settings.model, sent, settings.params, Timeouts(network), protocol="http")
        except ClientError as exc:
            self.post_message(self.Update(job, Failure(str(exc), exc.kind)))
            return
        except Exception as exc:  # e.g. a chat template that fails: readable, and the pane keeps working
            self.post_message(self.Update(job, Failure(f"{type(exc).__name__}: {exc}", "error")))
            return
        job.attach(call)
        with contextlib.closing(iter(call)) as events:  # closing an unfinished call cancels it
            for event in events:
                self.post_message(self.Update(job, event))

    def on_chat_pane_sending(self, message: Sending) -> None:
        message.job.turn.sent = message.sent
        message.job.started = time.perf_counter()

    def on_chat_pane_update(self, message: Update) -> None:
        job, event = message.job, message.event
        turn = job.turn
        if job is not self.job or turn.done:
            return  # a job of a cleared conversation
        if isinstance(event, TextDelta):
            turn.partial[event.index] = turn.partial.get(event.index, "") + event.text
            self.blocks[event.index].add(event)
        elif isinstance(event, Reply):
            turn.replies[event.index] = event
            self.blocks[event.index].finish(event, turn.text(event.index))
        else:
            turn.failure = event
            for block in self.blocks:
                if not block.finished:
                    block.fail(event)
            self.post_message(Notice(event.message, "warning" if event.kind == CANCELLED else "error"))
        self._follow()
        if turn.done:
            self._finished(turn)

    def _finished(self, turn: Turn) -> None:
        self.job = None
        reply = turn.replies.get(0)
        if len(turn.prompts) == 1 and reply is not None and reply.ok:
            self.history += [{"role": "user", "content": turn.prompts[0]},
                             {"role": "assistant", "content": turn.text(0)}]
        self.show_status()

    def _follow(self) -> None:
        conversation = self.query_one(".conversation", VerticalScroll)
        if conversation.scroll_y >= conversation.max_scroll_y - 3:
            conversation.scroll_end(animate=False)

    def _tick(self) -> None:
        job = self.job
        if job is None:
            return
        elapsed = time.perf_counter() - job.started
        for block in self.blocks:
            block.tick(elapsed)
        verb = "streaming" if self.mode == "stream" else "waiting for the answer"
        self.show_status(f"{verb} from {job.turn.model} · {elapsed:.1f} s · Esc stops")

    # ---- actions the app routes here

    def stop(self) -> bool:
        """Cancel the reply in flight (on the server too for streams); False when idle."""
        if self.job is None:
            return False
        self.job.cancel()
        return True

    def clear(self) -> None:
        """Forget the conversation (display, history and transcript)."""
        if self.job is not None:
            self.job.cancel()
            self.job = None
        self.turns.clear()
        self.history.clear()
        self.blocks = []
        conversation = self.query_one(".conversation", VerticalScroll)
        conversation.remove_children()
        conversation.mount(self._hint())
        self.show_status()

    def last_reply(self) -> str | None:
        """The text of the latest reply (all of them, headed, for ``a|b``)."""
        for turn in reversed(self.turns):
            texts = [turn.text(i) for i in range(len(turn.prompts))]
            if any(texts):
                if len(texts) == 1:
                    return texts[0]
                return "\n\n".join(f"[{i + 1}/{len(texts)}] {t}" for i, t in enumerate(texts))
        return None

    def focus_prompt(self) -> None:
        self.query_one(".prompt", Input).focus()
