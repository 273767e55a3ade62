"""Turns: the fold of a call's events, per-prompt figures, the history rule and the transcript."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.clients import Cancelled, Failure, Reply, TextDelta, Timeout, reply_stats
from console.core.transcript import export, summary
from console.core.turns import PREPARE_NOTE, STOPPED, Turn, batch_model_note, history, last_reply


def streamed(turn: Turn, index: int, times: list[float], reason: str, tokens: int, end: float) -> None:
    """Feed ``turn`` the events of one prompt streamed at ``times`` in a request that ended at ``end``."""
    for k, t in enumerate(times):
        turn.apply(TextDelta(index, f"t{k} ", t, first=k == 0))
    text = "".join(f"t{k} " for k in range(len(times)))
    turn.apply(Reply(index, turn.prompts[index], text, reason, reply_stats(times, end, tokens)))


def test_each_prompt_of_a_request_has_its_own_figures() -> None:
    turn = Turn("stream", "m", ["short", "long"], "r1")
    streamed(turn, 0, [0.2, 0.3, 0.4], "eos", 4, end=2.0)  # ended at its EOS, long before the request
    streamed(turn, 1, [0.2, 0.3, 0.4, 1.0, 2.0], "length", 5, end=2.0)
    short, long = turn.figures(0), turn.figures(1)
    assert short.request_latency == pytest.approx(0.4) and long.request_latency == pytest.approx(2.0)
    assert short.output_token_throughput == pytest.approx(4 / 0.4)
    assert long.output_token_throughput == pytest.approx(5 / 2.0)
    assert short.inter_token_latency == pytest.approx(0.2 / 3)
    assert turn.done and turn.text(0) == "t0 t1 t2 "
    assert turn.status(0).startswith("eos · 4 tokens · ttft 200 ms")


def test_batch_replies_report_latency_not_ttft() -> None:
    stats = reply_stats([], 1.5, 10, streamed=False)
    assert stats.time_to_first_token is None and stats.inter_token_latency is None
    assert stats.request_latency == 1.5 and not stats.streamed
    turn = Turn("batch", "m", ["a"], "r2", echo=True)
    turn.apply(Reply(0, "a", " b", "length", stats))
    assert turn.text(0) == " b" and turn.shown(0) == "a b"  # the echo is added when shown
    assert "one response" in turn.status(0) and "latency 1.50 s" in turn.status(0) and "ttft" not in turn.status(0)


def test_live_figures_and_a_stopped_reply_keeps_them() -> None:
    turn = Turn("stream", "m", ["a"], "r3")
    for k, t in enumerate((0.5, 0.6, 0.7)):
        turn.apply(TextDelta(0, "x", t, first=k == 0))
    live = turn.figures(0, now=1.0)
    assert live.time_to_first_token == 0.5 and live.request_latency == 1.0
    assert live.output_token_throughput == pytest.approx(3 / 1.0)
    turn.apply(Failure("cancelled after 0.8 s", Cancelled, 0.8))
    assert turn.done and turn.figures(0).request_latency == pytest.approx(0.8)
    row = turn.as_json()["replies"][0]
    assert row["finish_reason"] == "cancelled" and row["time_to_first_token_ms"] == 500.0 and row["text"] == "xxx"
    assert row["status"] == STOPPED and row["cut_short"] is True


def test_a_stopped_or_failed_reply_has_one_look_in_status_and_export() -> None:
    """The TUI, the web, headless and the export all show these lines: ■ stopped / ✖ <kind>, with the figures."""
    stopped = Turn("stream", "m", ["a"], "r4")
    for k, t in enumerate((0.5, 0.6, 0.7)):
        stopped.apply(TextDelta(0, "x", t, first=k == 0))
    stopped.apply(Failure("cancelled after 0.8 s; request cancelled on the server", Cancelled, 0.8))
    assert stopped.status(0).startswith("■ stopped · 3 tokens · ttft 500 ms")
    assert stopped.failure_line() == "■ stopped: cancelled after 0.8 s; request cancelled on the server"
    md = stopped.as_markdown()
    assert f"_{stopped.status(0)}_" in md and f"> {stopped.failure_line()}" in md and "cancelled ·" not in md

    timed_out = Turn("stream", "m", ["a", "b"], "r5")
    timed_out.apply(TextDelta(1, "y", 0.2, first=True))
    timed_out.apply(Failure("network timeout: m did not finish within 0.3 s", Timeout, 0.3))
    assert timed_out.status(0) == "✖ timeout" and not timed_out.cut_short(0)  # nothing came: no figures
    assert timed_out.status(1).startswith("✖ timeout · 1 tokens · ttft 200 ms") and timed_out.cut_short(1)
    assert timed_out.as_json()["replies"][1]["status"] == "✖ timeout"

    answered = Turn("stream", "m", ["a"], "r6")
    streamed(answered, 0, [0.1, 0.2], "eos", 2, end=0.2)
    assert answered.ending(0) == "eos" and not answered.cut_short(0) and answered.failure_line() == ""
    assert answered.as_json()["replies"][0]["status"] == "eos"


def test_history_is_per_mode_single_prompt_chat_turns_only() -> None:
    def answered(mode: str, prompts: list[str], chat: bool = True, ok: bool = True) -> Turn:
        turn = Turn(mode, "m", prompts, "r", chat=chat)
        for i, p in enumerate(prompts):
            turn.apply(Reply(i, p, f"re {p}", "eos" if ok else "cancelled", reply_stats([0.1], 0.1, 1)))
        return turn

    turns = [answered("stream", ["hi"]), answered("batch", ["yo"]), answered("stream", ["a", "b"]),
             answered("stream", ["raw"], chat=False), answered("stream", ["stopped"], ok=False)]
    assert history(turns, "stream") == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "re hi"}]
    assert history(turns, "batch") == [{"role": "user", "content": "yo"}, {"role": "assistant", "content": "re yo"}]
    assert last_reply(turns) == "re stopped"
    assert last_reply(turns[:3]) == "[1/2] re a\n\n[2/2] re b"


def test_transcript_summarises_each_mode_apart(tmp_path: Path) -> None:
    stream_turn = Turn("stream", "m", ["a"], "r1")
    streamed(stream_turn, 0, [0.1, 0.2], "eos", 2, end=0.2)
    batch_turn = Turn("batch", "m", ["b"], "r2")
    batch_turn.apply(Reply(0, "b", "x", "length", reply_stats([], 3.0, 8, streamed=False)))
    md, js = export([stream_turn, batch_turn], tmp_path, "t")
    data = json.loads(js.read_text())
    assert set(data["summary"]) == {"stream", "batch"}
    assert data["summary"]["stream"]["time_to_first_token_ms"]["avg"] == 100.0
    assert "time_to_first_token_ms" not in data["summary"]["batch"]
    assert data["summary"]["batch"]["request_latency_ms"]["avg"] == 3000.0
    assert summary([stream_turn, batch_turn]) == data["summary"]
    assert "## stream · m" in md.read_text() and "## batch · m" in md.read_text()


def test_a_batch_model_is_told_by_its_config_not_by_its_number_of_responses() -> None:
    def answered_once(mode: str, decoupled: bool | None) -> Turn:
        turn = Turn(mode, "m", ["p"], "r", decoupled=decoupled)
        turn.apply(Reply(0, "p", "", "eos", reply_stats([], 0.1, 1, streamed=False)))  # one lone EOS response
        return turn

    assert "m is a batch model (not decoupled)" in batch_model_note(answered_once("stream", False))
    assert batch_model_note(answered_once("stream", True)) == "", "a decoupled model that answered one EOS"
    assert batch_model_note(answered_once("batch", False)) == ""
    assert batch_model_note(Turn("stream", "m", ["p"], "r", decoupled=False)) == "", "no reply yet"


def test_a_turn_notes_a_long_preparation_only() -> None:
    turn = Turn("batch", "m", ["p"], "r", ignored=["seed"])
    turn.sent_at, turn.prepare_seconds = 1.0, 0.001
    turn.apply(Reply(0, "p", "x", "length", reply_stats([], 0.5, 4, streamed=False)))
    assert turn.remarks() == ["m has no input for seed: not sent"]
    turn.prepare_seconds = PREPARE_NOTE
    assert turn.remarks()[0].startswith(f"prepared in {PREPARE_NOTE:.1f} s before sending")
