"""tritonservers left behind: found by repository or port, described, and stopped on request.

A server this console starts cannot outlive it (see :mod:`.guard`), but one started by an older
console, by hand, or whose guard was killed too, can keep a repository's ports. ``orphaned`` marks
one whose parent is gone (it was re-parented to init).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .procs import cmdline, group_members, parent

PORT_FLAGS = ("--http-port=", "--grpc-port=", "--metrics-port=")


@dataclass(frozen=True)
class RunningServer:
    """A tritonserver process found on this machine."""

    pid: int
    repository: str
    ports: tuple[int, ...]
    orphaned: bool

    def describe(self) -> str:
        ports = "/".join(str(p) for p in self.ports) or "default ports"
        who = "left by a console that is gone" if self.orphaned else "still attached to its parent"
        return f"tritonserver pid {self.pid} on {self.repository} (ports {ports}; {who})"


def _server(pid: int) -> RunningServer | None:
    args = cmdline(pid)
    if not args or not args[0].endswith("tritonserver"):
        return None
    repository = next((a.split("=", 1)[1] for a in args if a.startswith("--model-repository=")), "")
    ports = tuple(int(a.split("=", 1)[1]) for a in args if a.startswith(PORT_FLAGS) and a.split("=", 1)[1].isdigit())
    return RunningServer(pid, repository, ports, parent(pid) <= 1)


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
