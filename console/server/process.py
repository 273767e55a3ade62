"""Start, watch and stop a real ``tritonserver`` process on one model repository.

The server runs under :mod:`console.server.guard` in its own session: the guard, tritonserver and the Python
backend stubs form one process group, which :meth:`TritonServer.stop` takes down together, and which the guard
takes down by itself when this process dies without stopping it. Its command line (:mod:`.arguments`): every
visible folder loaded in explicit model-control mode (a killed generator's hidden leftovers are named, never
loaded), and a repository API that answers only the key :attr:`TritonServer.handle` sends (:mod:`.keys`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from repo_gen.staging import leftovers

from . import keys, logparse
from .arguments import server_arguments
from .errors import PortTaken, ServerError, StaleServerError, repository_not_found
from .health import ServerHandle
from .locate import backend_directory, find_tritonserver, server_env, stub_for_python, wheel_root
from .ports import free_ports, port_taken
from .procs import STOPPED, group_members, parent, process_state, take_down
from .pyenv import PythonEnv
from .serverlog import LOG_KEEP, LogCallback, ServerLog
from .stale import already_serving, find_servers, stop_servers
from .startup import wait_started
from .stubs import Stubs

GUARD = Path(__file__).with_name("guard.py")  # standard library only: run by path, isolated
HOST = "127.0.0.1"
START_TIMEOUT = 600.0  # s for the server and its models to be ready (a card's QPCs, a first CPU model preparation)


# --------------------------------------------------------------------------- the server


_LIVE: set[TritonServer] = set()  # running servers, stopped at interpreter exit


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop(grace=5)


class TritonServer:
    """A tritonserver process on one model repository; ports are picked free unless given.

    ``models``: the models to load (explicit model control); empty loads every model. A model that fails to
    load is named in the log and its state (FAILED, with the reason) while the others serve; the start fails
    only when none of them loads. ``python_env``: the environment the Python backend stubs run (default: this
    interpreter's); ``backends``: folders of Python-based backends (``NAME/model.py``) to serve beside Python.
    """

    def __init__(
        self,
        model_repository: str | os.PathLike[str],
        models: Sequence[str] = (),
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        binary: str | os.PathLike[str] | None = None,
        log_verbose: int = 0,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        host: str = HOST,
        stop_stale: bool = False,
        exclusive: bool = False,
        python_env: str | os.PathLike[str] | None = None,
        backends: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        self.model_repository = Path(model_repository).absolute()
        self.models = tuple(models)
        self.host = host  # the address tritonserver listens on: loopback unless told otherwise
        self._requested = (http_port, grpc_port, metrics_port)
        self.http_port, self.grpc_port, self.metrics_port = self._requested
        self._binary_arg = binary
        self.binary: Path | None = None
        self.log_verbose = log_verbose
        self.extra_args = tuple(extra_args)
        self.env = dict(env or {})
        self.stop_stale = stop_stale  # stop servers a dead console left on this repository or these ports
        self.exclusive = exclusive  # refuse to start beside a live server loading these models from this repository
        self.python_env = python_env
        self.backends = tuple(backends)
        self._proc: subprocess.Popen[str] | None = None
        self.log = ServerLog()
        self._lifeline: int | None = None  # write end of the guard's pipe, from a launch until the server is down
        self._regions: set[Path] = set()  # the stubs' shared memory seen while they ran: removed when it is down
        self._regions_lock = threading.Lock()
        self._stop_lock = threading.RLock()
        self._key = ""  # the restricted APIs' key of this launch (never logged; see guard)

    # ---- endpoints and state

    @property
    def handle(self) -> ServerHandle:
        """The server's endpoints and HTTP API."""
        return ServerHandle.on(self.host, self.http_port or 0, self.grpc_port, self.metrics_port, self._key)

    @property
    def http_url(self) -> str:
        return self.handle.http_url

    @property
    def grpc_url(self) -> str:
        return self.handle.grpc_url or ""

    @property
    def pid(self) -> int | None:
        """The process group id (the guard's pid)."""
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def stopped(self) -> bool:
        """tritonserver itself (the guard's child) is stopped by a signal: it answers nothing until continued."""
        guard = self.pid
        child = next((p for p in group_members(guard) if parent(p) == guard), None) if self.running and guard else None
        return child is not None and process_state(child) == STOPPED

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` log lines (stdout and stderr merged)."""
        return self.log.tail(n)

    # ---- lifecycle

    def command(self, backend_dir: Path | None) -> list[str]:
        """tritonserver's argument list (:func:`~.arguments.server_arguments`)."""
        assert self.binary is not None
        return server_arguments(self.binary, self.model_repository, self.models, self.host,
                                (self.http_port, self.grpc_port, self.metrics_port), self.log_verbose, backend_dir,
                                self.extra_args)

    def _clear_stale(self) -> None:
        """Servers left by a console that is gone, on this repository or these ports: stop them or say so; and,
        ``exclusive``, a live one already serving these models from this repository."""
        requested = [p for p in self._requested if p is not None]
        found = find_servers(self.model_repository, requested)
        twin = already_serving(found, self.model_repository, self.models) if self.exclusive else None
        if twin:
            raise ServerError(twin)
        stale = [s for s in found if s.orphaned]
        if stale and not self.stop_stale:
            raise StaleServerError(stale)
        stop_servers(stale)
        for server in stale:  # heard by on_log: serve's output, the TUI's and web's server logs
            self.log.record(f"qaic-console: stopped {server.describe()}")

    def _pick_ports(self) -> None:
        requested = [p for p in self._requested if p is not None]
        if len(set(requested)) != len(requested):
            raise ServerError(f"the HTTP, gRPC and metrics ports must differ (got {requested})")
        for port in requested:
            taken = port_taken(port)
            if taken:
                raise ServerError(f"{taken}: choose another or leave it out to pick a free one")
        picked = iter(p for p in free_ports(6) if p not in requested)
        self.http_port, self.grpc_port, self.metrics_port = (
            p if p is not None else next(picked) for p in self._requested
        )

    def start(self, timeout: float = START_TIMEOUT, on_log: LogCallback | None = None) -> TritonServer:
        """Launch the server and block until it and its models are ready.

        ``on_log`` receives every log line (from a reader thread) for the server's lifetime.
        Raises ServerError (with the log's last lines) if a model fails to load, the process exits,
        or ``timeout`` seconds pass; the process group is stopped before raising.
        """
        if self.running:
            raise ServerError("tritonserver is already running")
        if not self.model_repository.is_dir():
            raise ServerError(repository_not_found(self.model_repository))
        missing = [m for m in self.models if not (self.model_repository / m).is_dir()]
        if missing:
            present = sorted(p.name for p in self.model_repository.iterdir() if (p / "config.pbtxt").is_file())
            raise ServerError(f"not in {self.model_repository}: {', '.join(missing)} (it holds "
                              f"{', '.join(present) or 'no model'})")
        self.binary = find_tritonserver(self._binary_arg)
        python = PythonEnv.at(self.python_env) if self.python_env else PythonEnv.current()
        backend_dir = backend_directory(self.binary, python, self.backends)
        if backend_dir is None:
            stub_for_python(self.binary, python.version)
        env = server_env(self.binary, self.env, python)
        self.log.on_log = on_log
        for line in leftovers(self.model_repository):  # never loaded: Triton would take them for models
            self.log.record(f"qaic-console: ignoring {line}")
        if wheel_root(self.binary) is not None and python.numpy_too_new:
            self.log.record(f"qaic-console: note: {python.describe()} has numpy {python.numpy}: nvidia-pytriton's "
                            "stub breaks on string tensors with numpy 2 (the wheel pins numpy<2): `pip install "
                            "'numpy<2'` there")
        self._clear_stale()
        self._pick_ports()
        try:
            return self._launch(backend_dir, env, timeout)
        except PortTaken:
            if None not in self._requested:
                raise
        self._pick_ports()  # a picked port was taken meanwhile: one more try with fresh ports
        return self._launch(backend_dir, env, timeout)

    def _launch(self, backend_dir: Path | None, env: dict[str, str], timeout: float) -> TritonServer:
        read_end, self._lifeline = os.pipe()
        os.set_inheritable(read_end, True)
        self._key = secrets.token_urlsafe(32)
        os.write(self._lifeline, f"{self._key}\n".encode())  # the guard's first line: the key, out of every argv
        guard = [sys.executable, "-I", str(GUARD), str(read_end), "--"]
        try:
            self._proc = subprocess.Popen(
                guard + self.command(backend_dir),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                text=True,
                errors="replace",
                bufsize=1,
                start_new_session=True,
                pass_fds=(read_end,),
            )
        finally:
            os.close(read_end)
        keys.remember(self.http_port or 0, self._key, self._proc.pid)  # for this user's other consoles
        _LIVE.add(self)
        self.log.follow(self._proc)
        try:
            wait_started(self._proc, self.handle, self.log, self.models, timeout)
            self.stub_instances()  # the regions of the stubs the start made
        except BaseException:
            self.stop()
            raise
        return self

    def stub_instances(self) -> dict[str, int]:
        """``{model instance name: pid}`` of the model instances' Python backend stubs alive in the server's group
        (their shared-memory regions are remembered: :meth:`stop` removes what a killed stub leaves)."""
        if self._proc is None:
            return {}
        stubs = Stubs.of(self._proc.pid)
        with self._regions_lock:
            self._regions |= stubs.regions
        return stubs.instances

    def exit_cause(self) -> str:
        """How the server ended, in a few words (:func:`~.logparse.exit_cause`); '' while it runs."""
        code = self.wait(0)
        return "" if code is None else logparse.exit_cause(code, self.log.tail(LOG_KEEP))

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the server process to exit; its exit code, or None on timeout."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM the whole process group, wait ``grace`` seconds, then SIGKILL what is left.

        Triton's graceful exit (which runs the models' ``finalize``) first waits for open HTTP
        connections to close: close HTTP clients before stopping, or the grace period runs out.
        Returns the server's exit code (negative: killed by that signal).
        """
        with self._stop_lock:
            proc = self._proc
            if proc is None or self._lifeline is None:  # once per launch: later, its group id may be another's
                return proc.returncode if proc else None
            with self._regions_lock:
                regions, self._regions = self._regions, set()
            take_down(proc, time.monotonic() + grace, self.log.exit_expired, regions)
            keys.forget(self.http_port or 0, proc.pid)
            self.log.join(timeout=5)
            if proc.stdout is not None:
                proc.stdout.close()
            os.close(self._lifeline)
            self._lifeline = None
            _LIVE.discard(self)
        return proc.returncode

    def __enter__(self) -> TritonServer:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
