"""What the page's events do.

One :class:`WebConsole` per app: the :class:`ServerController` every browser tab shares, the
exchange each tab is running (so Stop, another event, can cancel it) and the chat templates loaded
ahead of the first message. A message goes through the core's :class:`Exchange`, whose steps the
message's generator folds into the turn frame by frame; :mod:`.views` renders it. Chat state (the turns) is
per tab.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import gradio as gr

from console.clients import BadRequest, ClientError, split_prompts
from console.core.adapters import HERE, NONE
from console.core.attachments import read_images
from console.core.controller import ServerController, Snapshot
from console.core.controls import settings_from_form
from console.core.embeddings import embed
from console.core.request import Exchange, Settings
from console.core.template import LOADING, READY, Warmup
from console.core.transcript import export
from console.core.turns import Turn

from . import views
from .files import private_folder
from .server_tab import ServerTab

NO_TEMPLATE = "none here: prompts go as typed (a tokenizer folder gives one)"
TEMPLATE_STATES = {LOADING: "loading …", READY: "ready"}  # else: not loaded, and why
FRAME_S = 0.1  # a running message refreshes the page at most this often
POLL_S = 1.0  # the server is polled at most this often, whatever the number of tabs
ChatFrame = tuple[Any, Any, Any, Any]  # chatbot, turns, live panel, input box
EMPTY_BOX = {"text": "", "files": []}  # the multimodal box once its message is sent


class Running:
    """The exchange each browser tab is running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_tab: dict[str, Exchange] = {}

    def begin(self, tab: str, exchange: Exchange) -> None:
        """Make ``exchange`` the tab's; ClientError while the tab's last one is still running."""
        with self._lock:
            if tab in self._by_tab:
                raise BadRequest("a reply is still coming: Stop ends it")
            self._by_tab[tab] = exchange

    def end(self, tab: str, exchange: Exchange) -> None:
        with self._lock:
            if self._by_tab.get(tab) is exchange:
                del self._by_tab[tab]

    def cancel(self, tab: str) -> bool:
        """Cancel the tab's exchange (also before its call exists); False when none runs."""
        with self._lock:
            exchange = self._by_tab.get(tab)
        if exchange is not None:
            exchange.cancel()
        return exchange is not None


