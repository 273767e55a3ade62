"""Helpers for the TUI's Pilot tests (fast and e2e): run an async test, wait on the app's state, read what shows."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from textual.widget import Widget
from textual.widgets import Input

from console.clients import Control

SIZE = (140, 40)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def until(pilot, condition: Callable[[], object], timeout: float = 60.0, what: str = "") -> None:
    """Let the app run until ``condition()`` is true; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        await pilot.pause(0.05)


async def drawn(pilot, widget: Widget, text: str, timeout: float = 10.0) -> None:
    """Let the app run until ``widget`` draws ``text`` (a widget just shown has no size until the next layout)."""
    await until(pilot, lambda: text in text_of(widget), timeout, f"{text!r} drawn in {widget}")


def text_of(widget: Widget) -> str:
    """What a widget draws (its visible lines, joined by spaces)."""
    from textual.geometry import Region

    return " ".join(strip.text.strip() for strip in widget.render_lines(Region(0, 0, *widget.outer_size)))


def table_rows(table) -> dict[str, tuple[str, ...]]:
    """A DataTable's rows by their first cell."""
    rows = (tuple(str(cell) for cell in table.get_row_at(i)) for i in range(table.row_count))
    return {row[0]: row for row in rows}


@asynccontextmanager
async def openai_app(base_url: str, export_dir: Path, timeout: float = 60.0) -> AsyncIterator[tuple]:
    """The TUI connected by an OpenAI-compatible server's /v1 URL: (app, pilot, its stream pane) once it lists
    the server's models."""
    from console.tui.app import QaicConsoleApp

    app = QaicConsoleApp(http_url=base_url, export_dir=export_dir)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.chat("stream")
        await until(pilot, lambda: pane.serving and pane.infos, timeout, "the connection")
        assert app.server_pane.snapshot.server.kind == "openai"
        yield app, pilot, pane


async def ready(pilot, pane, max_tokens: int, chat: bool = True) -> None:
    """Wait until ``pane`` is connected, then set its max tokens and chat-template mode."""
    await until(pilot, lambda: pane.serving and pane.infos, what="the connection")
    pane.controls.set_value("max_tokens", str(max_tokens))
    pane.controls.set_value("chat", str(chat))


async def say(pilot, pane, text: str, timeout: float = 120.0) -> None:
    """Type ``text`` in the pane's prompt, press Enter and wait for the reply to finish."""
    pane.focus_prompt()
    await pilot.press(*text, "enter")
    await until(pilot, lambda: pane.turns and pane.exchange is None, timeout, f"a reply to {text!r}")


@asynccontextmanager
async def stream_pane(http_url: str, grpc_url: str | None, export_dir: Path, max_tokens: int,
                      chat: bool = True, mode: str = "stream") -> AsyncIterator[tuple]:
    """(app, pilot, its Stream pane, or ``mode``'s) connected to the server at ``http_url`` (and ``grpc_url``), ready
    to send."""
    from console.tui.app import QaicConsoleApp

    app = QaicConsoleApp(http_url=http_url, grpc_url=grpc_url, export_dir=export_dir)
    async with app.run_test(size=SIZE) as pilot:
        stream = app.chat(mode)
        await ready(pilot, stream, max_tokens, chat)
        yield app, pilot, stream


def exported(folder: Path) -> tuple[str, dict]:
    """The Markdown and the JSON of the transcript exported into ``folder``."""
    return next(folder.glob("*.md")).read_text(), json.loads(next(folder.glob("*.json")).read_text())


def steady(*keys: str) -> Callable[[object], Awaitable[None]]:
    """A snapshot ``run_before`` pressing ``keys``, then freezing the cursors (a blink would make it flaky)."""
    async def before(pilot) -> None:
        await pilot.press(*keys)
        await pilot.pause()
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False

    return before


def add_control(monkeypatch, control: Control) -> None:
    """Add ``control`` to the controls table for one test, in every console module that holds the table."""
    from console.clients import params

    original = params.CONTROLS
    grown = (*original, control)
    for name, module in list(sys.modules.items()):
        if name.startswith("console.") and getattr(module, "CONTROLS", None) is original:
            monkeypatch.setattr(module, "CONTROLS", grown)
    monkeypatch.setitem(params.BY_NAME, control.name, control)
