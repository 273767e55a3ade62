"""How signals end a command, set at its start whatever the process inherited; a Ctrl-C at any point ends with one
line and exit code 130. Standard library only: the program sets them before anything else loads."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

INTERRUPTED = "error: interrupted"  # what every command says when a Ctrl-C ends it


class Terminated(Exception):
    """SIGTERM arrived."""


def install_signals() -> None:
    """Set every command's signals at its start, whatever the process inherited (a background job of a shell
    starts with SIGINT ignored, and Python keeps a signal it finds ignored ignored): Ctrl-C (SIGINT) raises
    KeyboardInterrupt; SIGTERM, and SIGHUP (the terminal closed), exit with 128 + the signal's number, so ``atexit``
    stops any tritonserver this process started. A SIGHUP ignored on purpose (``nohup``) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _exit)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _exit)


def _exit(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


def interrupted() -> NoReturn:
    """The end of a command a Ctrl-C stopped where nothing else answered it: one line, exit code 130."""
    sys.stderr.write(f"{INTERRUPTED}\n")
    sys.stderr.flush()
    sys.exit(130)


@contextlib.contextmanager
def signals_raise(*signums: int) -> Iterator[None]:
    """Turn these signals into ``Terminated`` in the main thread (no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
