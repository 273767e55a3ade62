"""The server the web console talks to: a tritonserver started here, or a running one reached by URL.

One :class:`Backend` serves every browser tab of the app. Starting runs in a thread so the page
keeps showing the log while models load; :meth:`Backend.snapshot` is what the page polls.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from console.clients import ClientError, ModelInfo, normalize_url, ready_models
from console.headless import EMBEDDED_DEFAULTS, START_TIMEOUT, embedded_repo
from console.server import ServerError, TritonServer

DEFAULT_MODELS = (EMBEDDED_DEFAULTS["stream"], EMBEDDED_DEFAULTS["batch"])  # loaded from the embedded repo
NOT_CONNECTED = "not connected: start a server (below) or connect to a running one by URL"
LOG_LINES = 60


def grpc_guess(http_url: str) -> str:
    """Triton's default gRPC endpoint beside an HTTP one: the HTTP port + 1 (8000 -> 8001)."""
    host, _, port = normalize_url(http_url).rpartition(":")
    return f"{host}:{int(port) + 1}" if port.isdigit() else ""


def describe_repo(repo: str) -> tuple[str, list[str]]:
    """(a `repo list` style table, the model names) of ``repo``; empty: the embedded samples."""
    from repo_gen.cli import format_table
    from repo_gen.inspection import list_models

    path = Path(repo).expanduser() if repo.strip() else embedded_repo(lambda _: None)
    models = list_models(path)
    table = format_table(models) if models else f"no models in {path}"
    return table, [m.name for m in models]


def write_samples_into(repo: str, embedded: bool) -> str:
    """Write the embedded (or the seed's) four samples into ``repo``; what was written."""
    from repo_gen.samples import EMBEDDED_SAMPLES, SEED_SAMPLES, write_samples

    if not repo.strip():
        return f"wrote the embedded samples into {embedded_repo(lambda _: None)}"
    written = write_samples(EMBEDDED_SAMPLES if embedded else SEED_SAMPLES, Path(repo).expanduser())
    return "wrote " + ", ".join(str(p) for p in written)


@dataclass(frozen=True)
class Snapshot:
    """What the page shows about the server; ``version`` changes when the endpoint or its models do."""

    phase: str  # idle | starting | ready | failed | stopping | stopped | unreachable
    message: str
    http_url: str | None = None
    grpc_url: str | None = None
    models: list[tuple[str, str, str]] = field(default_factory=list)  # (name, state, reason)
    log: list[str] = field(default_factory=list)
    version: int = 0


