"""The Textual TUI driven with Pilot: snapshots before connecting, then a real tritonserver.

Most tests connect to the session ``embedded_server`` by URL; one starts its own server from the
Server pane (one embedded model, generated into tmp_path with the pane's generator form).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.widgets import Input

from console.clients import CANCELLED, TIMEOUT
from console.server import free_port
from console.tui.app import QaicConsoleApp
from console.tui.chat import AnswerBlock, ChatPane

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


def log_line(server, needle: str, timeout: float = 30.0) -> str:
    """The server log line containing ``needle`` (polled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in server.log_tail(500):
            if needle in line:
                return line
        time.sleep(0.05)
    return ""


def connected_app(server, tmp_path: Path) -> QaicConsoleApp:
    return QaicConsoleApp(http_url=server.http_url, grpc_url=server.grpc_url, export_dir=tmp_path)


async def ready(pilot, pane: ChatPane, max_tokens: int) -> None:
    await until(pilot, lambda: pane.url is not None and pane.models, what="connection")
    pane.controls.set_value("max_tokens", str(max_tokens))


async def say(pilot, pane: ChatPane, text: str, timeout: float = 120.0) -> None:
    """Type ``text`` in the pane's prompt, press Enter and wait for the reply to finish."""
    pane.focus_prompt()
    await pilot.press(*text, "enter")
    await until(pilot, lambda: pane.turns and pane.job is None, timeout, f"a reply to {text!r}")


def shown(pane: ChatPane, selector: str) -> list[str]:
    """The text of each answer block's ``selector`` part as displayed."""
    return [str(block.query_one(selector).content) for block in pane.query(AnswerBlock)]


# --------------------------------------------------------------------------- snapshots (no server)


def steady(*keys: str) -> Callable[[object], Awaitable[None]]:
    """A ``run_before`` pressing ``keys``, then freezing the cursors (a blink would make snapshots flaky)."""
    async def before(pilot) -> None:
        await pilot.press(*keys)
        await pilot.pause()
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False

    return before


def test_snapshot_server_pane(snap_compare) -> None:
    assert snap_compare(QaicConsoleApp(), terminal_size=SIZE, run_before=steady())


def test_snapshot_stream_pane(snap_compare) -> None:
    assert snap_compare(QaicConsoleApp(), terminal_size=SIZE, run_before=steady("f3"))


def test_snapshot_command_palette(snap_compare) -> None:
    assert snap_compare(QaicConsoleApp(), terminal_size=SIZE, run_before=steady("f3", "ctrl+p"))


# --------------------------------------------------------------------------- bad input, no server


def test_tui_command_is_registered() -> None:
    from click.testing import CliRunner

    from console.cli import main

    result = CliRunner().invoke(main, ["tui", "--help"])
    assert result.exit_code == 0 and "--grpc-url" in result.output and "Esc stops" in result.output


def test_readable_notices_without_a_server(tmp_path: Path) -> None:
    async def go() -> None:
        port = free_port()
        app = QaicConsoleApp(http_url=f"127.0.0.1:{port}", grpc_url=f"127.0.0.1:{port}", export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.server_pane.state == "unreachable", 30, "unreachable")
            stream = app.chat("stream")
            assert not stream.submit("a|")  # bad input
            assert not stream.submit("hello")  # not connected
            await pilot.press("ctrl+s")  # nothing to export
            await pilot.press("escape")  # nothing to stop
            await pilot.pause()
        texts = [text for _, text in app.notices]
        assert any("cannot reach tritonserver" in t for t in texts), texts
        assert any("not connected" in t for t in texts), texts
        assert any("prompt 2 of 2 is empty" in t for t in texts), texts
        assert any("nothing to export" in t for t in texts), texts

    run(go)


# --------------------------------------------------------------------------- a real server


def test_stream_chat_history_raw_copy_and_export(embedded_server, tmp_path: Path) -> None:
    async def go() -> None:
        app = connected_app(embedded_server, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            stream = app.chat("stream")
            await ready(pilot, stream, 12)
            assert app.active == "stream"
            await say(pilot, stream, "What is the capital of France?")
            first = stream.turns[0]
            assert first.failure is None and first.replies[0].ok, first
            answer = first.text(0)
            assert answer.strip() and shown(stream, ".answer-body") == [answer]
            assert "tok/s" in shown(stream, ".stats")[0] and "ttft" in shown(stream, ".stats")[0]
            assert "<|im_start|>user" in first.sent[0]  # the chat template

            await say(pilot, stream, "And of Italy?")
            assert "What is the capital of France?" in stream.turns[1].sent[0]  # history
            assert answer in stream.turns[1].sent[0]

            await pilot.press("ctrl+r")  # raw prompt mode
            await say(pilot, stream, "My name is")
            assert stream.turns[2].sent == ["My name is"] and stream.turns[2].text(0)

            await pilot.press("ctrl+y")
            assert app.clipboard == stream.turns[2].text(0)
            await pilot.press("ctrl+s")
            await pilot.pause()
        md = next(tmp_path.glob("*.md")).read_text()
        data = json.loads(next(tmp_path.glob("*.json")).read_text())
        assert answer in md and "tok/s" in md and "ttft" in md
        replies = [r for t in data["turns"] for r in t["replies"]]
        assert len(replies) == 3 and replies[0]["text"] == answer
        for key in ("time_to_first_token_ms", "inter_token_latency_ms", "output_token_throughput", "output_tokens"):
            assert replies[0][key] is not None, key
        assert data["summary"]["time_to_first_token_ms"]["p50"] > 0

    run(go)


def test_stop_cancels_on_the_server(embedded_server, tmp_path: Path) -> None:
    async def go() -> None:
        app = connected_app(embedded_server, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            stream = app.chat("stream")
            await ready(pilot, stream, 400)
            stream.controls.set_value("chat", "false")
            stream.focus_prompt()
            await pilot.press(*"Once upon a time", "enter")
            await until(pilot, lambda: stream.turns and stream.turns[0].partial.get(0), 60, "the first text")
            assert shown(stream, ".stats")[0].startswith("▶") and "ttft" in shown(stream, ".stats")[0]  # live
            await pilot.press("escape")
            await until(pilot, lambda: stream.job is None, 30, "the stop")
            turn = stream.turns[0]
            assert turn.failure is not None and turn.failure.kind == CANCELLED
            assert "stopped" in shown(stream, ".stats")[0]
            assert "finish=cancelled" in log_line(embedded_server, f"request {turn.request_id} ")
            stream.controls.set_value("max_tokens", "8")
            await say(pilot, stream, "My name is")
            assert stream.turns[1].replies[0].ok and stream.turns[1].text(0)

    run(go)


def test_batch_prompts_one_block_each_with_elapsed_time(embedded_server, tmp_path: Path) -> None:
    async def go() -> None:
        app = connected_app(embedded_server, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f4")
            batch = app.chat("batch")
            await ready(pilot, batch, 16)
            batch.controls.set_value("chat", "false")
            batch.focus_prompt()
            await pilot.press(*"My name is|Maroon bells", "enter")
            await until(pilot, lambda: batch.job is None or any("waiting" in s for s in shown(batch, ".stats")),
                        30, "the elapsed-time indicator")
            assert batch.job is not None, "the reply came before the indicator showed"
            await until(pilot, lambda: batch.job is None, 120, "the batch reply")
            turn = batch.turns[0]
            assert turn.failure is None and len(turn.replies) == 2
            headers = [str(h.content) for h in batch.query(".answer-header")]
            assert headers == ["[1/2] My name is", "[2/2] Maroon bells"]
            assert shown(batch, ".answer-body") == [turn.text(0), turn.text(1)]
            assert all(turn.text(i).strip() for i in range(2))

    run(go)


def test_timeout_shows_a_notice(embedded_server, tmp_path: Path) -> None:
    async def go() -> None:
        app = connected_app(embedded_server, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            stream = app.chat("stream")
            await ready(pilot, stream, 400)
            stream.controls.set_value("timeout", "0.2")
            await say(pilot, stream, "Tell me a story", timeout=30)
            turn = stream.turns[0]
            assert turn.failure is not None and turn.failure.kind == TIMEOUT
            await until(pilot, lambda: any(severity == "error" and "network timeout" in text and "0.2 s" in text
                                           for severity, text in app.notices), 10, "the timeout notice")
            assert "finish=cancelled" in log_line(embedded_server, f"request {turn.request_id} ")

    run(go)


@pytest.mark.server
def test_generate_start_chat_and_stop_a_server_from_the_panel(tmp_path: Path) -> None:
    async def go() -> None:
        app = QaicConsoleApp(repository=str(tmp_path / "repo"), export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.server_pane
            await pilot.press("f9", *"smollm2_decoupled")
            await pilot.click("#generate")
            await until(pilot, lambda: (tmp_path / "repo" / "smollm2_decoupled" / "config.pbtxt").is_file(), 60)
            await pilot.press("f6")
            await until(pilot, lambda: pane.state != "stopped", 10, "starting")
            await pilot.press("f4")  # the UI answers while the model loads
            assert app.active == "batch" and pane.state == "starting"
            await pilot.press("f2")
            await until(pilot, lambda: pane.state in ("ready", "failed"), 600, "the server")
            assert pane.state == "ready", (pane.detail, app.notices)
            server = pane.server
            assert server is not None and server.running
            assert server.model_states()["smollm2_decoupled"][0] == "READY"
            stream = app.chat("stream")
            await until(pilot, lambda: stream.url == server.grpc_url, 30, "the stream pane")
            await pilot.press("f3")
            stream.controls.set_value("max_tokens", "6")
            await say(pilot, stream, "Hello")
            assert stream.turns[0].replies[0].ok
            await pilot.press("f2", "f7")
            await until(pilot, lambda: pane.state == "stopped", 60, f"the stop ({pane.state}, {app.notices[-3:]})")
            assert not server.running and pane.server is None
            assert stream.url is None  # the chat panes know

    run(go)
