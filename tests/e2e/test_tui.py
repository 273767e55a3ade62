"""The TUI on a real tritonserver, driven with Pilot.

Most tests connect to the session's ``embedded_server`` by URL; the last one starts servers from the Server
pane (a model generated with the pane's form, then the embedded samples) and quits while one runs.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Log, Select
from tui_pilot import SIZE, add_control, drawn, run, table_rows, text_of, until

from console.clients import Cancelled, Control, Timeout
from console.core import template
from console.server import logparse
from console.tui.app import QaicConsoleApp, Stopping
from console.tui.widgets.answer_block import AnswerBlock
from console.tui.widgets.chat_pane import NO_SERVER, ChatPane

pytestmark = pytest.mark.server


async def ready(pilot, pane: ChatPane, max_tokens: int, chat: bool = True) -> None:
    await until(pilot, lambda: pane.serving and pane.infos, what="the connection")
    pane.controls.set_value("max_tokens", str(max_tokens))
    pane.controls.set_value("chat", str(chat))


async def say(pilot, pane: ChatPane, text: str, timeout: float = 120.0) -> None:
    """Type ``text`` in the pane's prompt, press Enter and wait for the reply to finish."""
    pane.focus_prompt()
    await pilot.press(*text, "enter")
    await until(pilot, lambda: pane.turns and pane.exchange is None, timeout, f"a reply to {text!r}")


