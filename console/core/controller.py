"""One server controller for every front end: start tritonserver here or connect to a running server of any
kind (its adapter, :mod:`.adapters`), follow its models, bring back a model whose backend died, stop it.

The TUI and the web UI drive the same :class:`ServerController`. ``start`` returns at once (the
server starts in a thread); ``connect``, ``poll`` and ``stop`` block briefly, so a UI calls them
from a worker. Every change produces a new immutable :class:`Snapshot` (``on_change`` receives it,
from whatever thread made it); ``generation`` moves when the endpoint or the set of ready models
changes, which is when a UI rebuilds its model lists.

A server started here is watched at each :meth:`ServerController.poll` (:mod:`.keeper`): a model whose
Python backend stub died or stopped, or which was unloaded behind the console's back, is reported as FAILED
in the log and the models, and loaded again; the next request is served again without restarting anything.
A server that died is said with its cause; :meth:`ServerController.restart` starts it again as it was.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from console.clients import BadRequest, ModelInfo
from console.server import LOG_KEEP, ServerError, TritonServer, logparse
from console.server.embedded import START_TIMEOUT, embedded_repo

from .adapters import Adapter, adapter_for, started_here
from .keeper import ModelKeeper

NOT_CONNECTED = "not connected: start a server or connect to a running one by URL"
BUSY = ("starting", "stopping")

Listener = Callable[["Snapshot"], object]  # what it returns is ignored


@dataclass(frozen=True)
class ModelRow:
    """One model of the repository as the server reports it (``info`` once it is READY)."""

    name: str
    state: str
    reason: str = ""
    info: ModelInfo | None = None


@dataclass(frozen=True)
class Snapshot:
    """What a UI shows about the server; a new one after every change."""

    phase: str  # idle | starting | ready | connected | stopping | stopped | failed | unreachable
    message: str
    owned: bool = False  # started here (its log is visible, quitting stops it)
    server: Adapter | None = None  # where it answers, while it does
    repository: str = ""
    models: tuple[ModelRow, ...] = ()
    generation: int = 0
    stale: tuple[Any, ...] = ()  # servers a dead console left (a start failed on them): start(stop_stale=True)

    @property
    def http_url(self) -> str | None:
        return self.server.http_url if self.server else None

    @property
    def grpc_url(self) -> str | None:
        return self.server.grpc_url if self.server else None

    @property
    def metrics_url(self) -> str | None:
        return self.server.metrics_url if self.server else None

    @property
    def server_name(self) -> str:
        """The server in a sentence (``tritonserver``)."""
        return self.server.name if self.server else "tritonserver"

    @property
    def infos(self) -> dict[str, ModelInfo]:
        """The READY models' configs."""
        return {m.name: m.info for m in self.models if m.state == "READY" and m.info is not None}

    @property
    def choices(self) -> dict[str, ModelInfo]:
        """What a model picker offers, by name: each READY model, then each LoRA adapter it serves (its config,
        picked as the adapter)."""
        return {choice.choice: choice for info in self.infos.values() for choice in info.choices()}

    @property
    def serving(self) -> bool:
        return self.phase in ("ready", "connected")


