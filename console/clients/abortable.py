"""A request's coroutine on an event loop of its own: the reader thread runs it, any thread can abort it.

Cancelling an asyncio HTTP request (aiohttp, httpx) closes its connection at once, so the server sees the
client go the moment a call gives up on it (a timeout, Stop, an abandoned iteration), whether or not its answer
had started, and a reader left waiting just ends with its thread (no gevent loop to wake in a finalized
interpreter).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Abortable:
    """Runs one coroutine at a time with :meth:`run`; :meth:`abort` cancels it (also before it started)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None
        self._aborted = False

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """``coro``'s result on a new event loop in this thread; ``asyncio.CancelledError`` when aborted."""
        loop = asyncio.new_event_loop()
        task = loop.create_task(coro)
        with self._lock:
            self._running = (loop, task)
            if self._aborted:
                task.cancel()
        try:
            return loop.run_until_complete(task)
        finally:
            with self._lock:
                self._running = None
            try:
                _finish(loop)
            finally:
                loop.close()

    def abort(self) -> None:
        """Cancel the coroutine (from any thread): its connection closes; a coroutine not started never runs."""
        with self._lock:
            self._aborted, running = True, self._running
        if running is not None:
            loop, task = running
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing left to cancel
                loop.call_soon_threadsafe(task.cancel)


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    """What the request left on its loop, ended before the loop closes, as :func:`asyncio.run` ends it: tasks its
    libraries started (a connection's cleanup) cancelled and awaited, async generators closed. A loop closed with a
    task pending logs "Task was destroyed but it is pending!" when the task is collected."""
    rest = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in rest:
        task.cancel()
    if rest:
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