class WebConsole:
    """The page's handlers on one server controller."""

    def __init__(self, controller: ServerController, folder: Path | None = None) -> None:
        self.controller, self.running, self.templates = controller, Running(), Warmup()
        self.server = ServerTab(controller)
        self.folder = folder or private_folder()  # the transcripts and Gradio's copies: see :mod:`.files`
        self.export_dir = self.folder / "transcripts"
        self._poll_lock = threading.Lock()
        self._polled = 0.0
        self._warmed = -1

    # ---- chat

    def send(self, tab: str, message: str | Mapping[str, Any], turns: list[Turn],
             form: Mapping[str, Any]) -> Iterator[ChatFrame]:
        """Send the message (``a|b``: several prompts; the multimodal box's ``{"text", "files"}``: with its images);
        frames of its progress until it ends."""
        text, files = (message, []) if isinstance(message, str) else (message.get("text") or "", [
            f if isinstance(f, str) else f["path"] for f in message.get("files") or ()])
        yield from self._checked(tab, lambda: (split_prompts(text), turns), form, message, images=files)

    def retry(self, tab: str, turns: list[Turn], form: Mapping[str, Any]) -> Iterator[ChatFrame]:
        """Send the last message's prompts again with the current controls, in its place."""
        def last() -> tuple[list[str], list[Turn]]:
            if not turns:
                raise BadRequest("nothing to retry yet")
            return turns[-1].prompts, turns[:-1]

        yield from self._checked(tab, last, form, gr.skip(), images=turns[-1].images if turns else [])

    def _checked(self, tab: str, what: Callable[[], tuple[list[str], list[Turn]]], form: Mapping[str, Any],
                 refused: Any, images: Sequence[str] = ()) -> Iterator[ChatFrame]:
        """Send ``what()`` gives (prompts, earlier turns) with the form's settings and the ``images`` files; a
        warning, nothing sent and ``refused`` back in the input box when either is wrong, no server answers or the
        tab's last reply is still coming."""
        try:
            prompts, earlier = what()
            snap = self.controller.snapshot
            settings = dataclasses.replace(self._settings(snap, form), images=read_images(images))
            exchange = Exchange.new(settings, prompts, images=images)
            self.running.begin(tab, exchange)
        except ClientError as exc:
            gr.Warning(str(exc))
            yield gr.skip(), gr.skip(), gr.skip(), refused
            return
        yield from self._exchange(tab, exchange, earlier, snap, settings)

    @staticmethod
    def _settings(snap: Snapshot, form: Mapping[str, Any]) -> Settings:
        """The form's settings; ClientError saying how to go on when no server answers."""
        if not snap.serving or snap.server is None:
            raise BadRequest(views.no_server(snap))
        return settings_from_form(form, "Server tab")

    def _exchange(self, tab: str, exchange: Exchange, earlier: list[Turn], snap: Snapshot,
                  settings: Settings) -> Iterator[ChatFrame]:
        """Run the tab's begun ``exchange``: frames of its progress, the last once it has ended (and the tab is
        free for the next)."""
        turn, turns, server = exchange.turn, [*earlier, exchange.turn], snap.server
        assert server is not None  # _settings checked it
        info = snap.choices.get(settings.model)
        key = (settings.model, settings.tokenizer)
        frames = exchange.frames(server, settings, earlier, info, FRAME_S)
        try:  # Gradio closes this generator when the page goes away: closing the frames cancels the exchange
            here = (settings.templated is not False and info is not None and
                    server.template_side(info, settings.tokenizer) == HERE)
            loading = here and self.templates.state(key) != READY
            yield views.messages(turns), turns, views.live_markdown(turn, time.perf_counter(), loading), gr.skip()
            shown = None
            for over in frames:
                if over or turn.done:  # its ending is the last frame's, sent once the tab is free for the next
                    continue
                progress = (turn.sent_at, sum(map(len, turn.arrivals.values())), len(turn.replies))
                chat = views.messages(turns) if progress != shown else gr.skip()
                shown = progress
                yield chat, gr.skip(), views.live_markdown(turn, time.perf_counter(), loading), gr.skip()
        finally:
            frames.close()
            self.running.end(tab, exchange)
        if here and turn.sent_at is not None:
            self.templates.mark(key, READY)
        yield views.messages(turns), turns, views.live_markdown(turn, time.perf_counter()), gr.skip()

    def stop(self, tab: str) -> None:
        """Stop the tab's message: cancelled on the server (gRPC), also while it is being prepared."""
        self.running.cancel(tab)

    def export(self, turns: list[Turn]) -> Any:
        """The transcript as Markdown and JSON (with every reply's figures), offered for download."""
        if not turns:
            gr.Warning("nothing to export yet")
            return gr.skip()
        now = time.time()
        paths = export(turns, self.export_dir, time.strftime("qaic-transcript-%Y%m%d-%H%M%S", time.localtime(now))
                       + f"-{int(now * 1000) % 1000:03d}")
        return gr.update(value=[str(p) for p in paths], visible=True)

    @staticmethod
    def speed(turns: list[Turn]) -> tuple[Any, ...]:
        """The Speed tab: summary per mode, the per-reply table, and its plots."""
        table = views.speed_table(turns)
        plots = views.plot_data(table)
        return (views.summary_markdown(turns), table,
                *(gr.update(value=plots[key], **views.plot_label(key, plots[key]))
                  for key in ("ttft", "latency", "tps")))

    # ---- embeddings

    def embed(self, text: str, model: str) -> tuple[str, Any, str]:
        """The Embeddings tab's ask: (its status, each input's row, the similarity heat map); an error is its status
        (the tables keep the last answer)."""
        snap = self.controller.snapshot
        try:
            if snap.server is None or not snap.serving:
                raise BadRequest("not connected: the Server tab starts or connects to a server")
            found = embed(snap.server, model.strip() or None, split_prompts(text))
        except ClientError as exc:
            return views.md(f"error: {exc}"), gr.skip(), gr.skip()
        return views.embed_status(found), views.embed_rows(found), views.heat_map(found)

    # ---- server

    def poll(self) -> Snapshot:
        """The server's state, read again at most every POLL_S (all tabs share the reading)."""
        if self._poll_lock.acquire(blocking=False):
            try:
                if time.monotonic() - self._polled >= POLL_S:
                    self.controller.poll()
                    self._polled = time.monotonic()
            finally:
                self._poll_lock.release()
        snap = self.controller.snapshot
        if snap.generation != self._warmed and snap.server is not None:
            self._warmed = snap.generation
            for info in snap.infos.values():  # the models whose chat template is applied here without a folder
                if snap.server.template_side(info) == HERE:
                    self.templates.warm(info)
        return snap

    def refresh(self, seen: tuple[int, str], mode: str, model: str | None, ticked: list[str],
                raw: bool) -> tuple[Any, ...]:
        """The timer's tick: the header, the model lists when they changed, and the Server tab (``ServerTab.tick``)."""
        snap = self.poll()
        moved = snap.generation != seen[0]
        shown = snap.repository if snap.owned and snap.repository else seen[1]
        picked, note = self.models_for(mode, model, snap) if moved else (gr.skip(), self.model_note(model))
        return (views.status_markdown(snap), (snap.generation, shown), picked, note,
                *self.server.tick(snap, seen, shown, ticked, raw))

    def models_for(self, mode: str, current: str | None, snap: Snapshot | None = None) -> tuple[Any, str]:
        """The model selector for ``mode`` (keeping ``current`` when offered) and the note on the pick."""
        choices = views.model_choices((snap or self.controller.snapshot).choices, mode)
        value = views.pick_model(choices, mode, current)
        return gr.update(choices=choices, value=value), self.model_note(value)

    def mode_changed(self, mode: str, picks: dict[str, str]) -> tuple[Any, str]:
        """The model selector for the ``mode`` switched to: the model picked in it before, else its default (smollm2_kv
        for batch, as the TUI's Batch pane, headless and bench), not the other mode's."""
        return self.models_for(mode, picks.get(mode))

    def model_note(self, model: str | None) -> str:
        snap = self.controller.snapshot
        info = snap.choices.get(model or "")
        state = self.templates.state((model or "", "")) if info else None
        template = TEMPLATE_STATES.get(state, f"not loaded: {state}") if state else None
        if info is not None and snap.server is not None and snap.server.template_side(info) == NONE:
            template = NO_TEMPLATE
        return views.model_note(info, template)
