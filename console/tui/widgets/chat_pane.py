"""The Stream and Batch panes: a conversation, a prompt line, live per-prompt figures and the pane's controls.

A send is an :class:`~console.core.request.Exchange` run in a thread of the core's: it prepares the request
(model config, chat template with this pane's history) and calls the server; each step is posted back and folded
into the turn on the UI thread, where the pane renders it. ``a|b`` sends two prompts in one request, each answered
in its own block.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Checkbox, Input, Select, Static

from console.clients import BadRequest, Cancelled, ClientError, ModelInfo, split_prompts
from console.core.adapters import DEFAULT, HERE, SERVER, Adapter
from console.core.attachments import read_images
from console.core.controller import Snapshot
from console.core.request import Done, Exchange, Settings, Step
from console.core.template import LOADING, READY, Key, Warmup
from console.core.turns import Turn, last_reply
from console.server.embedded import EMBEDDED_DEFAULTS

from ..messages import Notice, TemplateLoaded, TurnEnded, TurnEvent
from .answer_block import AnswerBlock, elapsed, turn_notes
from .controls import Controls, model_options, offered

SERVER_TEMPLATE = "chat messages (the server applies its chat template)"
HINTS = {
    "stream": "Chat over gRPC streaming: text arrives token by token, with live time to first token, "
              "inter-token latency and tokens/s for each prompt.",
    "batch": "Chat over HTTP: one response per request, with the time waited shown meanwhile.",
}
KEY_HINT = ("Enter sends · a|b sends two prompts in one request · Esc stops (on the server too) · Ctrl+O goes to "
            "this pane's controls · Ctrl+T attaches images to the next message · Ctrl+Y copies the last reply · "
            "Ctrl+S exports · Ctrl+P lists every command.")
ATTACH_HINT = "Image files for the next message (paths; quote one with spaces) · Enter: back to the message"
NO_SERVER = "No server yet? F2 for the Server pane, then F5 serves the embedded SmolLM2."


class ChatPane(Horizontal):
    """A chat over one transport: ``mode`` is "stream" (gRPC) or "batch" (HTTP); its own turns and history."""

    def __init__(self, mode: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.mode = mode
        self.server: Adapter | None = None  # where sends go, while it serves
        self.serving = False
        self.infos: dict[str, ModelInfo] = {}
        self.generation = -1
        self.turns: list[Turn] = []
        self.exchange: Exchange | None = None
        self.blocks: list[AnswerBlock] = []  # the latest turn's
        self.note = Static(classes="turn-note")  # the latest turn's notes (controls not sent, a batch model)
        self.templates = Warmup(on_change=lambda key: self.post_message(TemplateLoaded(key)))

    def compose(self) -> ComposeResult:
        with Vertical(classes="chat-main"):
            yield VerticalScroll(self._hint(), classes="conversation")
            yield Static(classes="status")
            yield Input(placeholder="Message · Enter sends · a|b sends two prompts · Esc stops", classes="prompt")
            attach = Input(placeholder=ATTACH_HINT, classes="attach")
            attach.display = False  # Ctrl+T shows it
            yield attach
        yield Controls(self.mode, classes="controls")

    def on_mount(self) -> None:
        self.set_interval(0.1, self._tick)
        self.show_status()

    @property
    def controls(self) -> Controls:
        return self.query_one(Controls)

    # ---- the server

    def serve(self, snapshot: Snapshot) -> None:
        """Follow the server: its endpoint and, when its models changed, the models this pane offers."""
        self.serving = snapshot.serving
        self.server = snapshot.server if snapshot.serving else None
        if snapshot.generation != self.generation:
            self.generation = snapshot.generation
            self.infos = {n: i for n, i in snapshot.choices.items() if offered(self.mode, i)}
            self.templates.clear()  # other models, maybe other tokenizers (loaded ones come from a cache)
            self.controls.set_models(model_options(self.mode, self.infos), EMBEDDED_DEFAULTS[self.mode])
            self.warm()
        for hint in self.query(".hint").results(Static):
            hint.update(self._hint().content)
        self.show_status()

    def _hint(self) -> Static:
        lines = [HINTS[self.mode], KEY_HINT] + ([] if self.serving and self.infos else [NO_SERVER])
        return Static(Content("\n".join(lines)), classes="hint")

    # ---- the chat template, loaded ahead of the first send

    def _template_side(self) -> str | None:
        """Who applies the chosen model's chat template (None: raw prompts, or no model or server yet)."""
        model = self.controls.model
        if not self.controls.chat or model not in self.infos or self.server is None:
            return None
        return self.server.template_side(self.infos[model], self.controls.tokenizer)

    def _template_key(self) -> Key | None:
        """(model, tokenizer) of a chat template loaded here; None in raw mode and for a server that applies it."""
        return (self.controls.model or "", self.controls.tokenizer) if self._template_side() == HERE else None

    def warm(self) -> None:
        """Load the chat template now (a thread), not while the first reply is awaited."""
        if self._template_key() is not None:
            self.templates.warm(self.infos[self.controls.model or ""], self.controls.tokenizer)
        self.show_status()

    @on(TemplateLoaded)
    def _template_loaded(self, message: TemplateLoaded) -> None:
        message.stop()
        self.show_status()

    def _template_state(self) -> str:
        if not self.controls.chat:
            return "raw prompts (Ctrl+R: chat template)"
        side = self._template_side()
        if side == SERVER:
            return SERVER_TEMPLATE
        if side is not None and side != HERE:
            return f"raw prompts: {self.controls.model} has no chat template here (Tokenizer: a folder with one)"
        key = self._template_key()
        state = self.templates.state(key) if key else None
        if state == LOADING:
            return "preparing: loading the chat template…"
        return "chat template ready" if state == READY else f"chat template: {state}" if state else "chat template"

    @on(Select.Changed, "#model")
    @on(Checkbox.Changed, "#chat")
    @on(Input.Submitted, "#tokenizer")
    def _settings_changed(self) -> None:
        self.warm()

    @on(Input.Submitted, ".controls Input")
    def _control_submitted(self) -> None:
        self.focus_prompt()  # Enter in a control: back to the message

    # ---- status

    def show_status(self, text: str = "") -> None:
        """The line under the conversation: transport, endpoint, model kind, chat template (or the progress)."""
        if not text:
            server = self.server
            try:
                where = server.url(self.mode)[0] if server is not None else "not connected (F2: Server pane)"
            except ClientError as exc:
                where = str(exc)
            parts = [(server or DEFAULT).mode_label(self.mode), where]
            info = self.infos.get(self.controls.model or "")
            if self.mode == "stream" and info is not None and not info.decoupled:
                parts.append(f"{info.name} is a batch model: one response, no ttft/itl")
            text = " · ".join([*parts, self._template_state()])
        self.query_one(".status", Static).update(Content(text))

    # ---- sending

    @on(Input.Submitted, ".prompt")
    def _prompt_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit(event.value)

    # ---- attaching images

    def attach(self) -> None:
        """Show the field of image files for the next message and go to it."""
        field = self.query_one(".attach", Input)
        field.display = True
        field.focus()

    def attached(self) -> list[str]:
        """The image files the next message takes; ClientError when the field cannot be read as paths."""
        try:
            return shlex.split(self.query_one(".attach", Input).value)
        except ValueError as exc:
            raise BadRequest(f"image files: {exc}") from None

    @on(Input.Submitted, ".attach")
    def _attach_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            paths = self.attached()
            read_images(paths)
        except ClientError as exc:
            self.post_message(Notice(str(exc), "warning"))
            return
        if paths:
            self.post_message(Notice(f"the next message takes {', '.join(Path(p).name for p in paths)}"))
        self.focus_prompt()

    def _attachments_sent(self) -> None:
        field = self.query_one(".attach", Input)
        field.value = ""
        field.display = False

    def submit(self, text: str) -> bool:
        """Send ``text`` (``a|b``: several prompts) with the attached images; False with a notice when it cannot
        go."""
        try:
            if self.exchange is not None:
                raise BadRequest("a reply is still coming: Esc stops it")
            if not text.strip():
                raise BadRequest("type a message first")
            prompts = split_prompts(text)
            if self.server is None:
                raise BadRequest(f"not connected: the {self.mode} pane needs a server (F2: Server pane; F5 there "
                                 "serves the embedded SmolLM2)")
            paths = self.attached()
            settings = dataclasses.replace(self.controls.settings(), images=read_images(paths))
        except ClientError as exc:
            self.post_message(Notice(str(exc), "warning"))
            return False
        exchange = Exchange.new(settings, prompts, images=paths)
        self._attachments_sent()
        earlier = list(self.turns)
        self.turns.append(exchange.turn)
        self.exchange = exchange
        self.query_one(".prompt", Input).value = ""
        self._show_turn(exchange.turn)
        self._send(exchange, settings, self.server, earlier, self.infos.get(settings.model))
        return True

    def _send(self, exchange: Exchange, settings: Settings, server: Adapter, earlier: list[Turn],
              info: ModelInfo | None) -> None:
        """The core runs the exchange in its thread; each step is posted back, folded on the UI thread."""
        def posted(step: Step) -> None:
            self.post_message(TurnEnded(exchange) if isinstance(step, Done) else TurnEvent(exchange, step))

        exchange.start(server, settings, earlier, info, posted)

    def _show_turn(self, turn: Turn) -> None:
        conversation = self.query_one(".conversation", VerticalScroll)
        conversation.query(".hint").remove()
        self.blocks = [AnswerBlock(turn, i) for i in range(len(turn.prompts))]
        self.note = Static(classes="turn-note")
        self.note.display = False
        images = f"  [images: {', '.join(Path(p).name for p in turn.images)}]" if turn.images else ""
        conversation.mount(Static(Content(f"you › {' | '.join(turn.prompts)}{images}"), classes="user"), *self.blocks,
                           self.note)  # under the replies: how the turn ended follows what came
        conversation.scroll_end(animate=False)

    def _render_turn(self) -> None:
        preparing = "loading the chat template" if self._template_state().startswith("preparing") else ""
        for block in self.blocks:
            block.show(preparing)
        if self.blocks:
            lines = turn_notes(self.blocks[0].turn)
            self.note.update(Content("\n".join(lines)))
            self.note.display = bool(lines)

    @on(TurnEvent)
    def _turn_event(self, message: TurnEvent) -> None:
        message.stop()
        message.exchange.fold(message.step)
        if message.exchange is self.exchange:
            self._render_turn()
            self._follow()

    @on(TurnEnded)
    def _turn_ended(self, message: TurnEnded) -> None:
        message.stop()
        if message.exchange is not self.exchange:
            return  # a send of a cleared conversation
        self.exchange = None
        self._render_turn()
        self._follow()
        failure = message.exchange.turn.failure
        if failure is not None:
            self.post_message(Notice(failure.message, "warning" if failure.error is Cancelled else "error"))
        self.show_status()

    def _follow(self) -> None:
        conversation = self.query_one(".conversation", VerticalScroll)
        if conversation.scroll_y >= conversation.max_scroll_y - 3:
            conversation.scroll_end(animate=False)

    def _tick(self) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        self._render_turn()
        turn = exchange.turn
        verb = "preparing" if turn.sent_at is None else "streaming from" if self.mode == "stream" else "waiting for"
        self.show_status(f"{verb} {turn.model} · {elapsed(turn):.1f} s · Esc stops")

    # ---- what the app asks of the pane

    def stop(self) -> bool:
        """Stop the reply in flight (on the server too); False when there is none."""
        if self.exchange is None:
            return False
        self.exchange.cancel()
        return True

    def clear(self) -> None:
        """Forget the conversation (display, history and transcript)."""
        if self.exchange is not None:
            self.exchange.cancel()
            self.exchange = None
        self.turns.clear()
        self.blocks = []
        conversation = self.query_one(".conversation", VerticalScroll)
        conversation.remove_children()
        conversation.mount(self._hint())
        self.show_status()

    def last_reply(self) -> str | None:
        return last_reply(self.turns)

    def focus_prompt(self) -> None:
        self.query_one(".prompt", Input).focus()
