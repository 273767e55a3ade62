"""``python -I guard.py FD -- tritonserver ...``: run tritonserver so it cannot outlive the console.

The console starts this guard in a new session (so the guard, tritonserver and the Python backend
stubs share one process group) and keeps the write end of a pipe whose read end is ``FD``. When the
console ends, however it ends (SIGKILL and OOM kills included), the pipe closes: the guard then
stops the whole group (SIGTERM, a grace period, SIGKILL). Should the guard itself be killed,
tritonserver gets SIGKILL (a parent-death signal). SIGTERM and SIGINT sent to the group reach
tritonserver; the guard itself waits for it and exits as it did. Standard library only.

The first line the console writes into the pipe is a secret: it replaces :data:`SECRET` in the command's
arguments, so the guard's own command line never holds it. tritonserver takes its repository API key on its
command line only (no file, no environment variable), so once it has read its arguments (its first thread
starts after that) the guard overwrites the secret in tritonserver's argument memory: ``ps`` and
``/proc/PID/cmdline`` show it only while tritonserver's libraries load (about 0.1 s).
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
SECRET = "@qaic-console-secret@"  # in the command: the secret the console wrote into the pipe
HIDE_WITHIN = 60.0  # s for tritonserver to start its first thread (it has read its arguments then)


def _kill_group(sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(os.getpgrp(), sig)


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (the third field first); [] when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return []


def _kill_others() -> None:
    """SIGKILL every other process of this group (Python backend stubs a crashed server left)."""
    group, me = os.getpgrp(), os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me and (fields := _stat(int(entry))) and int(fields[2]) == group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)


def _read_secret(fd: int) -> str | None:
    """The first line of the pipe (None: the console closed it first)."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            return None
        line += byte
    return line[:-1].decode()


def _hide(child: subprocess.Popen[bytes], secret: str) -> None:
    """Overwrite ``secret`` in ``child``'s argument memory once it runs a second thread (its arguments are read and
    copied then); the overwrite is random, so a child that had not read them yet would hold a key no one knows."""
    deadline = time.monotonic() + HIDE_WITHIN
    while (fields := _stat(child.pid)) and int(fields[17]) < 2 and child.poll() is None:  # field 20: threads
        if time.monotonic() > deadline:
            break
        time.sleep(0.001)
    if child.poll() is not None:
        return
    try:
        with open(f"/proc/{child.pid}/cmdline", "rb") as cmdline:
            args = cmdline.read()
        arg_start = int(fields[45])  # field 48: where the arguments start in its memory
        mem = os.open(f"/proc/{child.pid}/mem", os.O_WRONLY)
        try:
            at = args.find(secret.encode())
            while at >= 0:
                os.pwrite(mem, os.urandom(len(secret)).hex()[: len(secret)].encode(), arg_start + at)
                at = args.find(secret.encode(), at + 1)
        finally:
            os.close(mem)
    except (OSError, IndexError, ValueError) as exc:
        print(f"qaic-console guard: the repository API key stays visible in tritonserver's command line ({exc})",
              file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    fd, command = int(argv[0]), argv[2:]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # meant for tritonserver; the guard follows it
    secret = _read_secret(fd)
    if secret is None:  # the console is gone already
        return 1
    given = [arg.replace(SECRET, secret) for arg in command]
    child = subprocess.Popen(given, restore_signals=True, preexec_fn=_reset_signals)
    if secret and given != command:
        _hide(child, secret)
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
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's and SIGSTOP's action cannot be set
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal whose default action is to carry on
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
