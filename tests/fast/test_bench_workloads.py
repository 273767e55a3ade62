"""The bench's conversations (each turn carries the history before it), goodput against service-level goals, and
their place in a level's summary: without a server (records made here)."""

from __future__ import annotations

import pytest

from console.bench.load import LevelResult, RequestRecord
from console.bench.prompts import BenchRequest, SyntheticPrompts
from console.bench.results import compare, summarize
from console.bench.workloads import Conversation, Slo, check_turns
from console.clients import ClientError, ReplyStats


def test_a_conversation_sends_each_turn_after_the_history_and_starts_again_after_its_last() -> None:
    messages = iter(BenchRequest(f"question {i}?", 4) for i in range(10))
    chat = Conversation(2, lambda: next(messages))
    first, turn = chat.next()
    assert (first.prompt, turn) == ("question 0?", 1)
    chat.answered(first, " answer 0.")
    second, turn = chat.next()
    assert (second.prompt, turn) == ("question 0? answer 0.\nquestion 1?", 2) and second.max_tokens == 4
    chat.answered(second, " answer 1.")
    third, turn = chat.next()
    assert (third.prompt, turn) == ("question 2?", 1), "a new conversation after the last turn"


def test_slo_goals_are_parsed_checked_and_met_only_when_every_goal_is() -> None:
    slo = Slo.parse("ttft_ms=200, itl_ms=40", "stream")
    assert slo.goals == {"ttft_ms": 200.0, "itl_ms": 40.0}
    assert slo.met({"time_to_first_token_ms": 150.0, "inter_token_latency_ms": 40.0})
    assert not slo.met({"time_to_first_token_ms": 250.0, "inter_token_latency_ms": 10.0})
    assert not slo.met({"time_to_first_token_ms": None, "inter_token_latency_ms": 10.0})
    assert Slo.parse(None, "batch").goals == {}
    for text, message in (("ttft=200", "the goals are ttft_ms, itl_ms, latency_ms"),
                          ("ttft_ms=fast", "needs a number"), ("latency_ms=0", "must be > 0")):
        with pytest.raises(ClientError, match=message):
            Slo.parse(text, "stream")
    with pytest.raises(ClientError, match="batch replies arrive whole and have no ttft"):
        Slo.parse("ttft_ms=200", "batch")
    with pytest.raises(ClientError, match="give --concurrency"):
        check_turns(3, "2")
    with pytest.raises(ClientError, match="--turns must be >= 1"):
        check_turns(0, None)


def record(index: int, turn: int, ttft: float, ok: bool = True) -> RequestRecord:
    stats = ReplyStats(ttft, 0.01, 0.01, ttft + 0.1, 100.0, 10, 10, "server")
    return RequestRecord(index, "u", 0.0, 1.0, stats if ok else None, "length" if ok else None,
                         None if ok else "boom", None if ok else "server", turn)


def test_a_level_reports_later_turns_apart_and_its_goodput() -> None:
    level = LevelResult(2, None, [record(0, 1, 0.4), record(1, 2, 0.1), record(2, 3, 0.05), record(3, 2, 0.2, False)],
                        2.0)
    summary = summarize(level, "stream", Slo.parse("ttft_ms=150", "stream"))
    assert summary["time_to_first_token_later_turns"]["avg"] == pytest.approx(75.0)  # turns 2 and 3 that answered
    assert summary["goodput"] == {"unit": "requests/sec", "slo": {"ttft_ms": 150.0}, "avg": 1.0,
                                  "share": pytest.approx(2 / 3, abs=1e-4)}
    plain = summarize(LevelResult(1, None, [record(0, 1, 0.3)], 1.0), "stream")
    assert "goodput" not in plain and "time_to_first_token_later_turns" not in plain
    rows = compare([{"levels": [summary]}, {"levels": [summary]}])
    assert {r["metric"] for r in rows} >= {"goodput req/s", "TTFT turn 2+ ms"}


def test_a_shared_prefix_starts_every_synthetic_prompt() -> None:
    prompts = iter(SyntheticPrompts(6, 0, 4, seed=3, shared_prefix=5))
    first, second = next(prompts).prompt, next(prompts).prompt
    prefix = " ".join(first.split()[:5])
    assert len(first.split()) == 11 and second.startswith(prefix + " ") and first != second


def test_chat_turns_times_every_later_turn_once_on_an_engine() -> None:
    """The report's chats: each next turn is submitted when the last one's answer ends, with its history."""
    from transformers import AutoTokenizer

    from backend_model.engine.loop import Engine
    from backend_model.models import prepare_embedded
    from backend_model.sessions.protocol import Dims
    from console.bench.engine import ZeroCostSession, chat_turns, digit_tokens

    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    engine = Engine(ZeroCostSession(Dims(1, 8, 512, len(tokenizer), 4), digit_tokens(tokenizer)), tokenizer)
    prompts: list[int] = []
    submit = engine.submit
    engine.submit = lambda ids, params: prompts.append(len(ids)) or submit(ids, params)  # type: ignore[method-assign]
    ttfts = chat_turns(engine, conversations=3, turns=4, max_tokens=5)
    assert len(ttfts) == 3 * 3 and all(t > 0 for t in ttfts)
    assert len(prompts) == 12 and min(prompts[3:]) > max(prompts[:3]), "later turns carry their history first"
