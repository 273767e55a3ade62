"""Prefix reuse: a prompt that starts as an earlier one did prefills only the rest, in the slot that kept it, and
answers exactly what a prefill from token 0 answers (greedy, fp32 and int4, continuous batching and regular
batches). Only whole prefill chunks of an earlier prompt are reused: the numbers are the ones a fresh prefill
computes, so equality is exact, not approximate."""

from __future__ import annotations

import pytest
from helpers import engine_threads  # noqa: F401 (autouse: the engine's threads)

from backend_model.build import open_cpu_session
from backend_model.engine.loop import Engine
from backend_model.engine.metrics import Recorder
from backend_model.engine.sampling import SamplingParams
from backend_model.models import load_pretrained
from backend_model.sessions.protocol import Dims

SYSTEM = ("You are a careful assistant who answers questions about geography, history and science in short, "
          "plain sentences, and who says so when a question has no good answer. ")
TURN_1 = SYSTEM + "Question: what is the capital of Japan? Answer:"
GREEDY = SamplingParams(max_tokens=8)


@pytest.fixture(scope="module")
def smol():
    return load_pretrained("embedded", progress=lambda m: None)


def engine_on(smol, precision: str, continuous: bool, prefix_caching: bool) -> Engine:
    model, tokenizer = smol
    dims = Dims(batch_size=1 if continuous else 2, prefill_seq_len=8, ctx_len=192, vocab=model.config.vocab_size,
                full_batch_size=3 if continuous else 0)
    engine = Engine(open_cpu_session(model, dims, True, precision), tokenizer, prefix_caching=prefix_caching)
    engine.meter = Recorder()
    return engine


def conversation(engine: Engine) -> tuple[list[list[int]], list[int]]:
    """Turn 1, then turn 2 (turn 1, its answer and a new question), then another question on the same system
    prompt: each turn's tokens and the prompt tokens each reused."""
    answers, reused = [], []
    prompt = TURN_1
    for follow_up in (" Question: and of France? Answer:", None):
        (seq,) = engine.generate([prompt], GREEDY)
        answers.append(seq.tokens)
        reused.append(seq.reused)
        prompt = prompt + seq.text + (follow_up or "")
    (other,) = engine.generate([SYSTEM + "Question: name three primary colours. Answer:"], GREEDY)
    return [*answers, other.tokens], [*reused, other.reused]


@pytest.mark.parametrize("precision", ["fp32", "int4"])
@pytest.mark.parametrize("continuous", [True, False], ids=["stream", "batch"])
def test_a_reused_prefix_gives_the_answer_a_full_prefill_gives(smol, precision: str, continuous: bool) -> None:
    fresh, none = conversation(engine_on(smol, precision, continuous, prefix_caching=False))
    engine = engine_on(smol, precision, continuous, prefix_caching=True)
    reusing, reused = conversation(engine)
    assert reusing == fresh, "token-identical with and without reuse"
    assert none == [0, 0, 0]
    turn_1 = len(engine.encode(TURN_1))
    assert reused[0] == 0 and reused[1] == (turn_1 - 1) // 8 * 8, "turn 2 reuses turn 1's whole chunks"
    assert reused[2] >= len(engine.encode(SYSTEM)) // 8 * 8 - 8, "a shared system prompt is reused"
    counts, _ = engine.meter.take()
    assert counts[("qaic_prefix_reused_tokens_total", "")] == sum(reused)


def test_a_prompt_goes_to_the_slot_that_kept_its_start_and_others_to_unused_slots(smol) -> None:
    engine = engine_on(smol, "int4", continuous=True, prefix_caching=True)
    (first,) = engine.generate([TURN_1], GREEDY)
    (unrelated,) = engine.generate(["Once upon a time, in a faraway kingdom, there lived a dragon who"], GREEDY)
    (again,) = engine.generate([TURN_1 + first.text + " Why?"], GREEDY)
    assert unrelated.slot != first.slot, "an unrelated prompt leaves the kept prefix alone while a slot is unused"
    assert again.slot == first.slot and again.reused > 0
