"""Find, start, watch and stop a real ``tritonserver`` process.

Two kinds of server are supported:

* the Qualcomm container's ``/opt/tritonserver/bin/tritonserver`` (its default backends are kept);
* the CPU-only server shipped in the ``nvidia-pytriton`` wheel. Its Python backend is assembled once
  into a cache directory (``libtriton_python.so``, ``triton_python_backend_utils.py`` and the stub for
  the running Python), ``nvidia_pytriton.libs`` goes on ``LD_LIBRARY_PATH`` and the running
  interpreter's ``bin/`` goes first on ``PATH`` (the stub's embedded Python takes its environment from
  the first ``python3`` on ``PATH``).

The server runs in its own session / process group so that :meth:`TritonServer.stop` can take the
Python backend stub processes down with it.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from backend_model.models import cache_root

SYSTEM_TRITONSERVER = Path("/opt/tritonserver/bin/tritonserver")
ENV_TRITONSERVER = "QAIC_TRITONSERVER"
STUB_NAME = "triton_python_backend_stub"
PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
SHM_PREFIX = "/dev/shm/triton_python_backend_shm_region_"
LOG_KEEP = 500
HOST = "127.0.0.1"

LogCallback = Callable[[str], None]

_FAILED_LOAD = re.compile(r"failed to load '(?P<name>[^']+)' version \d+: (?P<reason>.*)")
_LOG_MESSAGE = re.compile(r'^[EW]\d{4} [\d:.]+\s+\d+ \S+\] "(?P<msg>.*)"\s*$')
_GETOPT_ERROR = re.compile(r"^\S*tritonserver: ")
HARMLESS = ("CudaDriverHelper", "pinned memory", "DCGM", "NVML")


class ServerError(RuntimeError):
    """The server could not be found, started or kept running; ``str()`` is one line saying why.

    ``log_tail`` holds the last lines of the server log (may be empty).
    """

    def __init__(self, message: str, log_tail: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.log_tail = list(log_tail)

    def details(self) -> str:
        """The message followed by the server's last log lines."""
        if not self.log_tail:
            return str(self)
        return "\n".join([str(self), "--- tritonserver log (last lines) ---", *self.log_tail])


# --------------------------------------------------------------------------- locating the binary


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def pytriton_dir() -> Path | None:
    """``<site-packages>/pytriton/tritonserver`` of the installed wheel (found without importing it)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    return root if root.is_dir() else None


def find_tritonserver(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The tritonserver to run: ``explicit``, ``$QAIC_TRITONSERVER``, /opt/tritonserver, the pytriton wheel."""
    for given, origin in ((explicit, "--tritonserver"), (os.environ.get(ENV_TRITONSERVER), ENV_TRITONSERVER)):
        if given:
            path = Path(given).expanduser()
            if not _executable(path):
                raise ServerError(f"{origin}: {path} is not an executable tritonserver")
            return path.absolute()
    if _executable(SYSTEM_TRITONSERVER):
        return SYSTEM_TRITONSERVER
    wheel = pytriton_dir()
    if wheel is not None and _executable(wheel / "bin" / "tritonserver"):
        return wheel / "bin" / "tritonserver"
    raise ServerError(
        f"tritonserver not found: `pip install nvidia-pytriton` (CPU) or set {ENV_TRITONSERVER}=/path/to/tritonserver"
    )


def wheel_root(binary: Path) -> Path | None:
    """The wheel's ``tritonserver`` directory when ``binary`` is the nvidia-pytriton one, else None."""
    root = binary.resolve().parent.parent
    has_stubs = (root / "python_backend_stubs").is_dir()
    return root if has_stubs and (root / "backends" / "python").is_dir() else None


def python_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def stub_for_python(binary: Path) -> Path:
    """The Python backend stub the server will use for this Python; ServerError when there is none."""
    root = wheel_root(binary)
    if root is None:
        stub = binary.resolve().parent.parent / "backends" / "python" / STUB_NAME
        if not stub.is_file():
            raise ServerError(f"the Python backend stub is missing: {stub}")
        return stub
    stub = root / "python_backend_stubs" / python_tag() / STUB_NAME
    if not stub.is_file():
        have = sorted(p.name for p in (root / "python_backend_stubs").iterdir() if (p / STUB_NAME).is_file())
        raise ServerError(
            f"nvidia-pytriton has no Python backend stub for Python {python_tag()} "
            f"(it has {', '.join(have) or 'none'}): use one of those Python versions"
        )
    return stub


