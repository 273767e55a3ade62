"""The generation engine on the real embedded model: parity, batching modes, stops, cancellation."""

from __future__ import annotations

import pytest
import torch
from helpers import engine_threads  # noqa: F401 (autouse: the engine's threads)
from twin_data import PROMPTS as REFERENCE_PROMPTS
from twin_data import TOKENS

from backend_model.contract.errors import BadRequest
from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.models import eos_ids
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.hf import CpuRecomputeSession
from backend_model.sessions.protocol import Dims

PROMPTS = [
    "My name is",
    "Maroon bells are mountains in Colorado, and",
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a faraway kingdom,",
    "Water boils at",
    "The three primary colours are",
    "In 1969, the first humans",
]


def make_engine(smol, *, slots: int = 4, continuous: bool = True, prefill: int = 4, ctx: int = 256,
                kv: bool = True) -> Engine:
    model, tokenizer = smol
    dims = Dims(batch_size=1 if continuous else slots, prefill_seq_len=prefill, ctx_len=ctx,
                vocab=model.config.vocab_size, full_batch_size=slots if continuous else 0)
    session = CpuKVSession.of(model, dims) if kv else CpuRecomputeSession(model, dims)
    return Engine(session, tokenizer, eos_ids(model, tokenizer))


def test_continuous_batching_chunked_prefill_matches_hf_full_recompute(smol, reference):
    """The twin tests' reference (transformers' full-recompute greedy decoding, computed once a session)."""
    engine = make_engine(smol, slots=4, prefill=2)  # 8 prompts > 4 slots: slots are refilled
    assert all(len(engine.encode(p)) > 2 for p in REFERENCE_PROMPTS)  # every prompt is prefilled in chunks
    seqs = engine.generate(REFERENCE_PROMPTS, SamplingParams(max_tokens=TOKENS))
    assert {s.finish_reason for s in seqs} <= {"length", "eos"}
    for prompt, seq in zip(REFERENCE_PROMPTS, seqs):
        assert seq.tokens == reference(prompt), prompt


@pytest.mark.parametrize("count", [1, 2, 3])
def test_regular_mode_answers_every_prompt_like_single_runs(smol, count):
    engine = make_engine(smol, slots=2, continuous=False, prefill=8)
    single = make_engine(smol, slots=1, continuous=False, prefill=8)
    params = SamplingParams(max_tokens=12)
    prompts = PROMPTS[:count]
    seqs = engine.generate(prompts, params)
    assert [s.finished for s in seqs] == [True] * count
    for prompt, seq in zip(prompts, seqs):
        assert seq.text == single.generate([prompt], params)[0].text
    assert engine.slots == [None, None]  # the batch ended and freed its rows


def test_causal_recompute_session_matches_kv_session(smol):
    params = SamplingParams(max_tokens=10)
    kv = make_engine(smol, slots=2, prefill=16).generate(PROMPTS[:2], params)
    causal = make_engine(smol, slots=1, continuous=False, kv=False, prefill=256).generate(PROMPTS[:2], params)
    assert [s.tokens for s in kv] == [s.tokens for s in causal]


def test_cancel_frees_the_slot_for_the_next_prompt(smol):
    engine = make_engine(smol, slots=1)
    first = engine.submit(engine.encode(PROMPTS[0]), SamplingParams(max_tokens=200))
    second = engine.submit(engine.encode(PROMPTS[1]), SamplingParams(max_tokens=5))
    while len(first.tokens) < 3:
        engine.step()
    assert engine.slots[0] is first and not second.tokens
    engine.cancel(first)
    updates = engine.step()
    assert [(u.seq, u.finished) for u in updates] == [(first, True)]
    assert first.finish_reason == "cancelled" and engine.slots[0] is None
    while not second.finished:
        engine.step()
    assert second.finish_reason == "length" and len(second.tokens) == 5
    assert len(first.tokens) == 3  # nothing ran for the cancelled sequence after its cancel


def test_eos_length_and_ctx_len_finish_reasons(smol):
    model, tokenizer = smol
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "Say hi."}], tokenize=False,
                                         add_generation_prompt=True)
    engine = make_engine(smol, slots=2, ctx=128)
    eos, length = engine.generate([chat, PROMPTS[0]], SamplingParams(max_tokens=60))
    assert eos.finish_reason == "eos" and eos.tokens[-1] in engine.eos_ids and len(eos.tokens) < 60
    assert "<|im_end|>" not in eos.text
    assert length.finish_reason == "length" and len(length.tokens) == 60
    short = make_engine(smol, slots=1, ctx=16)
    (seq,) = short.generate([PROMPTS[0]])
    assert seq.finish_reason == "ctx_len"
    assert len(seq.prompt_ids) + len(seq.tokens) == 16  # generation stops at ctx_len, as QEfficient


def test_prompt_too_long_or_empty_is_a_clear_error(smol):
    engine = make_engine(smol, slots=1, ctx=16)
    with pytest.raises(BadRequest, match="ctx_len is 16"):
        engine.submit(engine.encode("word " * 40), SamplingParams())
    with pytest.raises(BadRequest, match="the prompt is empty"):
        engine.submit([], SamplingParams())
    assert engine.generate([PROMPTS[0]], SamplingParams(max_tokens=2))[0].finish_reason == "length"


STREAM_PROMPTS = ["Translate to Japanese: good morning ->", "Emoji of a cat:", "Ünïcödé façade, naïve"]


