"""tritonservers left behind: found by repository or port, described, and stopped on request.

A server this console starts cannot outlive it (see :mod:`.guard`), but one started by an older
console, by hand, or whose guard was killed too, can keep a repository's ports. ``orphaned`` marks
one whose parent is gone (it was re-parented to init).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .procs import cmdline, group_members, parent

PORT_FLAGS = ("--http-port", "--grpc-port", "--metrics-port")


@dataclass(frozen=True)
class RunningServer:
    """A tritonserver process found on this machine."""

    pid: int
    repository: str
    ports: tuple[int, ...]
    orphaned: bool
    models: tuple[str, ...] = ("*",)  # what it loads (its --load-model values; "*": every model)
    http_url: str = ""  # host:port of its HTTP endpoint, when its arguments name the port

    def describe(self) -> str:
        ports = "/".join(str(p) for p in self.ports) or "default ports"
        who = "left by a console that is gone" if self.orphaned else "still attached to its parent"
        return f"tritonserver pid {self.pid} on {self.repository} (ports {ports}; {who})"

    def loads(self, model: str) -> bool:
        return "*" in self.models or model in self.models


def _server(pid: int) -> RunningServer | None:
    args = cmdline(pid)
    if not args or not args[0].endswith("tritonserver"):
        return None
    values = [(flag, value) for flag, _, value in (a.partition("=") for a in args if a.startswith("--") and "=" in a)]
    flags = dict(values)
    ports = tuple(int(v) for f, v in values if f in PORT_FLAGS and v.isdigit())
    models = tuple(v for f, v in values if f == "--load-model") or ("*",)
    host = flags.get("--http-address", "127.0.0.1").replace("0.0.0.0", "127.0.0.1")
    http_url = f"{host}:{flags['--http-port']}" if "--http-port" in flags else ""
    return RunningServer(pid, flags.get("--model-repository", ""), ports, parent(pid) <= 1, models, http_url)


def find_servers(repository: str | Path | None = None, ports: Iterable[int] = ()) -> list[RunningServer]:
    """tritonservers serving ``repository`` or holding one of ``ports``."""
    wanted = set(ports)
    where = str(Path(repository).absolute()) if repository else None
    found = []
    for entry in os.listdir("/proc"):
        server = _server(int(entry)) if entry.isdigit() else None
        if server is not None and ((where and server.repository == where) or wanted & set(server.ports)):
            found.append(server)
    return found


def already_serving(servers: Iterable[RunningServer], repository: Path, models: Sequence[str]) -> str | None:
    """One line naming the live server among ``servers`` that serves ``models`` (empty: all) from ``repository``,
    or None: a second server on them would only take the memory and the CPUs twice."""
    for server in servers:
        shared = [m for m in models if server.loads(m)]
        if not server.orphaned and server.repository == str(repository) and (shared or not models):
            use = f"use it (--url {server.http_url})" if server.http_url else "use it"
            what = ", ".join(shared) or "this repository"
            return f"{server.describe()} already serves {what}: {use} or stop it first"
    return None


def stop_servers(servers: Iterable[RunningServer], grace: float = 5.0) -> None:
    """SIGTERM each server's process group (its stubs with it), SIGKILL what is left after ``grace`` s."""
    groups = set()
    for server in servers:
        try:
            groups.add(os.getpgid(server.pid))
        except ProcessLookupError:
            continue
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                continue
        deadline = time.monotonic() + grace
        while any(group_members(g) for g in groups) and time.monotonic() < deadline:
            time.sleep(0.1)