def wheel_version(binary: Path) -> str | None:
    """Version of the nvidia-pytriton wheel that ships ``binary`` (None when not from the wheel)."""
    if wheel_root(binary) is None:
        return None
    try:
        return importlib.metadata.version("nvidia-pytriton")
    except importlib.metadata.PackageNotFoundError:
        return None


def triton_version(binary: Path) -> str:
    """A cheap description of the server version (tritonserver has no ``--version``)."""
    version_file = binary.resolve().parent.parent / "TRITON_VERSION"
    with contextlib.suppress(OSError):
        return f"Triton {version_file.read_text().strip()}"
    wheel = wheel_version(binary)
    return f"nvidia-pytriton {wheel} wheel" if wheel else "version unknown"


# --------------------------------------------------------------------------- backend dir + environment


def _link(src: Path, dst: Path) -> None:
    """Make ``dst`` point at ``src`` (symlink, else copy), atomically and only when needed."""
    if dst.is_symlink() and Path(os.readlink(dst)) == src:
        return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        tmp.symlink_to(src)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def backend_directory(binary: Path) -> Path | None:
    """For the wheel's server, the assembled ``--backend-directory``; None for other servers."""
    root = wheel_root(binary)
    if root is None:
        return None
    stub = stub_for_python(binary)
    key = hashlib.sha256(str(root).encode()).hexdigest()[:8]
    backends = cache_root() / "triton-backends" / f"py{python_tag()}-{key}"
    python_dir = backends / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for name in PYTHON_BACKEND_FILES:
        _link(root / "backends" / "python" / name, python_dir / name)
    _link(stub, python_dir / STUB_NAME)
    return backends


def _prepend(env: dict[str, str], var: str, path: Path | str) -> None:
    parts = [p for p in env.get(var, "").split(os.pathsep) if p and p != str(path)]
    env[var] = os.pathsep.join([str(path), *parts])