@pytest.mark.parametrize("prompt", STREAM_PROMPTS)
def test_streamed_text_joins_to_the_final_text(smol, prompt):
    model, tokenizer = smol
    engine = make_engine(smol, slots=1)
    updates = list(engine.stream([prompt], SamplingParams(max_tokens=24)))
    pieces = [u.text for u in updates]
    seq = updates[-1].seq
    assert "".join(pieces) == seq.text
    assert seq.text == tokenizer.decode(seq.tokens, skip_special_tokens=True)


def test_multibyte_characters_are_never_split(smol):
    model, tokenizer = smol
    engine = make_engine(smol, slots=1)
    seq = engine.submit(engine.encode("x"), SamplingParams(max_tokens=4))
    text = "日本語 😀 ü"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert len(ids) > len(text.split())  # some characters span several tokens
    pieces = [seq.detok.add(i) for i in ids] + [seq.detok.flush()]
    assert "".join(pieces) == text and all("\ufffd" not in p for p in pieces)


def test_stop_strings_end_the_sequence_without_the_stop_text(smol):
    engine = make_engine(smol, slots=1)
    (free,) = engine.generate(["1, 2, 3,"], SamplingParams(max_tokens=20))
    assert " 6," in free.text
    updates = list(engine.stream(["1, 2, 3,"], SamplingParams(max_tokens=20, stop=(" 6,",))))
    seq = updates[-1].seq
    assert seq.finish_reason == "stop"
    assert seq.text == free.text[: free.text.index(" 6,")]
    assert "".join(u.text for u in updates) == seq.text


def test_sampling_is_seeded_and_greedy_by_default(smol):
    engine = make_engine(smol, slots=4)
    params = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, top_k=50, seed=7)
    a, b, greedy = engine.generate([PROMPTS[4]] * 2 + [PROMPTS[4]], params)
    assert a.tokens == b.tokens  # same seed, same sample
    other = engine.generate([PROMPTS[4]], SamplingParams(max_tokens=16, temperature=1.0, seed=8))[0]
    base = engine.generate([PROMPTS[4]], SamplingParams(max_tokens=16))[0]
    assert other.tokens != a.tokens or base.tokens != a.tokens


def test_a_failing_session_ends_its_sequences_and_the_engine_serves_on(smol):
    engine = make_engine(smol, slots=2)
    real_run = engine.session.run
    calls = {"n": 0}

    def flaky(inputs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("device lost")
        return real_run(inputs)

    engine.session.run = flaky
    (broken,) = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=4))
    assert broken.finish_reason == "error" and "device lost" in broken.error
    (ok,) = engine.generate([PROMPTS[0]], SamplingParams(max_tokens=4))
    assert ok.finish_reason == "length" and ok.text


def test_repetition_penalty_changes_a_repetitive_continuation(smol):
    engine = make_engine(smol, slots=1)
    plain = engine.generate(["1, 2, 3,"], SamplingParams(max_tokens=16))[0]
    penalised = engine.generate(["1, 2, 3,"], SamplingParams(max_tokens=16, repetition_penalty=1.5))[0]
    assert penalised.tokens != plain.tokens
    repeats = [len(s.tokens) - len(set(s.tokens)) for s in (plain, penalised)]
    assert repeats[1] < repeats[0], repeats  # the penalty made the continuation repeat itself less


def test_int4_reproduces_weights_on_a_q4_1_grid():
    from backend_model.sessions.cpu_kernels import INT4_GROUP, Linear

    torch.manual_seed(0)
    n, k = 64, 4 * INT4_GROUP
    q = torch.randint(0, 16, (n, k // INT4_GROUP, INT4_GROUP))
    q[..., 0], q[..., 1] = 0, 15  # Q4_1 maps each block's min to 0 and its max to 15
    d = torch.rand(n, k // INT4_GROUP, 1) * 0.05 + 0.01
    m = torch.randn(n, k // INT4_GROUP, 1) * 0.1
    w = (m + q * d).reshape(n, k)
    x = torch.randn(3, k).bfloat16()
    dense = Linear(w, None, "bf16")(x).float()
    packed = Linear(w, None, "int4")(x).float()
    assert torch.allclose(packed, dense, rtol=0.02, atol=0.02)


def test_int4_session_generates_like_bf16(smol):
    model, tokenizer = smol
    dims = Dims(1, 8, 128, model.config.vocab_size, 2)
    texts = {}
    for precision in ("bf16", "int4"):
        engine = Engine(CpuKVSession.of(model, dims, precision), tokenizer, eos_ids(model, tokenizer))
        texts[precision] = engine.generate(["The capital of France is"], SamplingParams(max_tokens=6))[0].text
    assert "Paris" in texts["int4"]
    assert texts["int4"] == texts["bf16"]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int4"])
def test_a_prompt_gets_its_answer_alone_beside_any_number_of_others(smol, precision):
    """Batch invariance on the engine: the same greedy tokens alone and beside 1, 3 or 7 prompts of other
    lengths, in whichever slot the scheduler gives it."""
    model, tokenizer = smol
    dims = Dims(batch_size=1, prefill_seq_len=32, ctx_len=256, vocab=model.config.vocab_size, full_batch_size=8)
    engine = Engine(CpuKVSession.of(model, dims, precision), tokenizer, eos_ids(model, tokenizer))
    params = SamplingParams(max_tokens=16)
    alone = {p: engine.generate([p], params)[0].tokens for p in PROMPTS}
    for others in (1, 3, 7):
        group = [PROMPTS[(others + i) % len(PROMPTS)] for i in range(others + 1)]
        seqs = engine.generate(group, params)
        assert [s.tokens for s in seqs] == [alone[p] for p in group], (precision, others)
