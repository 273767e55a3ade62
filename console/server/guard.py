"""``python -I guard.py FD -- tritonserver ...``: run tritonserver so it cannot outlive the console.

The console starts this guard in a new session (so the guard, tritonserver and the Python backend
stubs share one process group) and keeps the write end of a pipe whose read end is ``FD``. When the
console ends, however it ends (SIGKILL and OOM kills included), the pipe closes: the guard then
stops the whole group (SIGTERM, a grace period, SIGKILL). Should the guard itself be killed,
tritonserver gets SIGKILL (a parent-death signal). SIGTERM and SIGINT sent to the group reach
tritonserver; the guard itself waits for it and exits as it did. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

GRACE = 5.0  # seconds between SIGTERM and SIGKILL when the console is gone


def _kill_group(sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(os.getpgrp(), sig)


def _kill_others() -> None:
    """SIGKILL every other process of this group (Python backend stubs a crashed server left)."""
    group, me = os.getpgrp(), os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)


def main(argv: list[str]) -> int:
    fd, command = int(argv[0]), argv[2:]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # meant for tritonserver; the guard follows it
    child = subprocess.Popen(command, restore_signals=True, preexec_fn=_reset_signals)
    orphaned_at = None
    while child.poll() is None:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready and orphaned_at is None and not os.read(fd, 1):  # EOF: the console is gone
            orphaned_at = time.monotonic()
            _kill_group(signal.SIGTERM)
        if orphaned_at is not None and time.monotonic() - orphaned_at > GRACE:
            _kill_group(signal.SIGKILL)
    if orphaned_at is not None:
        _kill_group(signal.SIGKILL)  # stubs that outlived tritonserver
    _kill_others()  # tritonserver is gone (stopped or crashed): nothing of its group may stay
    code = child.returncode
    if code < 0:  # die the way tritonserver died, so the console sees the same status
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


PR_SET_PDEATHSIG = 1


def _reset_signals() -> None:
    """In tritonserver before exec: default signals, and SIGKILL when the guard dies (killed with the console)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):  # Linux only: elsewhere the pipe alone guards
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
