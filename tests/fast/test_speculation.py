"""Prompt-lookup speculative decoding: the proposer, and greedy answers token-identical with and without it at
every precision a sample uses (fp32, int4), continuous and regular batching, with drafts accepted on text that
repeats its context. Sampled requests are not speculated."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import engine_threads  # noqa: F401 (autouse: the engine's threads)

from backend_model.build import BackendSettings, open_cpu_session
from backend_model.engine.loop import Engine
from backend_model.engine.metrics import Recorder
from backend_model.engine.sampling import SamplingParams
from backend_model.engine.speculation import propose
from backend_model.models import load_pretrained
from backend_model.sessions.protocol import Dims, SessionError

REPETITIVE = ["def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
              "Roses are red, violets are blue. Roses are red, violets are"]


def test_the_proposer_drafts_what_followed_an_earlier_occurrence() -> None:
    assert propose([1, 2, 3, 9, 1, 2, 3], 2) == [9, 1]  # after 1 2 3 came 9 1
    assert propose([5, 1, 2, 7, 8, 1, 2], 3) == [7, 8, 1]
    assert propose([4, 6, 1, 2, 3], 3) == [], "nothing seen before"
    assert propose([1, 2, 1, 2, 1, 2], 4) == [1, 2], "the longest n-gram's only occurrence"
    assert propose([1, 2, 5, 6, 7, 1, 2, 8, 1, 2], 4) == [5, 6, 7, 1], "an earlier one when the latest has too few"
    assert propose([1, 2, 1], 0) == []
    assert propose([3, 1, 5, 3, 1], 1) == [5], "the longest n-gram that occurs wins"


@pytest.fixture(scope="module")
def smol():
    return load_pretrained("embedded", progress=lambda m: None)


def run(smol, precision: str, continuous: bool, drafts: int, params: SamplingParams):
    model, tokenizer = smol
    dims = Dims(batch_size=1 if continuous else 2, prefill_seq_len=16, ctx_len=160, vocab=model.config.vocab_size,
                full_batch_size=2 if continuous else 0)
    engine = Engine(open_cpu_session(model, dims, True, precision), tokenizer)
    engine.speculative_tokens, engine.meter = drafts, Recorder()
    seqs = engine.generate(REPETITIVE, params)
    counts, _ = engine.meter.take()
    return [s.tokens for s in seqs], counts


@pytest.mark.parametrize("precision", ["fp32", "int4"])
@pytest.mark.parametrize("continuous", [True, False], ids=["stream", "batch"])
def test_greedy_answers_are_the_same_with_speculation_and_drafts_are_accepted(smol, precision, continuous) -> None:
    greedy = SamplingParams(max_tokens=24, ignore_eos=True)
    plain, plain_counts = run(smol, precision, continuous, 0, greedy)
    speculated, counts = run(smol, precision, continuous, 4, greedy)
    assert speculated == plain
    drafted, accepted = counts[("qaic_spec_decode_num_draft_tokens_total", "")], counts[
        ("qaic_spec_decode_num_accepted_tokens_total", "")]
    assert 0 < accepted <= drafted, "the repeated text is drafted and partly accepted"
    assert counts[("qaic_generation_tokens_total", "")] == plain_counts[("qaic_generation_tokens_total", "")] == 48
    assert counts[("qaic_decode_step_sequences_total", "")] < plain_counts[("qaic_decode_step_sequences_total", "")]


def test_sampled_requests_are_not_speculated(smol) -> None:
    _, counts = run(smol, "int4", True, 4, SamplingParams(max_tokens=8, temperature=0.8, seed=1))
    assert counts.get(("qaic_spec_decode_num_draft_tokens_total", ""), 0) == 0


def test_num_speculative_tokens_is_a_model_parameter_in_range(tmp_path) -> None:
    assert BackendSettings.from_model_dir(tmp_path, {"num_speculative_tokens": "4"}).speculative_tokens == 4
    assert BackendSettings.from_model_dir(tmp_path, {}).speculative_tokens == 0
    for bad in ("-1", "17", "four"):
        with pytest.raises(SessionError, match="num_speculative_tokens must be an integer from 0 to 16"):
            BackendSettings.from_model_dir(tmp_path, {"num_speculative_tokens": bad})


def test_a_drafted_position_fed_again_is_run_again_not_taken_from_the_last_call(smol) -> None:
    """A slot's rows of one call (its token and two drafts), then the next call's after the first draft was
    rejected: its row at the second draft's position, with the same token, attends over the new token before it.
    It gets what one-row steps give, not the logits the rejected draft's call left (found by the bench: greedy
    answers changed at 2 and 3 drafted tokens)."""
    model, _ = smol
    dims = Dims(batch_size=1, prefill_seq_len=8, ctx_len=32, vocab=model.config.vocab_size, full_batch_size=1)

    def prefilled():
        session = open_cpu_session(model, dims, True, "fp32")
        ids = np.array([[5, 6, 7, 8, 0, 0, 0, 0]])
        session.run({"input_ids": ids, "position_ids": np.array([[0, 1, 2, 3, -1, -1, -1, -1]]),
                     "batch_index": np.array([[0]])})
        return session

    def rows(session, *fed: tuple[int, int]):
        ids, pos = np.array([[t] for t, _ in fed]), np.array([[p] for _, p in fed])
        return session.run({"input_ids": ids, "position_ids": pos, "batch_index": np.zeros((len(fed), 1), int)})

    drafted = prefilled()
    rows(drafted, (9, 4), (10, 5), (11, 6))  # the token and two drafts; the first draft is rejected
    again = rows(drafted, (12, 5), (11, 6))["logits"][1, -1]  # the model's token, the same second draft
    single = prefilled()
    for fed in ((9, 4), (12, 5)):
        rows(single, fed)
    assert np.array_equal(again, rows(single, (11, 6))["logits"][0, -1])
