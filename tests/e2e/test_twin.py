"""The card's twin: the QAIC adapter (``QaicSession``, unchanged) on a real exported graph on real ONNX
Runtime, token-exact with transformers fp32 greedy decoding (8 prompts x 32 tokens), as QEfficient
tests its own ONNX export and its card."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch
from helpers import engine_threads  # noqa: F401 (autouse: the engine's threads)
from twin_data import CTX_LEN, PROMPTS, TOKENS, VOCAB

from backend_model.contract import specializations
from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.models import eos_ids
from backend_model.sessions.protocol import Dims
from backend_model.sessions.qaic import QaicSession, retained_names
from backend_model.twin.session import OnnxInferenceSession, onnx_opener

PARAMS = SamplingParams(max_tokens=TOKENS)


def twin_engine(folder, smol) -> Engine:
    """The twin on the threads a served model takes (``engine_threads``), as ``serve`` opens it."""
    model, tokenizer = smol
    opener = onnx_opener(threads=torch.get_num_threads())
    return Engine(QaicSession(folder, opener=opener), tokenizer, eos_ids(model, tokenizer))


def assert_matches_transformers(seqs, prompts, reference) -> None:
    assert {s.finish_reason for s in seqs} <= {"length", "eos"}  # transformers stops at EOS too
    for prompt, seq in zip(prompts, seqs):
        assert seq.tokens == reference(prompt), prompt


def record_runs(engine: Engine) -> list[dict[str, np.ndarray]]:
    """Every input the twin receives, in order (the twin still runs them)."""
    runtime = engine.session.session
    calls, run = [], runtime.run

    def recording(inputs):
        calls.append({k: np.array(v) for k, v in inputs.items()})
        return run(inputs)

    runtime.run = recording
    return calls


@pytest.mark.parametrize("batch_size", [1, 2])
def test_regular_batching_matches_transformers(compiled, smol, reference, batch_size):
    engine = twin_engine(compiled(batch_size=batch_size, prefill_seq_len=8), smol)
    assert engine.dims == Dims(batch_size, 8, CTX_LEN, VOCAB)
    calls = record_runs(engine)
    # 7 prompts, then 1: with batch_size 2 both end in a short batch, filled by repeating its prompts
    seqs = engine.generate(PROMPTS[:7], PARAMS) + engine.generate(PROMPTS[7:], PARAMS)
    assert_matches_transformers(seqs, PROMPTS, reference)
    assert {c["input_ids"].shape[0] for c in calls} == {batch_size}  # every run has the compiled batch


def test_continuous_batching_refills_slots_with_prefill_chunks_shorter_than_the_prompts(compiled, smol, reference):
    engine = twin_engine(compiled(prefill_seq_len=2, full_batch_size=4), smol)
    assert engine.dims == Dims(1, 2, CTX_LEN, VOCAB, full_batch_size=4)
    assert min(len(engine.encode(p)) for p in PROMPTS) > 2  # every prompt takes several chunks
    calls = record_runs(engine)
    seqs = engine.generate(PROMPTS, PARAMS)  # 8 prompts, 4 slots: each slot is refilled
    assert_matches_transformers(seqs, PROMPTS, reference)
    prefills = [c for c in calls if c["input_ids"].shape == (1, 2)]
    decodes = [c for c in calls if c["input_ids"].shape == (4, 1)]
    assert len(prefills) + len(decodes) == len(calls)
    assert sorted({int(c["batch_index"][0, 0]) for c in prefills}) == [0, 1, 2, 3]
    assert len({(int(c["batch_index"][0, 0]), int(c["input_ids"][0, 0])) for c in prefills if
                c["position_ids"][0, 0] == 0}) == len(PROMPTS)  # 8 prompts started at position 0


def test_idle_decode_rows_repeat_their_last_token_and_position(compiled, smol, reference):
    """QEfficient never sends -1 in a decode step: a finished row repeats what it was last fed."""
    engine = twin_engine(compiled(prefill_seq_len=2, full_batch_size=4), smol)
    calls = record_runs(engine)
    params = [SamplingParams(max_tokens=n) for n in (3, 12, 6, 12)]  # rows finish at different steps
    seqs = [engine.submit(engine.encode(p), sp) for p, sp in zip(PROMPTS[:4], params)]
    while not all(s.finished for s in seqs):
        engine.step()
    for seq, sp, prompt in zip(seqs, params, PROMPTS):
        assert seq.tokens == reference(prompt)[: sp.max_tokens]
    decodes = [np.concatenate([c["input_ids"], c["position_ids"]], 1) for c in calls if c["input_ids"].shape == (4, 1)]
    assert all((d[:, 1] >= 0).all() for d in decodes)
    repeated = 0
    for before, after in zip(decodes, decodes[1:]):
        for slot in range(4):
            if after[slot, 1] != before[slot, 1] + 1:  # not advancing: it repeats exactly
                assert (after[slot] == before[slot]).all()
                repeated += 1
    assert repeated >= 9 + 6  # slot 0 idles from its 3rd token, slot 2 from its 6th
    first = decodes[-1][0]  # slot 0's last decode fed its 2nd token at its prompt's end + 1
    assert first.tolist() == [seqs[0].tokens[1], len(seqs[0].prompt_ids) + 1]


def test_a_fixed_shape_build_has_no_allowed_shapes_and_its_dims_come_from_the_bindings(compiled, smol, reference):
    folder = compiled(batch_size=1, prefill_seq_len=1)  # no separate decode specialization
    assert len(specializations.read(folder / specializations.FILE)) == 1
    engine = twin_engine(folder, smol)
    runtime = engine.session.session
    assert runtime.allowed_shapes == []  # as qaicrt reports a one-specialization QPC
    assert runtime.bindings[runtime.binding_index_map["input_ids"]].dims == [1, 1]
    assert runtime.bindings[runtime.binding_index_map["past_key.0"]].dims == [1, 3, CTX_LEN, 64]
    assert engine.dims == Dims(1, 1, CTX_LEN, VOCAB)
    assert_matches_transformers(engine.generate(PROMPTS, PARAMS), PROMPTS, reference)


@pytest.mark.parametrize("flat", [False, True], ids=["named", "flat"])
def test_both_specializations_forms_compile_the_same(compiled, smol, reference, flat):
    folder = compiled(batch_size=2, prefill_seq_len=8, flat=flat)
    entries = json.loads((folder / specializations.FILE).read_text())["specializations"]
    assert ("symbols" in entries[0]) is not flat
    engine = twin_engine(folder, smol)
    assert engine.dims == Dims(2, 8, CTX_LEN, VOCAB)
    assert len(engine.session.session.allowed_shapes) == 2  # prefill and decode
    assert_matches_transformers(engine.generate(PROMPTS, PARAMS), PROMPTS, reference)


def test_the_export_has_qefficients_interface_and_writes_the_current_specializations(graphs):
    graph = ort.InferenceSession(str(graphs["continuous"] / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs = {a.name: (a.shape, a.type) for a in graph.get_inputs()}
    outputs = {a.name: (a.shape, a.type) for a in graph.get_outputs()}
    assert inputs["input_ids"] == inputs["position_ids"] == (["batch_size", "seq_len"], "tensor(int64)")
    assert inputs["batch_index"] == (["batch_size", 1], "tensor(int64)")
    assert inputs["past_key.29"] == (["full_batch_size", 3, "ctx_len", 64], "tensor(float)")
    assert outputs["logits"] == (["batch_size", 1, VOCAB], "tensor(float)")
    assert outputs["past_value.29_RetainedState"] == inputs["past_value.29"]
    assert len(inputs) == 3 + 60 and len(outputs) == 1 + 60
    regular = ort.InferenceSession(str(graphs["regular"] / "model.onnx"), providers=["CPUExecutionProvider"])
    assert "batch_index" not in {a.name for a in regular.get_inputs()}
    assert json.loads((graphs["continuous"] / "specializations.json").read_text()) == {"specializations": [
        {"name": "Prefill", "symbols": {"batch_size": "1", "seq_len": "4", "ctx_len": str(CTX_LEN),
                                        "full_batch_size": "4", "full_batch_exec_size": "1"}},
        {"name": "Decode", "symbols": {"batch_size": "4", "seq_len": "1", "ctx_len": str(CTX_LEN),
                                       "full_batch_size": "4"}},
    ]}
    assert specializations.read(graphs["regular"] / "specializations.json") == [
        {"batch_size": "2", "seq_len": "8", "ctx_len": str(CTX_LEN)},
        {"batch_size": "2", "seq_len": "1", "ctx_len": str(CTX_LEN)},
    ]


def _runtime(folder) -> OnnxInferenceSession:
    return OnnxInferenceSession(folder / "model.onnx", specializations.read(folder / specializations.FILE))


def test_a_shape_no_specialization_allows_is_refused_with_the_allowed_shapes(compiled):
    runtime = _runtime(compiled(prefill_seq_len=2, full_batch_size=4))
    runtime.skip_buffers(retained_names(runtime))
    runtime.set_buffers({"logits": np.zeros((1, 1, VOCAB), np.float32)})
    ids = np.zeros((1, 3), np.int64)
    with pytest.raises(ValueError, match=r"(?s)Allowed shapes:.*input_ids:\t8\t\[1, 2\].*Passed shapes:.*\[1, 3\]"):
        runtime.run({"input_ids": ids, "position_ids": ids, "batch_index": np.zeros((1, 1), np.int64)})
    with pytest.raises(ValueError, match="Allowed shapes"):  # a decode with the prefill's logits buffer
        runtime.run({"input_ids": np.zeros((4, 1), np.int64), "position_ids": np.zeros((4, 1), np.int64),
                     "batch_index": np.arange(4).reshape(4, 1)})


def test_retained_state_stays_inside_as_on_the_card_and_padding_writes_nothing(compiled, smol):
    """The same steps on a card-like twin (state skipped, kept inside) and with QEfficient's ORT
    round trip (state sent and returned each run) give the same logits; padding (-1) is not written."""
    _, tokenizer = smol
    folder = compiled(prefill_seq_len=8, full_batch_size=4)
    card, host = _runtime(folder), _runtime(folder)
    card.skip_buffers(retained_names(card))
    state = {n: np.zeros(card.bindings[card.binding_index_map[n]].dims, np.float32)
             for n in card.input_names if n.startswith("past_")}
    prompt = tokenizer("My name is").input_ids  # 3 tokens in a chunk of 8: 5 padded
    ids, pos = np.zeros((1, 8), np.int64), np.full((1, 8), -1, np.int64)
    ids[0, :3], pos[0, :3] = prompt, np.arange(3)
    steps = [(ids, pos, np.array([[2]]), (1, 1, VOCAB))]
    steps.append((np.array([[0], [0], [42], [0]]), np.array([[0], [0], [3], [0]]), np.arange(4).reshape(4, 1),
                  (4, 1, VOCAB)))
    for step_ids, step_pos, slots, logits_shape in steps:
        inputs = {"input_ids": step_ids, "position_ids": step_pos, "batch_index": slots}
        for runtime in (card, host):
            runtime.set_buffers({"logits": np.zeros(logits_shape, np.float32)})
        on_card = card.run(inputs)
        on_host = host.run({**inputs, **state})
        assert set(on_card) == {"logits"}  # retained state never leaves the card
        np.testing.assert_array_equal(on_card["logits"], on_host["logits"])
        state = {n: on_host[n + "_RetainedState"] for n in state}
        if logits_shape[0] == 1:  # after the padded prefill into slot 2
            key = state["past_key.0"]
            assert key[2, :, :3].any(-1).all()  # the 3 prompt positions are written
            assert not key[2, :, 3:].any()  # the 5 padded positions are not
            assert not key[[0, 1, 3]].any()  # nor is any other slot (QEfficient's ORT rewrite hits position 0)
    key = state["past_key.0"]
    assert key[2, :, 3].any(-1).all() and not key[2, :, 4:].any()  # decode wrote slot 2 at position 3 only