@contextlib.asynccontextmanager
async def stream_pane(server, tmp_path: Path, max_tokens: int, chat: bool = True,
                      ) -> AsyncIterator[tuple[QaicConsoleApp, Pilot, ChatPane]]:
    """The app connected to ``server`` by URL, its Stream pane ready to send."""
    app = QaicConsoleApp(http_url=server.http_url, grpc_url=server.grpc_url, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        stream = app.chat("stream")
        await ready(pilot, stream, max_tokens, chat)
        yield app, pilot, stream


def log_line(server, needle: str) -> str:
    """The server log line containing ``needle`` ('' while there is none)."""
    return next((line for line in server.log_tail(500) if needle in line), "")


def exported(folder: Path) -> tuple[str, dict]:
    return next(folder.glob("*.md")).read_text(), json.loads(next(folder.glob("*.json")).read_text())


# --------------------------------------------------------------------------- connected by URL


def test_stream_chat_history_raw_copy_export_and_the_models_table(embedded_server, tmp_path: Path) -> None:
    async def go() -> None:
        async with stream_pane(embedded_server, tmp_path, 12) as (app, pilot, stream):
            assert app.active == "stream"
            assert NO_SERVER not in text_of(stream.query_one(".hint"))  # the server is ready: no "F5" hint
            await until(pilot, lambda: "chat template ready" in str(stream.query_one(".status").content), 60,
                        "the chat template, loaded when connecting")
            await say(pilot, stream, "What is the capital of France?")
            first = stream.turns[0]
            assert first.failure is None and first.replies[0].ok, first
            answer = first.text(0)
            block = stream.blocks[0]
            assert answer.strip() and block.body_text == answer
            assert block.figures_text == first.status(0)  # the turn's one look (no preparation worth a word)
            assert "ttft" in block.figures_text and "<|im_start|>user" in first.sent[0]  # the chat template

            await say(pilot, stream, "And of Italy?")
            assert "What is the capital of France?" in stream.turns[1].sent[0] and answer in stream.turns[1].sent[0]

            await pilot.press("ctrl+r")  # raw prompt mode
            await say(pilot, stream, "My name is")
            assert stream.turns[2].sent == ["My name is"] and stream.turns[2].text(0)
            await pilot.press("ctrl+y")
            assert app.clipboard == stream.turns[2].text(0)
            await pilot.press("ctrl+s")
            await pilot.pause()
            await pilot.press("ctrl+l")  # clears the conversation and its history
            assert not stream.turns and stream.query(".hint") and not stream.query(AnswerBlock)

            table = app.server_pane.query_one("#models", DataTable)
            rows = table_rows(table)
            assert rows["smollm2_decoupled"] == ("smollm2_decoupled", "READY", "kv", "stream/batch", "qaic-console", "")
            assert rows["smollm2_causal"] == ("smollm2_causal", "READY", "causal", "batch", "qaic-console", "")
        md, data = exported(tmp_path)
        assert answer in md and "tok/s" in md and "ttft" in md
        replies = [r for t in data["turns"] for r in t["replies"]]
        assert len(replies) == 3 and replies[0]["text"] == answer
        for key in ("time_to_first_token_ms", "inter_token_latency_ms", "output_token_throughput", "output_tokens"):
            assert replies[0][key] is not None, key

    run(go)


def test_each_prompt_of_a_b_has_its_own_figures(embedded_server, tmp_path: Path) -> None:
    async def go() -> None:
        async with stream_pane(embedded_server, tmp_path, 24) as (app, pilot, stream):
            await say(pilot, stream, "Hi|Tell me a story")  # greedy: "Hi" ends at eos after ~10 tokens
            turn = stream.turns[0]
            assert [turn.replies[i].finish_reason for i in (0, 1)] == ["eos", "length"]
            first, second = (turn.figures(i) for i in (0, 1))
            assert first.output_tokens < second.output_tokens and first.request_latency < second.request_latency
            shown = [block.figures_text for block in stream.query(AnswerBlock)]
            assert [f"{s.request_latency:.2f} s" in line for s, line in zip((first, second), shown)] == [True, True]
            assert shown[0] != shown[1]
            await pilot.press("ctrl+s")
            await pilot.pause()
        _, data = exported(tmp_path)
        latencies = [r["request_latency_ms"] for r in data["turns"][0]["replies"]]
        assert latencies == [round(first.request_latency * 1000, 3), round(second.request_latency * 1000, 3)]

    run(go)


def test_esc_stops_on_the_server_and_the_export_keeps_the_figures(embedded_server, tmp_path: Path) -> None:
    async def go() -> None:
        async with stream_pane(embedded_server, tmp_path, 400, chat=False) as (app, pilot, stream):
            stream.focus_prompt()
            await pilot.press(*"Once upon a time", "enter")
            await until(pilot, lambda: stream.turns and len(stream.turns[0].arrivals.get(0, ())) >= 3, 60, "text")
            block = stream.blocks[0]
            await until(pilot, lambda: block.figures_text.startswith("▶ "), 5, "the live figures")
            assert "ttft" in block.figures_text and "tok/s" in block.figures_text
            await pilot.press("escape")
            await until(pilot, lambda: stream.exchange is None, 30, "the stop")
            turn = stream.turns[0]
            assert turn.failure is not None and turn.failure.error is Cancelled
            assert block.figures_text.startswith("■ stopped · ") and "ttft" in block.figures_text
            await drawn(pilot, stream.note, "■ stopped: cancelled after ")
            assert block.has_class("stopped") and text_of(stream.note).startswith("■ stopped: cancelled after ")
            await until(pilot, lambda: log_line(embedded_server, f"request {turn.request_id} "), 30, "the server")
            assert "finish=cancelled" in log_line(embedded_server, f"request {turn.request_id} ")
            await pilot.press("ctrl+s")
            await pilot.pause()
        md, data = exported(tmp_path)
        reply = data["turns"][0]["replies"][0]
        assert reply["finish_reason"] == Cancelled.kind and reply["time_to_first_token_ms"] > 0
        assert reply["status"] == "■ stopped" and reply["cut_short"] is True
        assert reply["request_latency_ms"] == round(turn.figures(0).request_latency * 1000, 3)
        assert f"_{turn.status(0)}_" in md and "> ■ stopped: cancelled after" in md  # the TUI's own words

    run(go)


def test_f8_connects_and_the_batch_pane_answers_each_prompt_in_its_block(embedded_server, tmp_path: Path) -> None:
    async def go() -> None:
        app = QaicConsoleApp(export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.server_pane.focus_form()  # the HTTP URL, then Tab to the gRPC one; F8 connects
            await pilot.press(*embedded_server.http_url, "tab", *embedded_server.grpc_url, "f8")
            await until(pilot, lambda: app.server_pane.phase == "connected", 30, "the connection")
            await pilot.press("f4")
            batch = app.chat("batch")
            await ready(pilot, batch, 16, chat=False)
            batch.focus_prompt()
            await pilot.press(*"My name is|Maroon bells", "enter")
            await until(pilot, lambda: batch.exchange is None or "waiting" in batch.blocks[0].figures_text, 30,
                        "the time waited")
            assert batch.exchange is not None, "the reply came before the time waited showed"
            await until(pilot, lambda: batch.exchange is None, 120, "the batch reply")
            turn = batch.turns[0]
            assert turn.failure is None and len(turn.replies) == 2
            headers = [str(h.content) for h in batch.query(".answer-header")]
            assert headers == ["[1/2] My name is", "[2/2] Maroon bells"]
            assert [b.body_text for b in batch.blocks] == [turn.text(0), turn.text(1)]
            assert all("one response" in b.figures_text and "ttft" not in b.figures_text for b in batch.blocks)

    run(go)


def test_a_batch_model_in_the_stream_pane_says_so(embedded_server, tmp_path: Path) -> None:
    async def go() -> None:
        async with stream_pane(embedded_server, tmp_path, 8, chat=False) as (app, pilot, stream):
            stream.controls.query_one("#model", Select).value = "smollm2_kv"
            status = stream.query_one(".status")
            await until(pilot, lambda: "smollm2_kv is a batch model" in str(status.content), 10, "the status")
            await say(pilot, stream, "My name is")
            turn = stream.turns[0]
            assert turn.replies[0].ok and not turn.figures(0).streamed
            assert "one response" in stream.blocks[0].figures_text and "ttft" not in stream.blocks[0].figures_text
            await drawn(pilot, stream.note, "smollm2_kv is a batch model (not decoupled)")

    run(go)


def test_a_timeout_shows_a_notice_and_cancels(embedded_server, tmp_path: Path) -> None:
    async def go() -> None:
        async with stream_pane(embedded_server, tmp_path, 400) as (app, pilot, stream):
            stream.controls.set_value("timeout", "0.2")
            await say(pilot, stream, "Tell me a story", timeout=30)
            turn = stream.turns[0]
            assert turn.failure is not None and turn.failure.error is Timeout
            assert "0.2 s" in turn.failure.message
            await until(pilot, lambda: ("error", turn.failure.message) in app.notices, 10, "the notice")
            await until(pilot, lambda: log_line(embedded_server, f"request {turn.request_id} "), 30, "the server")
            assert "finish=cancelled" in log_line(embedded_server, f"request {turn.request_id} ")

    run(go)


def test_a_control_the_model_lacks_is_offered_and_reported_not_sent(embedded_server, tmp_path: Path,
                                                                     monkeypatch) -> None:
    add_control(monkeypatch, Control("typical_p", float, "FP32", "Typical p", "Locally typical sampling.", default=0.5))

    async def go() -> None:
        async with stream_pane(embedded_server, tmp_path, 4) as (app, pilot, stream):
            assert stream.controls.query_one("#control-typical_p").value == "0.5"
            await say(pilot, stream, "Hi")
            turn = stream.turns[0]
            assert turn.replies[0].ok and turn.ignored == ["typical_p"]
            await drawn(pilot, stream.note, "has no input for typical_p: not sent")

    run(go)


def test_the_wait_for_the_chat_template_is_shown_apart_from_ttft(embedded_server, tmp_path: Path,
                                                                  monkeypatch) -> None:
    from console.core import turns

    gate = threading.Event()
    load = template._load
    monkeypatch.setattr(template, "_CACHE", {})  # a first use: the tokenizer is not loaded yet
    monkeypatch.setattr(template, "_load", lambda path: gate.wait(60) and load(path))

    async def go() -> None:
        try:
            async with stream_pane(embedded_server, tmp_path, 4) as (app, pilot, stream):
                status = stream.query_one(".status")
                await until(pilot, lambda: "loading the chat template" in str(status.content), 30, "the warm-up")
                stream.focus_prompt()
                await pilot.press(*"Hi", "enter")
                sent = time.perf_counter()
                await until(pilot, lambda: "preparing: loading the chat template" in stream.blocks[0].figures_text,
                            10, "the wait shown in the answer block")
                held = time.perf_counter() - sent
                monkeypatch.setattr(turns, "PREPARE_NOTE", held)  # a wait this long is said (0.5 s in use)
                gate.set()
                await until(pilot, lambda: stream.exchange is None, 60, "the reply")
                turn = stream.turns[0]
                assert turn.replies[0].ok and turn.prepare_seconds >= held
                assert "chat template ready" in str(status.content)
                line = stream.blocks[0].figures_text
                assert f"ttft {turn.figures(0).time_to_first_token * 1000:.0f} ms" in line and "prepare" not in line
                await drawn(pilot, stream.note, f"prepared in {turn.prepare_seconds:.1f} s before sending")
        finally:
            gate.set()

    run(go)


# --------------------------------------------------------------------------- servers started from the panel


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch) -> Path:
    """A cache of its own for the embedded repository (the prepared weights and backends are shared)."""
    from backend_model.models import cache_root

    shared, own = cache_root(), tmp_path / "cache"
    own.mkdir()
    for name in ("models", "triton-backends"):
        (shared / name).mkdir(parents=True, exist_ok=True)
        (own / name).symlink_to(shared / name)
    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(own))
    return own


