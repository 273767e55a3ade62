"""Processes as /proc shows them: process groups, arguments, parents, signals, shared memory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

SHM_PREFIX = "/dev/shm/triton_python_backend_shm_region_"  # the Python backend's shared memory


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids of process group ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
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


def cmdline(pid: int) -> list[str]:
    """A process's arguments ([] when it is gone or not ours to read)."""
    try:
        raw = Path("/proc", str(pid), "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def parent(pid: int) -> int:
    """The parent's pid (0 when ``pid`` is gone)."""
    try:
        stat = Path("/proc", str(pid), "stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rfind(")") + 2 :].split()[1])


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_exists(pgid: int) -> bool:
    """Whether any process, zombies included, is still in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def shm_regions(pids: Iterable[int]) -> set[Path]:
    """Python-backend shared-memory files mapped by ``pids`` (removed after a kill)."""
    regions = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path("/proc", str(pid), "maps").read_text().splitlines():
                fields = line.split(maxsplit=5)
                path = fields[5] if len(fields) == 6 else ""
                if path.startswith(SHM_PREFIX) and not path.endswith("(deleted)"):
                    regions.add(Path(path))
    return regions


def poll_until(done: Callable[[], bool], deadline: float, interval: float = 0.05) -> bool:
    """Call ``done`` until it is true or ``deadline`` (monotonic) passes; its last answer."""
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


def take_down(proc: subprocess.Popen[str], deadline: float, given_up: threading.Event) -> None:
    """SIGTERM the process group ``proc`` leads and SIGKILL what is left at ``deadline``, or once ``given_up`` is
    set (tritonserver stopped waiting for its requests: it can hang on a dead stub); then remove the Python
    backend's shared memory that a kill leaves behind."""
    pgid = proc.pid
    shm = shm_regions(group_members(pgid))

    def kill() -> None:
        shm.update(shm_regions(group_members(pgid)))
        signal_group(pgid, signal.SIGKILL)

    if proc.poll() is None:
        given_up.clear()
        signal_group(pgid, signal.SIGTERM)
    poll_until(lambda: proc.poll() is not None or given_up.is_set(), deadline)
    if proc.poll() is None:
        kill()
        proc.wait()
    if not poll_until(lambda: not group_members(pgid), max(deadline, time.monotonic() + 0.5)):
        kill()
    poll_until(lambda: not group_members(pgid), time.monotonic() + 5)
    # stubs orphaned by a kill are zombies until init reaps them (about 1 s here): wait a little
    poll_until(lambda: not group_exists(pgid), time.monotonic() + 3)
    for region in shm:  # left behind only when the backend was killed
        with contextlib.suppress(OSError):
            region.unlink()
