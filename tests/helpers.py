"""Helpers shared by the tests (importable: ``pythonpath = tests`` in pyproject)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

SESSION_MARK = "QAIC_TEST_SESSION"
SERVER_NAMES = ("tritonserver", "triton_python_backend_stub", "guard.py")


def wait_for_log(server, needle: str, timeout: float = 30.0, before: Collection[str] = ()) -> str | None:
    """The newest log line of ``server`` containing ``needle`` and not in ``before``; polls up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        fresh = [line for line in server.log_tail(500) if needle in line and line not in before]
        if fresh or time.monotonic() >= deadline:
            return fresh[-1] if fresh else None
        time.sleep(0.05)


def marked_servers(mark: str) -> list[tuple[int, str]]:
    """(pid, command) of live tritonserver / backend stub / guard processes whose environment has ``mark``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path("/proc", entry, "environ").read_bytes()
            cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        marked = f"{SESSION_MARK}={mark}".encode() in environ.split(b"\0")
        if state != "Z" and marked and any(name in cmdline for name in SERVER_NAMES):
            found.append((int(entry), cmdline[:160]))
    return found


@lru_cache(maxsize=1)
def python38() -> str | None:
    """A working Python 3.8 interpreter (on PATH, or pyenv's), or None."""
    found = [shutil.which("python3.8"), *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))]
    for candidate in filter(None, found):
        try:
            done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                  text=True, timeout=30)
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == "(3, 8)":
            return candidate
    return None
