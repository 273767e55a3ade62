"""The qaic-console Textual app: Server, Stream, Batch and Embeddings panes, keyboard first."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Center
from textual.screen import ModalScreen, Screen
from textual.widgets import Collapsible, Footer, Header, Static, TabbedContent, TabPane

from console.core.transcript import export

from .messages import Notice, ServerChanged, ServerDown
from .widgets.chat_pane import ChatPane
from .widgets.embed_pane import EmbedPane
from .widgets.server_log import ServerLogView
from .widgets.server_pane import ServerPane

QUIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
CHAT_ACTIONS = {"stop", "copy", "clear", "raw", "controls", "toggle_controls"}
SERVER_ACTIONS = {"embedded", "start", "stop_server", "connect", "generator", "raw_log"}

# (key, action, description, shown in the footer, command-palette help)
KEYS: tuple[tuple[str, str, str, bool, str], ...] = (
    ("f2", "pane('server')", "Server", True, "Show the Server pane"),
    ("f3", "pane('stream')", "Stream", True, "Show the Stream pane (gRPC, token by token)"),
    ("f4", "pane('batch')", "Batch", True, "Show the Batch pane (HTTP, one response)"),
    ("f10", "pane('embed')", "Embeddings", True, "Show the Embeddings pane (vectors, and how alike the texts are)"),
    ("escape", "stop", "Stop", True, "Stop the reply in flight (cancels it on the server)"),
    ("ctrl+o", "controls", "Controls", True, "Go to this pane's controls, or back to the message (each chat pane "
                                             "has its own)"),
    ("ctrl+t", "attach", "Attach images", False, "Attach image files to this pane's next message (a field of "
                                                 "paths)"),
    ("ctrl+y", "copy", "Copy reply", True, "Copy the last reply to the clipboard"),
    ("ctrl+l", "clear", "Clear", True, "Clear this pane's conversation and history"),
    ("ctrl+s", "export", "Export", True, "Export both conversations as Markdown and JSON (with speed figures)"),
    ("ctrl+r", "raw", "Raw/chat", True, "Toggle raw prompt mode (no chat template, no history)"),
    ("ctrl+b", "toggle_controls", "Show/hide controls", False, "Show or hide this pane's controls"),
    ("f5", "embedded", "Embedded", True, "Serve the embedded SmolLM2 samples (written into the cache once)"),
    ("f6", "start", "Start", True, "Start tritonserver on the repository in the form"),
    ("f7", "stop_server", "Stop server", True, "Stop the tritonserver started here (or let a connected one go)"),
    ("f8", "connect", "Connect", True, "Connect to the running server at the URLs in the form"),
    ("f9", "generator", "Generate", True, "Show the model generator form (repo gen)"),
    ("ctrl+g", "raw_log", "Raw log", True, "Show tritonserver's raw log, or back to the condensed one"),
    ("f1", "keys", "Keys", True, "Show or hide the key and widget help panel"),
    ("ctrl+q", "quit", "Quit", True, "Quit (a tritonserver started here is stopped first)"),
)


class Stopping(ModalScreen[None]):
    """Shown while quitting waits for the tritonserver started here to stop."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Center():
            yield Static(self.text, id="stopping")