def test_generate_start_chat_stop_then_serve_embedded_and_quit(tmp_path: Path, own_cache: Path) -> None:
    async def go() -> None:
        repo = tmp_path / "repo"
        app = QaicConsoleApp(repository=str(repo), export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane, stream = app.server_pane, app.chat("stream")
            await pilot.press("f9", *"smollm2_decoupled")
            await pilot.click("#generate")
            await until(pilot, lambda: (repo / "smollm2_decoupled" / "config.pbtxt").is_file(), 60, "the model")
            await pilot.press("f6")
            await until(pilot, lambda: pane.phase != "idle", 10, "starting")
            await pilot.press("f4")  # the UI answers while the model loads
            assert app.active == "batch" and pane.phase == "starting"
            await pilot.press("f2")
            await until(pilot, lambda: pane.phase in ("ready", "failed"), 600, "the server")
            assert pane.phase == "ready", (pane.snapshot.message, app.notices)
            server = pane.controller.server
            assert server is not None and server.handle.model_states()["smollm2_decoupled"][0] == "READY"

            log = pane.query_one("#server-log", Log)
            lines = list(log.lines)
            assert any(logparse.is_noise(line) for line in server.log_tail(500))  # the raw log has the noise
            assert lines.count(logparse.NOISE_NOTE) == 1
            assert not [line for line in lines if logparse.is_noise(line) and line != logparse.NOISE_NOTE]
            assert not pane.query_one("#log-hint").display
            # condensed: the loads, no 230-column tables; Ctrl+G shows the raw log and back
            assert any(line.endswith("successfully loaded 'smollm2_decoupled'") for line in lines), lines
            assert any(line.startswith("+---") for line in server.log_tail(500)), "Triton printed no table"
            assert not [line for line in lines if line.startswith(("+---", "| "))]
            await pilot.press("ctrl+g")
            assert any(line.startswith("+---") for line in log.lines) and "raw" in str(log.border_title)
            await pilot.press("ctrl+g")
            assert not [line for line in log.lines if line.startswith("+---")]

            await until(pilot, lambda: stream.serving and stream.infos, 30, "the stream pane")
            await pilot.press("f3")
            stream.controls.set_value("max_tokens", "6")
            await say(pilot, stream, "Hello")
            assert stream.turns[0].replies[0].ok
            await pilot.press("f2", "f7")
            await until(pilot, lambda: pane.phase == "stopped" and not stream.serving, 60, "the stop")
            assert not server.running and "exit code" not in pane.snapshot.message  # a normal stop, however it ended

            await pilot.press("f5")  # the embedded samples, then Ctrl+Q while they are served
            await until(pilot, lambda: pane.phase == "failed" or len(stream.infos) == 2, 600, "the embedded models")
            assert set(stream.infos) == {"smollm2_decoupled", "smollm2_kv"}, (pane.snapshot.message, app.notices)
            server = pane.controller.server
            served = own_cache / "llm_model_dir"
            assert pane.repository() == served  # the repository served, not the ./llm_model_dir of the form

            # a model generated now goes into the repository served, and the running server loads it
            pane.query_one("#gen-name", Input).value = "tiny_chat"
            pane.query_one("#gen-hf", Input).value = "embedded"
            await pilot.click("#generate")
            loaded = ("information", "loaded tiny_chat into the running tritonserver")
            await until(pilot, lambda: loaded in app.notices or any(s == "error" for s, _ in app.notices), 600,
                        "the generated model loaded")
            assert loaded in app.notices and (served / "tiny_chat" / "config.pbtxt").is_file(), app.notices
            assert server.handle.model_states()["tiny_chat"][0] == "READY"
            assert table_rows(pane.query_one("#models", DataTable))["tiny_chat"][1] == "READY"
            await pilot.press("ctrl+q")
            await until(pilot, lambda: isinstance(app.screen, Stopping), 10, "the stopping screen")
            assert "stopping tritonserver" in text_of(app.screen.query_one("#stopping"))
            await until(pilot, lambda: app.return_code is not None, 60, "the app to close")
            assert not server.running

    run(go)


def test_other_llm_interfaces_chat_in_both_panes(llm_server, tmp_path: Path) -> None:
    """vLLM's and TensorRT-LLM's interfaces (real tritonserver, stand-in models): detected, shown, spoken."""
    async def go() -> None:
        app = QaicConsoleApp(http_url=llm_server.http_url, grpc_url=llm_server.grpc_url, export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            stream = app.chat("stream")
            await ready(pilot, stream, 6, chat=False)
            rows = table_rows(app.server_pane.query_one("#models", DataTable))
            assert [rows[m][4] for m in ("vllm_model", "ensemble", "text_model")] == ["vllm", "tensorrt-llm", "text"]
            stream.controls.query_one("#model", Select).value = "vllm_model"
            await say(pilot, stream, "My name is|Maroon bells")  # one request per prompt, merged
            turn = stream.turns[0]
            marker, _, words = turn.text(0).partition("]")  # the stand-in says which inputs it received
            assert turn.failure is None and words.split()[:2] == ["MY", "NAME"]
            assert turn.text(1).partition("]")[2].split()[:2] == ["MAROON", "BELLS"]
            assert "text_input" in marker and "prompt" not in marker.replace("text_input", "")  # its own names
            await pilot.press("f4")
            batch = app.chat("batch")
            await ready(pilot, batch, 6, chat=False)
            batch.controls.query_one("#model", Select).value = "ensemble_batch"
            await say(pilot, batch, "My name is")
            answered = batch.turns[0]
            assert answered.replies[0].ok and answered.text(0).partition("]")[2].split()[:3] == ["MY", "NAME", "IS"]

    run(go)
