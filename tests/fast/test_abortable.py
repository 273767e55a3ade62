"""A request's own event loop (:class:`console.clients.abortable.Abortable`): what the request's libraries leave
running on it is ended before the loop closes, finished or aborted, so nothing is destroyed pending."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading

import pytest

from console.clients.abortable import Abortable


async def _request(cleaned: list[str], started: threading.Event | None = None) -> str:
    """A request whose library leaves a task of its own behind (as a connection's cleanup can) and an async
    generator half-read."""

    async def cleanup() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.append("task")

    async def chunks():
        try:
            yield "a"
            yield "b"
        finally:
            cleaned.append("generator")

    asyncio.get_running_loop().create_task(cleanup())
    reader = chunks()
    first = await reader.__anext__()
    if started is not None:
        started.set()
        await asyncio.sleep(3600)  # aborted here
    return first


def _destroyed(caplog: pytest.LogCaptureFixture) -> list[str]:
    gc.collect()
    return [r.getMessage() for r in caplog.records if "destroyed but it is pending" in r.getMessage()]


def test_a_finished_request_leaves_nothing_pending_on_its_loop(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    cleaned: list[str] = []
    assert Abortable().run(_request(cleaned)) == "a"
    assert sorted(cleaned) == ["generator", "task"]
    assert _destroyed(caplog) == []


def test_an_aborted_request_leaves_nothing_pending_on_its_loop(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    cleaned: list[str] = []
    started, running, outcome = threading.Event(), Abortable(), []

    def reader() -> None:
        try:
            running.run(_request(cleaned, started))
        except asyncio.CancelledError:
            outcome.append("cancelled")

    thread = threading.Thread(target=reader)
    thread.start()
    assert started.wait(30)
    running.abort()
    thread.join(30)
    assert outcome == ["cancelled"] and sorted(cleaned) == ["generator", "task"]
    assert _destroyed(caplog) == []
