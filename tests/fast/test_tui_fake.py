"""The TUI's chat behaviour on the fake server (``tests/fake_server.py``), driven with Pilot: one behaviour per test.
The TUI against a real tritonserver (started from the Server pane) stays in ``tests/e2e/test_tui.py``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fake_server import FakeServer, Gate, gated, hang, replies, reply
from textual.widgets import DataTable, Select
from tui_pilot import SIZE, add_control, drawn, exported, ready, run, say, stream_pane, table_rows, text_of, until

from console.clients import Cancelled, Control, Timeout
from console.core import template
from console.tui.app import QaicConsoleApp
from console.tui.widgets.answer_block import AnswerBlock
from console.tui.widgets.chat_pane import NO_SERVER


def test_stream_chat_history_raw_copy_export_and_the_models_table(fake_server: FakeServer, tmp_path: Path) -> None:
    async def go() -> None:
        async with stream_pane(fake_server.url, None, tmp_path, 12) as (app, pilot, stream):
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
            assert fake_server.requests[2].prompts == ["My name is"]  # what the server received
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
        replies_ = [r for t in data["turns"] for r in t["replies"]]
        assert len(replies_) == 3 and replies_[0]["text"] == answer
        for key in ("time_to_first_token_ms", "inter_token_latency_ms", "output_token_throughput", "output_tokens"):
            assert replies_[0][key] is not None, key

    run(go)


def test_each_prompt_of_a_b_has_its_own_figures(fake_server: FakeServer, tmp_path: Path) -> None:
    fake_server.enqueue(replies(["Hello", "!"], [" word"] * 24, every=0.005, finish=("eos", "length")))

    async def go() -> None:
        async with stream_pane(fake_server.url, None, tmp_path, 24) as (app, pilot, stream):
            await say(pilot, stream, "Hi|Tell me a story")
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


def test_esc_stops_on_the_server_and_the_export_keeps_the_figures(fake_server: FakeServer, tmp_path: Path) -> None:
    fake_server.enqueue(reply(*[" word"] * 400, every=0.02))

    async def go() -> None:
        async with stream_pane(fake_server.url, None, tmp_path, 400, chat=False) as (app, pilot, stream):
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
            assert stream.note.virtual_region.y > block.virtual_region.y, "how it ended follows the partial reply"
            assert fake_server.saw_cancel(turn.request_id), "the server saw the cancel"
            await pilot.press("ctrl+s")
            await until(pilot, lambda: any(text.startswith("exported 1 turn to ") for _, text in app.notices), 10,
                        f"the export said in the singular: {app.notices}")
        md, data = exported(tmp_path)
        reply_ = data["turns"][0]["replies"][0]
        assert reply_["finish_reason"] == Cancelled.kind and reply_["time_to_first_token_ms"] > 0
        assert reply_["status"] == "■ stopped" and reply_["cut_short"] is True
        assert reply_["request_latency_ms"] == round(turn.figures(0).request_latency * 1000, 3)
        assert f"_{turn.status(0)}_" in md and "> ■ stopped: cancelled after" in md  # the TUI's own words

    run(go)


def test_f8_connects_and_the_batch_pane_answers_each_prompt_in_its_block(fake_server: FakeServer,
                                                                         tmp_path: Path) -> None:
    gate = Gate()  # the answer waits until the pane has shown the time waited
    fake_server.enqueue(gated(gate, replies(["I", " am"], ["are", " red"], every=0.3)))

    async def go() -> None:
        app = QaicConsoleApp(export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.server_pane.focus_form()  # the URL; F8 connects
            await pilot.press(*fake_server.url, "f8")
            await until(pilot, lambda: app.server_pane.phase == "connected", 30, "the connection")
            await pilot.press("f4")
            batch = app.chat("batch")
            await ready(pilot, batch, 16, chat=False)
            batch.focus_prompt()
            await pilot.press(*"My name is|Maroon bells", "enter")
            await until(pilot, lambda: "waiting" in batch.blocks[0].figures_text, 30, "the time waited")
            gate.opened.set()
            await until(pilot, lambda: batch.exchange is None, 120, "the batch reply")
            turn = batch.turns[0]
            assert turn.failure is None and len(turn.replies) == 2
            headers = [str(h.content) for h in batch.query(".answer-header")]
            assert headers == ["[1/2] My name is", "[2/2] Maroon bells"]
            assert [b.body_text for b in batch.blocks] == [turn.text(0), turn.text(1)]
            assert all("one response" in b.figures_text and "ttft" not in b.figures_text for b in batch.blocks)
            assert fake_server.requests[0].mode == "batch"

    run(go)


def test_a_batch_model_in_the_stream_pane_says_so(fake_server: FakeServer, tmp_path: Path) -> None:
    async def go() -> None:
        async with stream_pane(fake_server.url, None, tmp_path, 8, chat=False) as (app, pilot, stream):
            stream.controls.query_one("#model", Select).value = "smollm2_kv"
            status = stream.query_one(".status")
            await until(pilot, lambda: "smollm2_kv is a batch model" in str(status.content), 10, "the status")
            await say(pilot, stream, "My name is")
            turn = stream.turns[0]
            assert turn.replies[0].ok and not turn.figures(0).streamed
            assert "one response" in stream.blocks[0].figures_text and "ttft" not in stream.blocks[0].figures_text
            await drawn(pilot, stream.note, "smollm2_kv is a batch model (not decoupled)")

    run(go)


def test_a_timeout_shows_a_notice_and_cancels(fake_server: FakeServer, tmp_path: Path) -> None:
    fake_server.enqueue(hang("Once"))

    async def go() -> None:
        async with stream_pane(fake_server.url, None, tmp_path, 400) as (app, pilot, stream):
            stream.controls.set_value("timeout", "0.2")
            await say(pilot, stream, "Tell me a story", timeout=30)
            turn = stream.turns[0]
            assert turn.failure is not None and turn.failure.error is Timeout
            assert "0.2 s" in turn.failure.message
            await until(pilot, lambda: ("error", turn.failure.message) in app.notices, 10, "the notice")
            assert fake_server.saw_cancel(turn.request_id), "the server saw the cancel"

    run(go)


def test_a_control_the_model_lacks_is_offered_and_reported_not_sent(fake_server: FakeServer, tmp_path: Path,
                                                                     monkeypatch) -> None:
    add_control(monkeypatch, Control("typical_p", float, "FP32", "Typical p", "Locally typical sampling.", default=0.5))

    async def go() -> None:
        async with stream_pane(fake_server.url, None, tmp_path, 4) as (app, pilot, stream):
            assert stream.controls.query_one("#control-typical_p").value == "0.5"
            await say(pilot, stream, "Hi")
            turn = stream.turns[0]
            assert turn.replies[0].ok and turn.ignored == ["typical_p"]
            await drawn(pilot, stream.note, "has no input for typical_p: not sent")

    run(go)


def test_the_wait_for_the_chat_template_is_shown_apart_from_ttft(fake_server: FakeServer, tmp_path: Path,
                                                                  monkeypatch) -> None:
    from console.core import turns

    gate = threading.Event()
    load = template._load
    monkeypatch.setattr(template, "_CACHE", {})  # a first use: the tokenizer is not loaded yet
    monkeypatch.setattr(template, "_load", lambda path: gate.wait(60) and load(path))

    async def go() -> None:
        try:
            async with stream_pane(fake_server.url, None, tmp_path, 4) as (app, pilot, stream):
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


def test_the_turn_is_only_touched_on_the_ui_thread(fake_server: FakeServer, tmp_path: Path, monkeypatch) -> None:
    """The exchange runs in a thread of the core's; its steps are folded into the turn on the app's thread, where
    the timer reads it."""
    from console.core import request, turns

    touched: set[str] = set()
    apply, begin = turns.Turn.apply, request.Prepared.begin
    monkeypatch.setattr(turns.Turn, "apply", lambda self, event: touched.add(threading.current_thread().name)
                        or apply(self, event))
    monkeypatch.setattr(request.Prepared, "begin", lambda self, turn: touched.add(threading.current_thread().name)
                        or begin(self, turn))

    async def go() -> None:
        async with stream_pane(fake_server.url, None, tmp_path, 8, chat=False) as (app, pilot, stream):
            await say(pilot, stream, "Hi|there")
            assert stream.turns[0].replies[1].ok

    run(go)
    assert touched == {threading.main_thread().name}


def test_images_attached_with_ctrl_t_go_with_the_next_message_only_and_are_named_in_its_turn(
        fake_server: FakeServer, tmp_path: Path) -> None:
    from fake_server import bundled_info, with_images
    from textual.widgets import Input

    fake_server.serve(with_images(bundled_info("smollm2_decoupled")))
    image = tmp_path / "cat.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\ncat")

    async def go() -> None:
        async with stream_pane(fake_server.url, None, tmp_path, 4, chat=False) as (app, pilot, stream):
            field = stream.query_one(".attach", Input)
            assert not field.display
            await pilot.press("ctrl+t")
            assert field.display and field.has_focus
            field.value = str(image)
            await pilot.press("enter")
            await until(pilot, lambda: any("the next message takes cat.png" in t for _, t in app.notices), 10,
                        "the attachment's notice")
            await say(pilot, stream, "What is it?")
            assert stream.turns[0].images == [str(image)] and stream.turns[0].failure is None
            assert fake_server.requests[-1].params.images == (image.read_bytes(),)
            assert "[images: cat.png]" in text_of(stream.query(".user").last())
            assert not field.display and field.value == ""
            await say(pilot, stream, "And now?")
            assert fake_server.requests[-1].params.images == () and stream.turns[1].images == []

    run(go)
