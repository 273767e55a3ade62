"""How the commands end: one ``error:`` line, and SIGTERM handled as Ctrl-C is."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

import click

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


class Terminated(Exception):
    """SIGTERM arrived."""


def fail(message: str) -> None:
    """One line on stderr prefixed ``error:``, exit code 1."""
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def exit_on_sigterm() -> None:
    """SIGTERM exits like Ctrl-C does, so ``atexit`` stops any tritonserver this process started."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


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