class ServerController:
    """The server a console talks to: one started here, or one reached by URL."""

    def __init__(self, on_change: Listener | None = None, on_log: Callable[[str], object] | None = None) -> None:
        self._lock = threading.RLock()
        self._on_change = on_change
        self._on_log = on_log
        self._server: TritonServer | None = None
        self._adapter: Adapter | None = None
        self._snap = Snapshot("idle", NOT_CONNECTED)
        self._log: deque[str] = deque(maxlen=LOG_KEEP)
        self._ready: frozenset[str] = frozenset()
        self._keeper: ModelKeeper | None = None  # the models of the server started here
        self._started: tuple[Path | None, tuple[str, ...], float, dict[str, Any]] | None = None  # the last start
        self._ports: dict[str, int | None] = {}  # the ports of the last server that started here

    # ---- state

    @property
    def snapshot(self) -> Snapshot:
        return self._snap

    @property
    def server(self) -> TritonServer | None:
        """The tritonserver started here, if any."""
        return self._server

    def log_tail(self, n: int = 60) -> list[str]:
        with self._lock:
            return list(self._log)[-n:]

    def _set(self, **changes: object) -> Snapshot:
        with self._lock:
            self._snap = snap = replace(self._snap, **changes)  # type: ignore[arg-type]
        if self._on_change is not None:
            self._on_change(snap)
        return snap

    def _moved(self, **changes: object) -> Snapshot:
        """A change of endpoint or models: the generation moves on."""
        return self._set(generation=self._snap.generation + 1, **changes)

    def _note(self, line: str) -> None:
        if logparse.is_noise(line) and line != logparse.NOISE_NOTE:  # the note names the noise it hides
            return
        with self._lock:
            self._log.append(line)
        if self._on_log is not None:
            self._on_log(line)

    # ---- start / connect / stop

    def start(self, repository: Path | None = None, models: Sequence[str] = (), timeout: float = START_TIMEOUT,
              **options: Any) -> None:
        """Start tritonserver on ``repository`` (None: the embedded samples) loading ``models`` (empty: all).

        ``options`` go to :class:`TritonServer` (ports, host, binary, extra_args, stop_stale ...).
        Returns at once; the snapshot follows the start. ServerError when a server is already here.
        """
        with self._lock:
            if self._snap.phase in BUSY or (self._server is not None and self._server.running):
                raise ServerError("a tritonserver started here is running: stop it first")
            self._adapter, self._ready, self._keeper = None, frozenset(), None
            self._started = (repository, tuple(models), timeout, options)
            self._log.clear()
            where = str(repository) if repository else "the embedded samples"
            self._moved(phase="starting", message=f"starting tritonserver on {where} ...", owned=True, server=None,
                        repository=str(repository or ""), models=())
        self._note(logparse.NOISE_NOTE)
        threading.Thread(target=self._start, args=(repository, tuple(models), timeout, options),
                         name="qc-server-start", daemon=True).start()

    def restart(self) -> None:
        """Start the last server started here again: the same repository, models and options, on the ports it had."""
        with self._lock:
            if self._started is None:
                raise ServerError("no tritonserver was started here")
            repository, models, timeout, options = self._started
            options = {**options, **self._ports}
        self.start(repository, models, timeout, **options)

    def _start(self, repository: Path | None, models: tuple[str, ...], timeout: float,
               options: dict[str, Any]) -> None:
        try:
            path = repository or embedded_repo(self._note)
            server = TritonServer(path, models=models, **options)
            with self._lock:
                if self._snap.phase != "starting":  # stopped meanwhile
                    return
                self._server = server
                self._set(repository=str(path))
            self._note(f"starting tritonserver on {path} ...")
            server.start(timeout=timeout, on_log=self._note)
            version = server.handle.describe_version()
        except Exception as exc:  # the thread's end: the UI must leave "starting" whatever happened
            with self._lock:
                if self._snap.phase == "starting":
                    for line in getattr(exc, "log_tail", [])[-15:]:
                        self._note(line)
                    self._server = None
                    self._moved(phase="failed", message=" ".join(str(exc).split()) or type(exc).__name__,
                                stale=tuple(getattr(exc, "servers", ())))
            return
        with self._lock:
            if self._snap.phase != "starting":
                return
            adapter = self._adapter = started_here(server.handle)
            self._keeper = ModelKeeper(server, self._note, self.poll)
            self._ports = {"http_port": server.http_port, "grpc_port": server.grpc_port,
                           "metrics_port": server.metrics_port}
            self._moved(phase="ready", message=f"tritonserver {version} started here (pid {server.pid})",
                        server=adapter)
        self.poll()

    def connect(self, url: str, grpc_url: str = "", api: str = "auto") -> Snapshot:
        """Use a running server at ``url`` (and ``grpc_url``, for a kind that has one); ``api`` names its kind
        (``auto``: what the URL says, see :func:`~.adapters.adapter_for`). ClientError when nothing answers."""
        adapter = adapter_for(url, api, grpc_url or None)
        message = adapter.connect(timeout=3.0)
        with self._lock:
            if self._snap.phase in BUSY or (self._server is not None and self._server.running):
                raise BadRequest("a tritonserver started here is running: stop it first")
            self._server, self._adapter, self._ready = None, adapter, frozenset()
            self._log.clear()
            self._moved(phase="connected", message=message, owned=False, server=adapter, repository="", models=())
        return self.poll()

    def stop(self, grace: float = 10.0, closing: bool = False) -> Snapshot:
        """Stop the server started here (a connected one is only let go); blocks until it is down (SIGKILL after
        ``grace`` seconds). ``closing``: the console ends with it (nothing to advise)."""
        with self._lock:
            server, self._server, self._adapter = self._server, None, None
            if server is None:
                return self._moved(phase="idle", message=NOT_CONNECTED, server=None, models=())
            self._moved(phase="stopping", message="stopping tritonserver ...", server=None, models=())
        note = logparse.stop_note(server.stop(grace), server.log_tail(LOG_KEEP))
        advice = "" if closing else ": start it again or connect by URL"
        return self._set(phase="stopped", message=f"tritonserver stopped{note}{advice}")

    def served_repository(self) -> Path | None:
        """The folder the server here loads its models from: the one started here, or a connected server's when it can
        be known (a tritonserver of this machine); None without a server or when unknown."""
        with self._lock:
            snap, adapter = self._snap, self._adapter
        if adapter is None or not snap.serving:
            return None
        return Path(snap.repository) if snap.owned else adapter.repository()

    def load(self, model: str) -> Snapshot:
        """Load ``model`` (generated into the repository served) into the server here, started here or connected;
        ServerError without one, OSError saying why the server cannot."""
        with self._lock:
            adapter, serving = self._adapter, self._snap.serving
        if adapter is None or not serving:
            raise ServerError(f"no server here to load {model} into")
        self._note(f"loading {model} into the running tritonserver ...")
        adapter.load_model(model)
        return self.poll()

    # ---- following the server

    def poll(self) -> Snapshot:
        """Read the models' states now; notice a server that died or stopped answering."""
        with self._lock:
            adapter, server, snap, keeper = self._adapter, self._server, self._snap, self._keeper
        if adapter is None or snap.phase in BUSY:
            return snap
        if server is not None and not server.running:
            return self._died(server)
        try:
            states = adapter.model_states()
        except (OSError, ValueError) as exc:
            if snap.phase != "unreachable":
                return self._set(phase="unreachable", message=f"{adapter.name} at {adapter.title()} does not "
                                                              f"answer: {' '.join(str(exc).split())}")
            return snap
        ready = frozenset(n for n, (state, _) in states.items() if state == "READY")
        failed = keeper.follow(states) if keeper is not None and server is not None else {}
        known = {m.name: m.info for m in snap.models}
        infos = {n: known.get(n) or self._info(adapter, n) for n in ready}
        rows = tuple(ModelRow(n, "FAILED", failed[n], None) if n in failed else
                     ModelRow(n, s, r.splitlines()[0][:200] if r else "", infos.get(n))
                     for n, (s, r) in sorted(states.items()))
        ready -= set(failed)
        phase = "ready" if snap.owned else "connected"
        message = snap.message if snap.phase == phase else f"{adapter.name} at {adapter.title()} answers again"
        with self._lock:
            if self._adapter is not adapter:  # stopped or replaced meanwhile
                return self._snap
            changed, self._ready = ready != self._ready, ready
        if changed:
            return self._moved(phase=phase, message=message, models=rows)
        return self._set(phase=phase, message=message, models=rows)

    @staticmethod
    def _info(adapter: Adapter, name: str) -> ModelInfo | None:
        with contextlib.suppress(OSError, ValueError):
            return adapter.listed_info(name)
        return None

    def _died(self, server: TritonServer) -> Snapshot:
        with self._lock:
            if self._server is not server:
                return self._snap
            self._server, self._adapter, self._keeper = None, None, None
        server.stop(grace=0)  # take down what it left behind (stubs, shared memory)
        return self._moved(phase="failed", message=f"tritonserver {server.exit_cause()}: start it again", server=None,
                           models=())