class QaicConsoleApp(App[None]):
    """Generate, serve and chat with LLMs through Triton (``http_url``/``grpc_url``: connect at start)."""

    CSS_PATH = Path(__file__).with_name("app.tcss")
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (140, "-wide")]  # the screen's class, by the terminal's columns
    TITLE = "qaic-console"
    SUB_TITLE = "Triton LLM console"
    BINDINGS = [Binding(key, action, label, show=shown, priority=action == "quit")
                for key, action, label, shown, _ in KEYS]

    def __init__(self, http_url: str | None = None, grpc_url: str | None = None, repository: str | None = None,
                 export_dir: str | Path | None = None, api: str = "auto", metrics_url: str | None = None,
                 prometheus: str | None = None) -> None:
        super().__init__()
        self.export_dir = Path(export_dir) if export_dir else Path.cwd()
        self.notices: list[tuple[str, str]] = []  # (severity, text), every notification shown
        self.quitting = False
        self.server_pane = ServerPane(http_url, grpc_url, repository=repository, api=api, metrics_url=metrics_url,
                                      prometheus=prometheus, id="server-pane")
        self.chats = {mode: ChatPane(mode, id=f"{mode}-pane") for mode in ("stream", "batch")}
        self.embed_pane = EmbedPane(id="embed-pane")
        self._initial = "stream" if http_url else "server"

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial=self._initial):
            with TabPane("Server (F2)", id="server"):
                yield self.server_pane
            with TabPane("Stream (F3)", id="stream"):
                yield self.chats["stream"]
            with TabPane("Batch (F4)", id="batch"):
                yield self.chats["batch"]
            with TabPane("Embeddings (F10)", id="embed"):
                yield self.embed_pane
        yield Footer()

    # ---- panes

    def chat(self, mode: str) -> ChatPane:
        return self.chats[mode]

    @property
    def active(self) -> str:
        return self.query_one(TabbedContent).active or "server"

    @property
    def active_chat(self) -> ChatPane | None:
        return self.chats.get(self.active)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Chat keys on the chat panes, server keys on the Server pane (the footer follows)."""
        if action in CHAT_ACTIONS:
            return self.active_chat is not None
        if action in SERVER_ACTIONS:
            return self.active == "server"
        return True

    @on(TabbedContent.TabActivated)
    def _tab_activated(self) -> None:
        self.refresh_bindings()
        self._focus_pane()

    def _focus_pane(self) -> None:
        """Focus inside the active pane (a focused widget in a hidden pane would switch back to it)."""
        if self.active_chat is not None:
            self.active_chat.focus_prompt()
        elif self.active == "embed":
            self.embed_pane.focus_prompt()
        else:
            self.server_pane.focus_form()

    # ---- messages

    def notice(self, text: str, severity: str = "information") -> None:
        """A notification, also kept in :attr:`notices`."""
        self.notices.append((severity, text))
        self.notify(text, severity=severity, timeout=10 if severity == "error" else 5, markup=False)  # type: ignore[arg-type]

    @on(Notice)
    def _notice(self, message: Notice) -> None:
        self.notice(message.text, message.severity)

    @on(ServerChanged)
    def _server_changed(self, message: ServerChanged) -> None:
        snap = message.snapshot
        for pane in self.chats.values():
            pane.serve(snap)
        self.embed_pane.serve(snap)
        self.sub_title = snap.server.title() if snap.serving and snap.server else snap.phase

    # ---- actions

    def action_pane(self, name: str) -> None:
        self.query_one(TabbedContent).active = name
        self._focus_pane()

    def action_stop(self) -> None:
        pane = self.active_chat
        if pane is not None and not pane.stop():
            self.notice("nothing to stop")

    def action_controls(self) -> None:
        """To the pane's controls, or back from them to the message box."""
        pane = self.active_chat
        if pane is None:
            return
        if pane.controls.has_focus_within:
            pane.focus_prompt()
            return
        pane.controls.display = True
        pane.controls.focus_first()

    def action_attach(self) -> None:
        if self.active_chat is not None:
            self.active_chat.attach()

    def action_toggle_controls(self) -> None:
        if self.active_chat is not None:
            controls = self.active_chat.controls
            controls.display = not controls.display

    def action_copy(self) -> None:
        pane = self.active_chat
        reply = pane.last_reply() if pane else None
        if reply is None:
            self.notice("no reply to copy yet", "warning")
            return
        self.copy_to_clipboard(reply)
        self.notice(f"copied the last reply ({len(reply)} characters)")

    def action_clear(self) -> None:
        if self.active_chat is not None:
            self.active_chat.clear()

    def action_raw(self) -> None:
        pane = self.active_chat
        if pane is not None:
            chat = pane.controls.toggle_chat()
            self.notice("chat template on: history is sent" if chat else "raw prompt mode: sent as typed, no history")

    def action_export(self) -> None:
        turns = [*self.chat("stream").turns, *self.chat("batch").turns]
        if not turns:
            self.notice("nothing to export yet", "warning")
            return
        try:
            md, js = export(turns, self.export_dir)
        except OSError as exc:
            self.notice(f"export failed: {exc}", "error")
            return
        self.notice(f"exported {len(turns)} turn{'s' if len(turns) != 1 else ''} to {md} and {js.name}")

    def action_embedded(self) -> None:
        self.server_pane.start(embedded=True)

    def action_start(self) -> None:
        self.server_pane.start()

    def action_stop_server(self) -> None:
        self.server_pane.stop_server()

    def action_connect(self) -> None:
        self.server_pane.connect()

    def action_raw_log(self) -> None:
        raw = self.server_pane.query_one(ServerLogView).toggle()
        self.notice("the raw tritonserver log" if raw else "the condensed log (Ctrl+G: the raw one)")

    def action_generator(self) -> None:
        form = self.query_one("#generator", Collapsible)
        form.collapsed = not form.collapsed
        if not form.collapsed:
            self.query_one("#gen-name").focus()

    def action_keys(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    def save_screenshot_here(self) -> None:
        """An SVG of the screen into the export folder, saying where."""
        try:
            path = self.save_screenshot(path=str(self.export_dir))
        except OSError as exc:
            self.notice(f"screenshot failed: {exc}", "error")
            return
        self.notice(f"screenshot saved to {path}")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for command in super().get_system_commands(screen):
            if command.title != "Screenshot":  # Textual's saves into ~/Downloads, which may not exist
                yield command
        yield SystemCommand("Screenshot", "Save an SVG screenshot of the screen where Ctrl+S exports (--export-dir)",
                            partial(self.call_after_refresh, self.save_screenshot_here))
        for _, action, label, _, help_text in KEYS:
            name = action.partition("(")[0]
            if name not in ("keys", "quit") and self.check_action(name, ()):  # super() has Keys and Quit
                yield SystemCommand(label, help_text, partial(self.run_action, action))

    # ---- quitting: a server started here is stopped first, on screen

    def on_mount(self) -> None:
        """SIGTERM and SIGHUP (the terminal closed) quit like Ctrl+Q, so a server started here is stopped."""
        loop = asyncio.get_running_loop()
        for signum in QUIT_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # e.g. not the main thread
                loop.add_signal_handler(signum, partial(self.call_later, self.action_quit))

    async def action_quit(self) -> None:
        """Stop the replies in flight and the server started here (saying so), then close."""
        for pane in self.chats.values():
            pane.stop()
        controller = self.server_pane.controller
        if self.quitting:
            return
        if controller.server is None and controller.snapshot.phase != "starting":
            self.exit()
            return
        self.quitting = True
        pid = controller.server.pid if controller.server is not None else None
        await self.push_screen(Stopping(f"stopping tritonserver{f' (pid {pid})' if pid else ''}… "
                                        "qaic-console closes when it is down"))
        self.server_pane.shutdown()

    @on(ServerDown)
    def _server_down(self) -> None:
        self.exit()

    async def on_unmount(self) -> None:
        if self.server_pane.controller.server is not None:  # closed another way: still stop it
            await asyncio.to_thread(self.server_pane.controller.stop)
        loop = asyncio.get_running_loop()
        for signum in QUIT_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signum)