class Backend:
    """The endpoint in use and, when started here, the tritonserver process."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.server: TritonServer | None = None
        self.http_url: str | None = None
        self.grpc_url: str | None = None
        self.phase = "idle"
        self.message = NOT_CONNECTED
        self.notes: list[str] = []
        self.version = 0
        self._infos: dict[str, ModelInfo] = {}
        self._ready: set[str] | None = None  # READY names when the infos were read

    # ---- starting and stopping a server here

    def start(self, repo: str = "", models: Sequence[str] = ()) -> None:
        """Start tritonserver on ``repo`` (empty: the embedded samples) in a thread, loading ``models``."""
        with self._lock:
            if self.phase == "starting" or (self.server is not None and self.server.running):
                raise ServerError("tritonserver is already running here: stop it first")
            self._set("starting", f"starting tritonserver on {repo or 'the embedded samples'} ...")
            self.notes = []
            self.server = None
        threading.Thread(target=self._start, args=(repo, tuple(models)), name="qc-web-start", daemon=True).start()

    def _start(self, repo: str, models: tuple[str, ...]) -> None:
        try:
            path = Path(repo).expanduser() if repo.strip() else embedded_repo(self.notes.append)
            load = [f"--load-model={m}" for m in models]
            server = TritonServer(path, model_control_mode="explicit" if load else "none", extra_args=load)
            with self._lock:
                if self.phase != "starting":  # stopped meanwhile
                    return
                self.server = server
            server.start(timeout=START_TIMEOUT)
            message = f"tritonserver {server.server_version()} started here (pid {server.pid})"
        except Exception as exc:  # the thread's end: the page must leave "starting" whatever happened
            with self._lock:
                if self.phase == "starting":  # not stopped meanwhile
                    if self.server is None:  # otherwise its log is shown
                        self.notes += getattr(exc, "log_tail", [])
                    self._set("failed", " ".join(str(exc).split()) or type(exc).__name__)
            return
        with self._lock:
            if self.phase == "starting":
                self.http_url, self.grpc_url = server.http_url, server.grpc_url
                self._set("ready", message)

    def stop(self) -> str:
        """Stop the server started here (a connected one is only forgotten); what happened."""
        with self._lock:
            server, self.server = self.server, None
            self.http_url = self.grpc_url = None
            self._set("stopping" if server else "idle", "stopping tritonserver ..." if server else NOT_CONNECTED)
        if server is None:
            return "disconnected"
        code = server.stop()
        with self._lock:
            if self.phase == "stopping":
                self._set("stopped", f"tritonserver stopped (exit code {code}); start it again or connect by URL")
        return "stopped"

    # ---- connecting to a running server

    def connect(self, http_url: str, grpc_url: str = "") -> str:
        """Use a running server: ``http_url`` for batch and state, ``grpc_url`` (default port + 1) to stream."""
        http = normalize_url(http_url)
        grpc = normalize_url(grpc_url) if grpc_url.strip() else grpc_guess(http)
        handle = TritonServer.attach(http)
        if not handle.is_ready():
            raise ClientError(f"no ready tritonserver at {http} (HTTP): check the host:port of its HTTP endpoint")
        guessed = "" if grpc_url.strip() else " (gRPC guessed as the HTTP port + 1: give it if streaming fails)"
        message = f"connected to tritonserver {handle.server_version()}{guessed}"
        with self._lock:
            if self.phase == "starting" or (self.server is not None and self.server.running):
                raise ClientError("a tritonserver started here is running: stop it first")
            self.server = None
            self.http_url, self.grpc_url = http, grpc
            self._set("ready", message)
        return message

    # ---- what is served

    def _set(self, phase: str, message: str) -> None:
        self.phase, self.message = phase, message
        self._infos, self._ready = {}, None
        self.version += 1

    def _handle(self) -> TritonServer | None:
        if self.server is not None:
            return self.server
        return TritonServer.attach(self.http_url) if self.http_url else None

    def snapshot(self) -> Snapshot:
        """The state, the models' states and the log tail, read now."""
        with self._lock:
            phase, message, server, handle = self.phase, self.message, self.server, self._handle()
            http, grpc, version, notes = self.http_url, self.grpc_url, self.version, list(self.notes)
        models: list[tuple[str, str, str]] = []
        if phase == "ready" and server is not None and not server.running:
            phase, message = "failed", f"tritonserver exited with code {server.wait(0)}"
        elif phase == "ready" and handle is not None:
            try:
                models = [(n, s, r) for n, (s, r) in sorted(handle.model_states().items())]
            except OSError as exc:
                phase, message = "unreachable", f"tritonserver at {http} does not answer: {exc}"
            ready = {n for n, s, _ in models if s == "READY"}
            if models and self._ready is not None and ready != self._ready:
                self.refresh()  # models were loaded or unloaded: read their configs again
        if server is not None:
            log = notes + server.log_tail(LOG_LINES)
        elif http:
            log = ["(the log of a server started elsewhere is not visible here)"]
        else:
            log = notes
        return Snapshot(phase, message, http, grpc, models, log[-LOG_LINES:], version)

    def infos(self) -> dict[str, ModelInfo]:
        """The ready models and their configs (read once per endpoint change)."""
        with self._lock:
            if self._infos or self.phase != "ready" or not self.http_url:
                return dict(self._infos)
            http, handle, version = self.http_url, self._handle(), self.version
        infos: dict[str, ModelInfo] = {}
        with contextlib.suppress(OSError):
            states = handle.model_states()  # type: ignore[union-attr]
            infos = ready_models(http, states)
            with self._lock:
                if self.version == version:
                    self._infos = infos
                    self._ready = {n for n, (s, _) in states.items() if s == "READY"}
        return infos

    def refresh(self) -> None:
        """Read the models again (e.g. loaded or unloaded meanwhile)."""
        with self._lock:
            self._infos, self._ready = {}, None
            self.version += 1

    def endpoint(self, protocol: str) -> str:
        """The URL to use for ``protocol`` (http or grpc); ClientError when there is none."""
        with self._lock:
            url = self.grpc_url if protocol == "grpc" else self.http_url
            if self.phase == "starting":
                raise ClientError("tritonserver is still starting: see the Server tab")
        if not url:
            raise ClientError(NOT_CONNECTED)
        return url

    def close(self) -> None:
        """Stop the server started here, if any."""
        with self._lock:
            server = self.server
        if server is not None:
            self.stop()