def server_env(binary: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for tritonserver: the interpreter's bin/ first on PATH, wheel libs on LD path."""
    env = dict(os.environ)
    env.update(extra or {})
    _prepend(env, "PATH", Path(sys.executable).parent)
    root = wheel_root(binary)
    if root is not None:
        libs = root.parent.parent / "nvidia_pytriton.libs"
        if libs.is_dir():
            _prepend(env, "LD_LIBRARY_PATH", libs)
        # The stub links libpython3.X by soname: give it this interpreter's, not the system's
        # (an older patch release lacks symbols that this interpreter's extension modules need).
        libdir = sysconfig.get_config_var("LIBDIR")
        if libdir and any(Path(libdir).glob(f"libpython{sys.version_info.major}.{sys.version_info.minor}*.so*")):
            _prepend(env, "LD_LIBRARY_PATH", Path(libdir))
    return env


# --------------------------------------------------------------------------- ports


def free_port() -> int:
    """A TCP port free right now on all interfaces."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports (all held open together while picking)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def port_in_use(port: int) -> bool:
    """True when something already binds/listens on ``port`` (tested the way the server binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return True
    return False


# --------------------------------------------------------------------------- process group helpers


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids of process group ``pgid``."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _shm_regions(pids: Iterable[int]) -> set[Path]:
    """Python-backend shared-memory files (``/dev/shm/triton_python_backend_shm_region_*``) mapped by ``pids``."""
    regions = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path("/proc", str(pid), "maps").read_text().splitlines():
                fields = line.split(maxsplit=5)
                path = fields[5] if len(fields) == 6 else ""
                if path.startswith(SHM_PREFIX) and not path.endswith("(deleted)"):
                    regions.add(Path(path))
    return regions


def _group_exists(pgid: int) -> bool:
    """Whether any process, zombies included, is still in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _poll(done: Callable[[], bool], deadline: float, interval: float = 0.05) -> bool:
    """Call ``done`` until it is true or ``deadline`` (monotonic) passes; its last answer."""
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


# --------------------------------------------------------------------------- log parsing


def _log_message(line: str) -> str:
    """The message of a glog-style line (``E1129 ... file.cc:12] "msg"``), first line unescaped."""
    match = _LOG_MESSAGE.match(line)
    msg = match.group("msg") if match else line.strip()
    return msg.split("\\n", 1)[0].strip()


def _failed_model(line: str) -> tuple[str, str] | None:
    match = _FAILED_LOAD.search(line)
    if not match:
        return None
    return match.group("name"), _log_message(match.group("reason").rstrip('"'))


def _exit_reason(lines: Sequence[str]) -> str:
    """The most telling error line of a server that exited."""
    for line in lines:  # a bad command line: getopt's "<argv0>: complaint" (then the usage text)
        if _GETOPT_ERROR.match(line):
            return line.strip()
    for line in reversed(lines):
        if line.startswith("error:"):
            return line[len("error:") :].strip()
        if line.startswith("E") and _LOG_MESSAGE.match(line):
            msg = _log_message(line)
            if not any(h in msg for h in HARMLESS):
                return msg
    return lines[-1].strip() if lines else "no output"


# --------------------------------------------------------------------------- the server


_LIVE: set[TritonServer] = set()  # running servers, stopped at interpreter exit


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop(grace=5)


class TritonServer:
    """A tritonserver process on one model repository; ports are picked free unless given."""

    def __init__(
        self,
        model_repository: str | os.PathLike[str],
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        binary: str | os.PathLike[str] | None = None,
        log_verbose: int = 0,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        model_control_mode: str = "none",
        host: str = HOST,
    ) -> None:
        self.model_repository = Path(model_repository).absolute()
        self.host = host  # the address tritonserver listens on: loopback unless told otherwise
        self._connect = HOST if host in ("0.0.0.0", "::", "") else host
        self._requested = (http_port, grpc_port, metrics_port)
        self.http_port, self.grpc_port, self.metrics_port = self._requested
        self._binary_arg = binary
        self.binary: Path | None = None
        self.log_verbose = log_verbose
        self.extra_args = tuple(extra_args)
        self.env = dict(env or {})
        self.model_control_mode = model_control_mode
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._lines: deque[str] = deque(maxlen=LOG_KEEP)
        self._lock = threading.Lock()
        self._failures: list[tuple[str, str]] = []
        self._on_log: LogCallback | None = None

    @classmethod
    def attach(cls, http_url: str) -> TritonServer:
        """A handle on a running server this console did not start: its HTTP queries only."""
        address = http_url.split("://", 1)[-1].rstrip("/")
        host, _, port = address.rpartition(":")
        if not port.isdigit():
            raise ServerError(f"HTTP URL {http_url!r}: expected host:port")
        return cls(".", http_port=int(port), host=host or HOST)

    # ---- endpoints and state

    @property
    def http_url(self) -> str:
        """``127.0.0.1:<port>`` (the form tritonclient.http expects)."""
        return f"{self._connect}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``127.0.0.1:<port>`` (the form tritonclient.grpc expects)."""
        return f"{self._connect}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self._connect}:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        """The server's pid, which is also its process group id."""
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` log lines (stdout and stderr merged)."""
        with self._lock:
            lines = list(self._lines)
        return lines[-n:] if n > 0 else []

    # ---- HTTP helpers

    def _request(self, path: str, body: bytes | None = None, timeout: float = 2.0) -> bytes:
        req = urllib.request.Request(f"http://{self.http_url}{path}", data=body, method="POST" if body else "GET")
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read()

    def is_ready(self) -> bool:
        """``GET /v2/health/ready`` answered 200."""
        try:
            self._request("/v2/health/ready", timeout=1.0)
        except (OSError, urllib.error.URLError):
            return False
        return True

    def model_states(self) -> dict[str, tuple[str, str]]:
        """``{model: (state, reason)}`` from ``POST /v2/repository/index``."""
        index = json.loads(self._request("/v2/repository/index", body=b"{}", timeout=5.0) or b"[]")
        states: dict[str, tuple[str, str]] = {}
        for entry in index:
            if entry.get("version") or entry["name"] not in states:
                states[entry["name"]] = (entry.get("state", ""), entry.get("reason", ""))
        return states

    def server_version(self) -> str:
        """The version the running server reports (``GET /v2``)."""
        return json.loads(self._request("/v2")).get("version", "")

    # ---- lifecycle

    def _command(self, backend_dir: Path | None) -> list[str]:
        assert self.binary is not None
        args = [
            str(self.binary),
            f"--model-repository={self.model_repository}",
            f"--model-control-mode={self.model_control_mode}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            f"--log-verbose={self.log_verbose}",
            f"--http-address={self.host}",
            f"--grpc-address={self.host}",
            f"--metrics-address={self.host}",
        ]
        if backend_dir is not None:
            args.append(f"--backend-directory={backend_dir}")
        return [*args, *self.extra_args]

    def _pick_ports(self) -> None:
        requested = [p for p in self._requested if p is not None]
        if len(set(requested)) != len(requested):
            raise ServerError(f"the HTTP, gRPC and metrics ports must differ (got {requested})")
        for port in requested:
            if port_in_use(port):
                raise ServerError(f"port {port} is in use: choose another or leave it out to pick a free one")
        picked = iter(p for p in free_ports(6) if p not in requested)
        self.http_port, self.grpc_port, self.metrics_port = (
            p if p is not None else next(picked) for p in self._requested
        )

    def start(self, timeout: float = 300.0, on_log: LogCallback | None = None) -> TritonServer:
        """Launch the server and block until it and all its models are ready.

        ``on_log`` receives every log line (from a reader thread) for the server's lifetime.
        Raises ServerError (with the log's last lines) if a model fails to load, the process exits,
        or ``timeout`` seconds pass; the process group is stopped before raising.
        """
        if self.running:
            raise ServerError("tritonserver is already running")
        if not self.model_repository.is_dir():
            raise ServerError(f"model repository not found: {self.model_repository}")
        self.binary = find_tritonserver(self._binary_arg)
        backend_dir = backend_directory(self.binary)
        if backend_dir is None:
            stub_for_python(self.binary)
        env = server_env(self.binary, self.env)
        self._on_log = on_log
        self._pick_ports()
        try:
            return self._launch(backend_dir, env, timeout)
        except ServerError as exc:
            if None not in self._requested or "already in use" not in str(exc):
                raise
        self._pick_ports()  # a picked port was taken meanwhile: one more try with fresh ports
        return self._launch(backend_dir, env, timeout)

    def _launch(self, backend_dir: Path | None, env: dict[str, str], timeout: float) -> TritonServer:
        with self._lock:
            self._lines.clear()
            self._failures.clear()
        self._proc = subprocess.Popen(
            self._command(backend_dir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        _LIVE.add(self)
        self._reader = threading.Thread(target=self._read_log, args=(self._proc,), daemon=True)
        self._reader.start()
        try:
            self._wait_ready(time.monotonic() + timeout, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _read_log(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        with contextlib.suppress(ValueError, OSError):  # the pipe closed under us by stop()
            for raw in proc.stdout:
                self._record(raw.rstrip("\n"))

    def _record(self, line: str) -> None:
        failed = _failed_model(line)
        with self._lock:
            self._lines.append(line)
            if failed:
                self._failures.append(failed)
        if self._on_log is not None:
            with contextlib.suppress(Exception):
                self._on_log(line)

    def _fail(self, message: str) -> ServerError:
        return ServerError(message, self.log_tail(40))

    def _check_failures(self) -> None:
        with self._lock:
            failures = list(self._failures)
        if failures:
            name, reason = failures[0]
            raise self._fail(f"model '{name}' failed to load: {reason}")

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        assert self._proc is not None
        while True:
            self._check_failures()
            code = self._proc.poll()
            if code is not None:
                if self._reader is not None:
                    self._reader.join(timeout=2)
                self._check_failures()
                raise self._fail(f"tritonserver exited with code {code}: {_exit_reason(self.log_tail(LOG_KEEP))}")
            if self.is_ready():
                self._check_unavailable()
                return
            if time.monotonic() >= deadline:
                hint = "models still loading? raise the timeout"
                raise self._fail(f"tritonserver not ready after {timeout:g} s ({hint})")
            time.sleep(0.1)

    def _check_unavailable(self) -> None:
        for name, (state, reason) in self.model_states().items():
            if state == "UNAVAILABLE":
                raise self._fail(f"model '{name}' failed to load: {reason.splitlines()[0] if reason else state}")

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
        proc = self._proc
        if proc is None:
            return None
        pgid = proc.pid
        deadline = time.monotonic() + grace
        shm = _shm_regions(_group_members(pgid))
        if proc.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
        try:
            proc.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            self._kill_group(pgid, shm)
            proc.wait()
        if not _poll(lambda: not _group_members(pgid), max(deadline, time.monotonic() + 0.5)):
            self._kill_group(pgid, shm)
        _poll(lambda: not _group_members(pgid), time.monotonic() + 5)
        # stubs orphaned by a kill are zombies until init reaps them (about 1 s here): wait a little
        _poll(lambda: not _group_exists(pgid), time.monotonic() + 3)
        for region in shm:  # left behind only when the backend was killed
            with contextlib.suppress(OSError):
                region.unlink()
        if self._reader is not None:
            self._reader.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
        _LIVE.discard(self)
        return proc.returncode

    @staticmethod
    def _kill_group(pgid: int, shm: set[Path]) -> None:
        shm |= _shm_regions(_group_members(pgid))
        _signal_group(pgid, signal.SIGKILL)

    def __enter__(self) -> TritonServer:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
