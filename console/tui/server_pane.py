"""The Server pane: connect to a running tritonserver by URL, or pick / generate a model repository and serve it.

Starting, stopping and polling run in thread workers; their results come back as callbacks on the
UI thread, so the pane stays responsive while models load. The server log streams into a log view.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from textual import events, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.markup import escape
from textual.widgets import Button, Collapsible, DataTable, Input, Label, Log, Static

from console.clients import ClientError, ModelInfo, normalize_url, ready_models
from console.headless import EMBEDDED_DEFAULTS, START_TIMEOUT, embedded_repo
from console.server import LOG_KEEP, ServerError, TritonServer
from repo_gen.inspection import list_models

from .fields import row, text
from .generator import GeneratorForm, generate
from .messages import Connected, Disconnected, Notice

DEFAULT_REPOSITORY = "llm_model_dir"
POLL_SECONDS = 2.0
STATE_MARKS = {
    "stopped": ("○", "text-muted"), "starting": ("◔", "warning"), "stopping": ("◔", "warning"),
    "connecting": ("◔", "warning"), "ready": ("●", "success"), "connected": ("●", "success"),
    "failed": ("✖", "error"), "unreachable": ("✖", "error"),
}
States = dict[str, tuple[str, str]]


class ServerPane(Horizontal):
    """Forms on the left; state, endpoints, models and the server log on the right."""

    def __init__(self, http_url: str | None = None, grpc_url: str | None = None,
                 repository: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._initial = (http_url or "", grpc_url or "", repository or DEFAULT_REPOSITORY)
        self.state = "stopped"
        self.detail = ""
        self.server: TritonServer | None = None  # started here: stopped with the app
        self.link: TritonServer | None = None  # the server being talked to (this one, or a remote handle)
        self.endpoints: tuple[str, str | None] | None = None
        self.infos: dict[str, ModelInfo] = {}
        self._ready: set[str] = set()  # READY names when infos were last fetched (a model may lack info)
        self._stopping = False
        self._polling = False
        self._log: queue.SimpleQueue[str] = queue.SimpleQueue()

    def compose(self) -> ComposeResult:
        http_url, grpc_url, repository = self._initial
        with VerticalScroll(classes="server-forms"):
            yield Label("Connect to a running tritonserver", classes="title")
            yield row("HTTP URL", Input(http_url, placeholder="host:8000", id="http-url", compact=True))
            yield row("gRPC URL", Input(grpc_url, placeholder="host:8001", id="grpc-url", compact=True))
            yield Horizontal(Button("Connect (F8)", id="connect", compact=True), classes="buttons")
            yield Label("Serve a model repository", classes="title")
            yield row("Repository", Input(repository, id="repository", compact=True))
            yield row("Load models", Input(placeholder="all (or a,b)", id="load", compact=True))
            yield row("Start timeout", Input(f"{START_TIMEOUT:g}", id="start-timeout", type="number", compact=True))
            yield Horizontal(
                Button("Embedded (F5)", id="embedded", compact=True, variant="primary"),
                Button("Start (F6)", id="start", compact=True, variant="success"),
                Button("Stop (F7)", id="stop", compact=True, variant="error"),
                classes="buttons",
            )
            with Collapsible(title="Generate a model into the repository (F9)", id="generator"):
                yield GeneratorForm()
        with Vertical(classes="server-state"):
            yield Static(id="state")
            yield DataTable(id="models", cursor_type="row", zebra_stripes=True)
            yield Log(id="server-log", max_lines=LOG_KEEP)

    def on_mount(self) -> None:
        table = self.query_one("#models", DataTable)
        table.add_columns("Model", "State", "Type", "Mode", "Note")
        log = self.query_one("#server-log", Log)
        log.border_title = "tritonserver log"
        log.write_line("No server yet: F5 serves the embedded SmolLM2 (CPU), F6 starts the repository on the "
                       "left, F8 connects to a running server.")
        self._show_state("stopped")
        self.set_interval(0.2, self._drain_log)
        self.set_interval(POLL_SECONDS, self._poll)
        if self._initial[0]:
            self.connect()

    # ---- small helpers

    def _later(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the UI thread (from a worker); dropped when the app is closing."""
        with contextlib.suppress(RuntimeError):
            self.post_message(events.Callback(callback=partial(fn, *args)))

    def _notice(self, message: str, severity: str = "information") -> None:
        self.post_message(Notice(message, severity))

    def _show_state(self, state: str, detail: str = "") -> None:
        self.state, self.detail = state, detail
        mark, style = STATE_MARKS.get(state, ("?", ""))
        lines = [f"[${style}]{mark} {state}[/]" + (f"  {escape(detail)}" if detail else "")]
        if self.endpoints:
            http_url, grpc_url = self.endpoints
            grpc = grpc_url or "(not given: the Stream pane needs it)"
            lines += [f"[b]HTTP[/]     {escape(http_url)}", f"[b]gRPC[/]     {escape(grpc)}"]
            if self.link is not None and self.link is self.server:
                lines.append(f"[b]metrics[/]  {self.server.metrics_url}")
        self.query_one("#state", Static).update(Content.from_markup("\n".join(lines)))

    def _show_models(self, states: States, infos: dict[str, ModelInfo]) -> None:
        table = self.query_one("#models", DataTable)
        table.clear()
        for name, (state, reason) in sorted(states.items()):
            info = infos.get(name)
            kind = "" if info is None else ("kv_cache" if info.use_kv_cache else "causal")
            mode = "" if info is None else ("stream" if info.decoupled else "batch")
            table.add_row(name, state or "not loaded", kind, mode, reason.splitlines()[0][:80] if reason else "")

    def _show_repository(self, repository: Path) -> None:
        """The model folders of ``repository`` (before a server runs on it)."""
        table = self.query_one("#models", DataTable)
        table.clear()
        try:
            models = list_models(repository)
        except ValueError as exc:
            table.add_row("-", "", "", "", str(exc))
            return
        for m in models:
            mode = {True: "stream", False: "batch", None: "?"}[m.decoupled]
            table.add_row(m.name, "not served", m.model_type, mode, "; ".join(m.problems) or m.source)

    def _drain_log(self) -> None:
        lines = []
        with contextlib.suppress(queue.Empty):
            while len(lines) < 500:
                lines.append(self._log.get_nowait())
        if lines:
            log = self.query_one("#server-log", Log)
            follow = log.is_vertical_scroll_end
            log.write_lines(lines, scroll_end=False)
            if follow:
                self.call_after_refresh(log.scroll_end, animate=False, x_axis=False)

    def focus_form(self) -> None:
        """Focus the first field that matters: the URL when not connected, else the repository."""
        self.query_one("#repository" if self.link is not None else "#http-url", Input).focus()

    # ---- connect

    def connect(self) -> None:
        """Talk to the server at the URLs in the form (one this console did not start)."""
        http_url, grpc_url = text(self, "#http-url"), text(self, "#grpc-url")
        try:
            if not http_url:
                raise ClientError("type the server's HTTP URL (host:port); the gRPC one is needed for streaming")
            handle = TritonServer.attach(normalize_url(http_url))
            grpc = normalize_url(grpc_url) if grpc_url else None
        except (ClientError, ServerError) as exc:
            self._notice(str(exc), "warning")
            return
        self._unlink()
        self._show_state("connecting", handle.http_url)
        self._link_up(handle, grpc)

    @work(thread=True, group="link", exclusive=True)
    def _link_up(self, handle: TritonServer, grpc_url: str | None) -> None:
        try:
            states = handle.model_states()
        except (OSError, ValueError) as exc:
            self._later(self._unreachable, handle, f"cannot reach tritonserver at {handle.http_url}: {exc}")
            return
        self._later(self._linked, handle, grpc_url, states, ready_models(handle.http_url, states))

    def _linked(self, handle: TritonServer, grpc_url: str | None, states: States,
                infos: dict[str, ModelInfo]) -> None:
        self.link, self.infos = handle, infos
        self._ready = {n for n, (s, _) in states.items() if s == "READY"}
        self.endpoints = (handle.http_url, grpc_url)
        self.query_one("#http-url", Input).value = handle.http_url
        self.query_one("#grpc-url", Input).value = grpc_url or ""
        owned = handle is self.server
        self._show_state("ready" if owned else "connected", "" if owned else "(not started here: no log)")
        self._show_models(states, infos)
        self.post_message(Connected(handle.http_url, grpc_url, infos))
        self._notice(f"connected to {handle.http_url}: {len(infos)} model(s) ready ({', '.join(infos) or 'none'})")

    def _unreachable(self, handle: TritonServer, message: str) -> None:
        if self.link is None or self.link is handle:
            self._show_state("unreachable", message)
            self._notice(message, "error")

    def _unlink(self) -> None:
        if self.link is not None:
            self.link, self.endpoints, self.infos = None, None, {}
            self.post_message(Disconnected())

    # ---- polling: model states, a server that died

    def _poll(self) -> None:
        if self.link is not None and not self._polling:
            self._polling = True
            self._refresh(self.link)

    @work(thread=True, group="poll")
    def _refresh(self, link: TritonServer) -> None:
        try:
            if link is self.server and not link.running:
                self._later(self._died, link)
                return
            try:
                states = link.model_states()
            except (OSError, ValueError) as exc:
                self._later(self._lost, link, f"tritonserver at {link.http_url} does not answer: {exc}")
                return
            ready = {n for n, (s, _) in states.items() if s == "READY"}
            infos = None
            if ready != self._ready:  # fetch model configs only when the READY set changed
                infos, self._ready = ready_models(link.http_url, states), ready
            self._later(self._states, link, states, infos)
        finally:
            self._polling = False

    def _states(self, link: TritonServer, states: States, infos: dict[str, ModelInfo] | None) -> None:
        if link is not self.link:
            return
        if self.state == "unreachable":
            self._show_state("ready" if link is self.server else "connected")
            self._notice(f"tritonserver at {link.http_url} answers again")
        if infos is not None and self.endpoints:
            self.infos = infos
            self.post_message(Connected(self.endpoints[0], self.endpoints[1], infos))
        self._show_models(states, self.infos)

    def _lost(self, link: TritonServer, message: str) -> None:
        if link is self.link and self.state != "unreachable":
            self._show_state("unreachable", message)
            self._notice(message, "error")

    def _died(self, server: TritonServer) -> None:
        if server is not self.server or self._stopping:
            return
        code = server.wait(0)
        self.server = None
        self._unlink()
        tail = " | ".join(server.log_tail(3))
        self._show_state("failed", f"tritonserver exited with code {code}")
        self._notice(f"tritonserver exited with code {code}; last log lines: {tail}", "error")
        self._reap(server)

    @work(thread=True, group="stop")
    def _reap(self, server: TritonServer) -> None:
        """Take down what a dead server left behind (backend stubs, shared memory)."""
        server.stop(grace=0)

    # ---- start / stop

    def start(self, embedded: bool = False) -> None:
        """Serve the repository in the form (``embedded``: the cached embedded samples)."""
        if self.server is not None:
            self._notice("a tritonserver started here is running: F7 stops it", "warning")
            return
        if embedded:
            self.query_one("#load", Input).value = ",".join(dict.fromkeys(EMBEDDED_DEFAULTS.values()))
        load = [m.strip() for m in text(self, "#load").split(",") if m.strip()]
        try:
            timeout = float(text(self, "#start-timeout") or START_TIMEOUT)
        except ValueError:
            self._notice("Start timeout: not a number", "warning")
            return
        repository = None if embedded else Path(text(self, "#repository") or DEFAULT_REPOSITORY).expanduser()
        if repository is not None and not repository.is_dir():
            self._notice(f"no model repository at {repository}: generate a model (F9) or press F5", "warning")
            return
        self._unlink()
        args = tuple(f"--load-model={m}" for m in load)
        self.server = TritonServer(repository or ".", model_control_mode="explicit" if load else "none",
                                   extra_args=args)
        self._stopping = False
        self.query_one("#server-log", Log).clear()
        self._show_state("starting", "the embedded samples" if embedded else str(repository))
        self._start(self.server, embedded, timeout)

    @work(thread=True, group="server")
    def _start(self, server: TritonServer, embedded: bool, timeout: float) -> None:
        try:
            if embedded:
                repository = embedded_repo(self._log.put)
                server.model_repository = repository
                self._later(self._set_input, "#repository", str(repository))
            self._log.put(f"starting tritonserver on {server.model_repository} ...")
            server.start(timeout=timeout, on_log=self._log.put)
            states = server.model_states()
        except (ServerError, OSError, ValueError) as exc:
            self._later(self._start_failed, server, " ".join(str(exc).split()))
            return
        self._later(self._linked, server, server.grpc_url, states, ready_models(server.http_url, states))

    def _set_input(self, selector: str, value: str) -> None:
        self.query_one(selector, Input).value = value

    def _start_failed(self, server: TritonServer, message: str) -> None:
        if server is not self.server:
            return
        self.server = None
        if self._stopping:
            self._show_state("stopped", "start cancelled")
            return
        self._show_state("failed", message)
        self._notice(message, "error")

    def stop_server(self) -> None:
        """Stop the tritonserver started here (a connected one is left running)."""
        server = self.server
        if server is None or self._stopping:
            self._notice("no tritonserver started here is running (a connected one is left alone)", "warning")
            return
        self._stopping = True
        if self.link is server:
            self._unlink()
        self._show_state("stopping")
        self._stop(server)

    @work(thread=True, group="stop")
    def _stop(self, server: TritonServer) -> None:
        code = server.stop()
        self._later(self._stopped, server, code)

    def _stopped(self, server: TritonServer, code: int | None) -> None:
        if server is self.server:
            self.server = None
        self._stopping = False
        self._show_state("stopped", "" if code is None else f"exit code {code}")
        self._notice("tritonserver stopped")

    def shutdown(self) -> None:
        """Stop a server started here (blocking: call from a thread when the app closes)."""
        server, self.server = self.server, None
        if server is not None:
            self._stopping = True
            server.stop()

    # ---- generator

    def generate(self) -> None:
        repository = Path(text(self, "#repository") or DEFAULT_REPOSITORY).expanduser()
        self._generate(self.query_one(GeneratorForm).request(), repository)

    @work(thread=True, group="generate", exclusive=True)
    def _generate(self, request: Any, repository: Path) -> None:
        try:
            spec, path = generate(request, repository)
        except (ValueError, OSError, RuntimeError) as exc:
            self._notice(" ".join(str(exc).split()), "error")
            return
        mode = "decoupled" if spec.decoupled else "batch"
        self._notice(f"wrote {path} ({spec.model_type}, {mode})")
        self._later(self._show_repository, repository)

    # ---- buttons and form

    def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {"connect": self.connect, "embedded": partial(self.start, True), "start": self.start,
                   "stop": self.stop_server, "generate": self.generate}
        if event.button.id in actions:
            event.stop()
            actions[event.button.id]()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id in ("http-url", "grpc-url"):
            self.connect()
        elif event.input.id == "repository" and self.server is None:
            self._show_repository(Path(event.value.strip() or DEFAULT_REPOSITORY).expanduser())
