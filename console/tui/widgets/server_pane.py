"""The Server pane: connect to a running server by URL (tritonserver, or an OpenAI-compatible one by its ``/v1``
URL), or pick / generate a model repository and serve it.

It drives one :class:`~console.core.controller.ServerController`: start returns at once, connect, poll, stop and
loading a model run in thread workers; the controller's snapshots and log lines come back as messages. The
snapshots bubble on to the app, which hands them to the chat panes. The Repository field shows the repository
served here (the generator writes into it, and a model generated while it is served is loaded); the log is shown
condensed, Ctrl+G the raw one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Button, Collapsible, DataTable, Input, Label, Static

from console.clients import ClientError
from console.core.controller import ServerController, Snapshot
from console.server import ServerError
from console.server.embedded import DEFAULT_MODELS, START_TIMEOUT

from ..messages import Generated, Notice, ServerChanged, ServerDown, ServerLog
from .fields import Field, row, value
from .generator_form import GeneratorForm
from .metrics_view import MetricsView
from .server_log import ServerLogView
from .server_rows import COLUMNS, model_row, repository_rows, state_markup

DEFAULT_REPOSITORY = "llm_model_dir"
POLL_SECONDS = 2.0
LOG_HINT = ("No server yet: F5 serves the embedded SmolLM2 (CPU), F6 starts the repository on the left, F8 connects "
            "to a running server by its URLs.")


def _not_served(model: str, served: Path | None, owned: bool, folder: Path) -> str:
    """Why a model generated into ``folder`` was not loaded (the server here serves ``served``), and how to serve it."""
    if owned:
        return f"{model} is not in the repository served here ({served}): F7, then F6 serves {folder}"
    where = f"is {served}" if served else "is not known here (not a tritonserver of this machine)"
    return f"{model} was not loaded: the connected server's repository {where}; F7 lets it go, then F6 serves {folder}"


class ServerPane(Vertical):
    """Forms on the left; state, endpoints, models and the server log on the right; the metrics across both (their
    table is wide)."""

    def __init__(self, http_url: str | None = None, grpc_url: str | None = None,
                 repository: str | None = None, api: str = "auto", metrics_url: str | None = None,
                 prometheus: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._initial = (http_url or "", grpc_url or "", repository or DEFAULT_REPOSITORY)
        self.api = api  # what the URL field names: auto, or an adapter kind (--api)
        self.metrics_url = metrics_url or ""  # the metrics page to read instead of the server's own (--metrics-url)
        self.prometheus = prometheus or ""  # a fleet's Prometheus to read instead (--prometheus)
        self.controller = ServerController(on_change=lambda s: self.post_message(ServerChanged(s)),
                                           on_log=lambda line: self.post_message(ServerLog(line)))
        self.phase = self.controller.snapshot.phase
        self._polling = False
        self._ready: list[str] = []  # the ready models last announced
        self.listing = False  # the table lists the repository's folders (no server yet)
        self._served = ""  # the repository last shown as served here

    def compose(self) -> ComposeResult:
        with Horizontal(classes="server-top"):
            yield from self._columns()
        yield MetricsView(lambda: self.controller.snapshot, self.metrics_url, self.prometheus, id="metrics")

    def _columns(self) -> ComposeResult:
        http_url, grpc_url, repository = self._initial
        with VerticalScroll(classes="server-forms"):
            yield Label("Connect to a running server", classes="title")
            yield row("HTTP URL", Field(http_url, placeholder="host:8000 (OpenAI: …/v1)",
                                        id="http-url", compact=True))
            yield row("gRPC URL", Field(grpc_url, placeholder="blank: the HTTP port + 1", id="grpc-url",
                                        compact=True))
            yield Horizontal(Button("Connect (F8)", id="connect", compact=True), classes="buttons")
            yield Label("Serve a model repository", classes="title")
            yield row("Repository", Field(repository, id="repository", compact=True))
            yield row("Load models", Field(placeholder="all (or a,b)", id="load", compact=True))
            yield row("Start timeout", Field(f"{START_TIMEOUT:g}", id="start-timeout", type="number", compact=True))
            yield Horizontal(
                Button("Embedded (F5)", id="embedded", compact=True, variant="primary"),
                Button("Start (F6)", id="start", compact=True, variant="success"),
                Button("Stop (F7)", id="stop", compact=True, variant="error"),
                classes="buttons",
            )
            with Collapsible(title="Generate a model into the repository (F9)", id="generator"):
                yield GeneratorForm(self.repository)
        with Vertical(classes="server-state"):
            yield Static(id="state")
            yield DataTable(id="models", cursor_type="row", zebra_stripes=True)
            yield Static(LOG_HINT, id="log-hint")
            yield ServerLogView(self.controller.log_tail, id="server-log")

    def on_mount(self) -> None:
        self.query_one("#models", DataTable).add_columns(*COLUMNS)
        self._show(self.controller.snapshot)
        self.set_interval(POLL_SECONDS, self._poll)
        if self._initial[0]:
            self.connect()

    @property
    def snapshot(self) -> Snapshot:
        return self.controller.snapshot

    def repository(self) -> Path:
        """The repository in the form (default llm_model_dir)."""
        return Path(value(self, "#repository") or DEFAULT_REPOSITORY).expanduser()

    def focus_form(self) -> None:
        """Focus the first field that matters: the URL when not serving, else the repository."""
        self.query_one("#repository" if self.snapshot.serving else "#http-url", Input).focus()

    # ---- what the controller says

    @on(ServerChanged)
    def _server_changed(self, message: ServerChanged) -> None:
        snap = message.snapshot
        if snap is not self.controller.snapshot:
            message.stop()  # made in another thread before the current one: its message follows
            return
        was, self.phase = self.phase, snap.phase
        self._show(snap)
        self._announce(snap, was)

    def _show(self, snap: Snapshot) -> None:
        self.query_one("#state", Static).update(Content.from_markup(state_markup(snap)))
        hint = self.query_one("#log-hint", Static)
        hint.update(snap.server.note if snap.server is not None and not snap.owned else LOG_HINT)
        hint.display = not snap.owned
        self.query_one(ServerLogView).display = snap.owned or snap.server is None
        if snap.phase != "idle" or not self.listing:
            self._table([model_row(m) for m in snap.models])
            self.listing = False
        if snap.http_url:
            self.query_one("#http-url", Input).value = snap.http_url
            self.query_one("#grpc-url", Input).value = snap.grpc_url or ""
        if snap.owned and snap.repository and snap.repository != self._served:  # F5's is the cache's
            self._served = snap.repository
            self.query_one("#repository", Input).value = snap.repository

    def _announce(self, snap: Snapshot, was: str) -> None:
        """A notice when the phase changes, and when the set of ready models does."""
        ready = sorted(snap.infos)
        if snap.phase != was and snap.phase in ("failed", "unreachable"):
            self.post_message(Notice(snap.message, "error"))
        elif snap.phase != was and snap.phase in ("ready", "connected", "stopped"):
            self.post_message(Notice(snap.message))
        elif snap.phase == "idle" and was in ("connected", "unreachable"):
            self.post_message(Notice("let go of the connected tritonserver (it keeps running)"))
        if snap.serving and ready != self._ready:
            self.post_message(Notice(f"models ready: {', '.join(ready) or 'none'}"))
        self._ready = ready

    def _table(self, rows: list[tuple[str, ...]]) -> None:
        table = self.query_one("#models", DataTable)
        table.clear()
        for cells in rows:
            table.add_row(*cells)

    @on(ServerLog)
    def _log_line(self, message: ServerLog) -> None:
        message.stop()
        self.query_one(ServerLogView).add(message.line)

    # ---- connect, start, stop, poll

    def connect(self) -> None:
        """Use the server at the URLs in the form (one this console did not start)."""
        http_url = value(self, "#http-url")
        if not http_url:
            self.post_message(Notice("type the server's HTTP URL (host:port; the gRPC one defaults to the HTTP "
                                     "port + 1), or an OpenAI-compatible server's http://host:port/v1", "warning"))
            return
        self._connect(http_url, value(self, "#grpc-url"))

    @work(thread=True, group="connect", exclusive=True)
    def _connect(self, http_url: str, grpc_url: str) -> None:
        try:
            self.controller.connect(http_url, grpc_url, self.api)
        except (ClientError, OSError, ValueError) as exc:
            self.post_message(Notice(str(exc), "error"))

    def start(self, embedded: bool = False) -> None:
        """Serve the repository in the form (``embedded``: the cached embedded samples, the default models)."""
        if embedded:
            self.query_one("#load", Input).value = ",".join(DEFAULT_MODELS)
        models = [m.strip() for m in value(self, "#load").split(",") if m.strip()]
        try:
            timeout = float(value(self, "#start-timeout") or START_TIMEOUT)
        except ValueError:
            self.post_message(Notice("Start timeout: not a number", "warning"))
            return
        repository = None if embedded else self.repository()
        if repository is not None and not repository.is_dir():
            self.post_message(Notice(f"no model repository at {repository}: generate a model (F9) or press F5",
                                     "warning"))
            return
        try:
            self.controller.start(repository, models, timeout)
        except ServerError as exc:
            self.post_message(Notice(f"{exc} (F7)", "warning"))
            return
        self.query_one(ServerLogView).clear()  # its first lines are still on their way as messages

    def stop_server(self) -> None:
        """Stop the tritonserver started here; a connected one is only let go."""
        if self.snapshot.phase in ("idle", "stopped", "failed"):
            self.post_message(Notice("no tritonserver to stop", "warning"))
            return
        self._stop()

    def shutdown(self) -> None:
        """Stop a server started here, then post :class:`ServerDown` (the app closes then)."""
        self._stop(quitting=True)

    @work(thread=True, group="stop")
    def _stop(self, quitting: bool = False) -> None:
        try:
            self.controller.stop()
        finally:
            if quitting:
                self.post_message(ServerDown())

    def _poll(self) -> None:
        if not self._polling and self.snapshot.phase in ("ready", "connected", "unreachable"):
            self._polling = True
            self._poll_now()

    @work(thread=True, group="poll")
    def _poll_now(self) -> None:
        try:
            self.controller.poll()
        finally:
            self._polling = False

    # ---- the repository before a server runs on it

    def show_repository(self, repository: Path) -> None:
        """The model folders of ``repository`` (before a server runs on it)."""
        self.listing = True
        self._table(repository_rows(repository))

    @on(Generated)
    def _generated(self, message: Generated) -> None:
        if self.snapshot.serving:
            self._load(message.path)
        else:
            self.show_repository(message.path.parent)

    @work(thread=True, group="load")
    def _load(self, path: Path) -> None:
        """Worker: load a model generated into the repository the server here serves (started here, or connected on
        this machine); else say how to serve it."""
        served, model = self.controller.served_repository(), path.name
        if served is None or served.resolve() != path.parent.resolve():
            self.post_message(Notice(_not_served(model, served, self.snapshot.owned, path.parent), "warning"))
            return
        try:
            self.controller.load(model)
        except (ServerError, OSError) as exc:
            self.post_message(Notice(" ".join(str(exc).split()), "error"))
            return
        self.post_message(Notice(f"loaded {model} into the running tritonserver"))

    # ---- buttons and fields

    @on(Button.Pressed, "#connect")
    def _connect_pressed(self) -> None:
        self.connect()

    @on(Button.Pressed, "#embedded")
    def _embedded_pressed(self) -> None:
        self.start(embedded=True)

    @on(Button.Pressed, "#start")
    def _start_pressed(self) -> None:
        self.start()

    @on(Button.Pressed, "#stop")
    def _stop_pressed(self) -> None:
        self.stop_server()

    @on(Input.Submitted, "#http-url, #grpc-url")
    def _url_submitted(self) -> None:
        self.connect()

    @on(Input.Submitted, "#repository")
    def _repository_submitted(self) -> None:
        if not self.snapshot.serving:
            self.show_repository(self.repository())
