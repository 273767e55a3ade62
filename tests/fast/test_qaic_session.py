"""The QAIC adapter against the session contract.

No card exists here, so ``FakeQaicRuntime`` stands in for QEfficient's ``QAICInferenceSession``
(the card alone): it exposes the same attributes, records every call, and refuses any shape that
no specialization allows, as the real session does. Its arithmetic comes from the CPU session,
so the engine must produce the same tokens through the adapter as on the CPU directly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from backend_model.build import BackendSettings, choose_engine
from backend_model.contract import compile_config
from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.models import eos_ids, load_pretrained
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.protocol import Dims, SessionError
from backend_model.sessions.qaic import QaicSession, find_qpc, qaic_available

LAYERS, KV_HEADS, HEAD_DIM = 2, 3, 64


class FakeQaicRuntime:
    """QAICInferenceSession's interface for one compiled QPC; records calls; checks shapes."""

    def __init__(self, specs: list[dict[str, list[int]]], compute) -> None:
        self.compute = compute
        first = specs[0]
        self.input_names = [n for n in first if not n.startswith("logits") and "Retained" not in n]
        self.output_names = [n for n in first if n not in self.input_names]
        self.binding_index_map = {n: i for i, n in enumerate(first)}
        self.allowed_shapes = [[(8 if n != "logits" else 4, spec[n]) for n in first] for spec in specs]
        self.skipped: list[str] = []
        self.buffers: dict[str, tuple[int, ...]] = {}
        self.calls: list[dict[str, tuple[int, ...]]] = []

    def skip_buffers(self, names):
        self.skipped += list(names)

    def set_buffers(self, buffers):
        self.buffers.update({k: v.shape for k, v in buffers.items()})

    def run(self, inputs):
        shapes = {k: tuple(v.shape) for k, v in inputs.items()}
        shapes["logits"] = self.buffers["logits"]
        for spec in self.allowed_shapes:
            if all(tuple(spec[self.binding_index_map[k]][1]) == s for k, s in shapes.items()):
                break
        else:
            raise ValueError(f"shapes {shapes} not in allowed shapes {self.allowed_shapes}")
        self.calls.append(shapes)
        return self.compute(inputs)


def opening(fake: FakeQaicRuntime):
    """An opener handing ``QaicSession`` the double (and the QPC folder, as QEfficient's opener does)."""
    return lambda path, devices: (fake, find_qpc(path))


def kv_specs(full_batch: int, prefill: int, ctx: int, vocab: int) -> list[dict[str, list[int]]]:
    def spec(batch: int, seq: int) -> dict[str, list[int]]:
        names = {"input_ids": [batch, seq], "position_ids": [batch, seq], "batch_index": [batch, 1]}
        for i in range(LAYERS):
            names[f"past_key.{i}"] = [full_batch, KV_HEADS, ctx, HEAD_DIM]
            names[f"past_value.{i}"] = [full_batch, KV_HEADS, ctx, HEAD_DIM]
        names["logits"] = [batch, 1, vocab]
        for i in range(LAYERS):
            names[f"past_key.{i}_RetainedState"] = [full_batch, KV_HEADS, ctx, HEAD_DIM]
            names[f"past_value.{i}_RetainedState"] = [full_batch, KV_HEADS, ctx, HEAD_DIM]
        return names

    return [spec(1, prefill), spec(full_batch, 1)]


@pytest.fixture(scope="module")
def smol():
    return load_pretrained("embedded")


@pytest.fixture()
def qpc_dir(tmp_path: Path) -> Path:
    qpc = tmp_path / "qpc-1234" / "qpc"
    qpc.mkdir(parents=True)
    (qpc / "programqpc.bin").write_bytes(b"\0")
    return tmp_path


def test_dims_and_retained_state_are_read_from_the_qpc(qpc_dir, smol):
    model, _ = smol
    fake = FakeQaicRuntime(kv_specs(4, 16, 128, model.config.vocab_size), compute=None)
    session = QaicSession(qpc_dir, opener=opening(fake))
    assert session.dims == Dims(batch_size=1, prefill_seq_len=16, ctx_len=128, vocab=49152, full_batch_size=4)
    assert session.kv
    expected = {f"past_{kind}.{i}" for kind in ("key", "value") for i in range(LAYERS)}
    assert set(fake.skipped) == expected | {f"{n}_RetainedState" for n in expected}


def test_specializations_json_gives_ctx_len(qpc_dir, smol):
    (qpc_dir / "qpc-1234" / "specializations.json").write_text(json.dumps({"specializations": [
        {"batch_size": "1", "seq_len": "16", "ctx_len": "96", "full_batch_size": "4"},
        {"batch_size": "4", "seq_len": "1", "ctx_len": "96", "full_batch_size": "4"}]}))
    fake = FakeQaicRuntime(kv_specs(4, 16, 128, 49152), compute=None)
    assert QaicSession(qpc_dir, opener=opening(fake)).dims.ctx_len == 96


def test_engine_through_the_adapter_matches_the_cpu_session(qpc_dir, smol):
    model, tokenizer = smol
    dims = Dims(batch_size=1, prefill_seq_len=4, ctx_len=128, vocab=model.config.vocab_size, full_batch_size=2)
    card = CpuKVSession.of(model, dims)
    fake = FakeQaicRuntime(kv_specs(2, 4, 128, dims.vocab), compute=card.run)
    via_card = Engine(QaicSession(qpc_dir, opener=opening(fake)), tokenizer, eos_ids(model, tokenizer))
    direct = Engine(CpuKVSession.of(model, dims), tokenizer, eos_ids(model, tokenizer))
    prompts = ["My name is", "Maroon bells", "The capital of France is"]  # 3 prompts, 2 slots: refill
    params = SamplingParams(max_tokens=8)
    expected = [s.tokens for s in direct.generate(prompts, params)]
    assert [s.tokens for s in via_card.generate(prompts, params)] == expected
    prefills = [c for c in fake.calls if c["input_ids"] == (1, 4)]
    decodes = [c for c in fake.calls if c["input_ids"] == (2, 1)]
    assert prefills and decodes and len(prefills) + len(decodes) == len(fake.calls)
    assert all(c["logits"] == (1, 1, dims.vocab) for c in prefills)  # placeholder set per shape
    assert all(c["logits"] == (2, 1, dims.vocab) for c in decodes)


def test_causal_qpc_gets_left_padded_sequences_with_a_mask(qpc_dir, smol):
    model, tokenizer = smol
    seq_len, vocab = 24, model.config.vocab_size

    def forward(inputs):
        with torch.inference_mode():
            ids, mask = torch.from_numpy(inputs["input_ids"]), torch.from_numpy(inputs["attention_mask"])
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            return {"logits": model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.numpy()}

    specs = [{"input_ids": [1, seq_len], "attention_mask": [1, seq_len], "logits": [1, seq_len, vocab]}]
    fake = FakeQaicRuntime(specs, compute=forward)
    session = QaicSession(qpc_dir, opener=opening(fake))
    assert not session.kv and session.dims.ctx_len == seq_len and not fake.skipped
    engine = Engine(session, tokenizer, eos_ids(model, tokenizer))
    (seq,) = engine.generate(["My name is"], SamplingParams(max_tokens=6))
    cpu = Engine(CpuKVSession.of(model, Dims(1, 8, 64, vocab, 1)), tokenizer, eos_ids(model, tokenizer))
    assert seq.tokens == cpu.generate(["My name is"], SamplingParams(max_tokens=6))[0].tokens
    assert len(fake.calls) == 6  # one full recompute per generated token


def test_without_qefficient_the_adapter_says_what_to_do(qpc_dir):
    assert not qaic_available()
    with pytest.raises(SessionError, match="QEfficient is not installed.*qeff-env"):
        QaicSession(qpc_dir)


def test_qpc_lookup_errors(tmp_path):
    with pytest.raises(SessionError, match="does not exist"):
        find_qpc(tmp_path / "missing")
    with pytest.raises(SessionError, match="no programqpc.bin"):
        find_qpc(tmp_path)


def test_engine_selection_reports_cpu_here_and_refuses_forced_qaic():
    settings = BackendSettings(compile=compile_config.validate({}))
    assert choose_engine(settings) == "cpu"
    settings.engine = "qaic"
    with pytest.raises(SessionError, match="engine=qaic but QEfficient"):
        choose_engine(settings)


def test_a_dual_qpc_language_model_gets_its_images_as_qefficient_sets_them(qpc_dir, smol):
    """vision/card.py against QEfficient's calls (VisionLanguageGeneration): the vision_embeds buffer set before the
    prefill of a prompt with images and skipped after it, image_idx with every run (0 in decode), every retained
    state skipped."""
    from backend_model.engine.media import Media
    from backend_model.vision.card import QaicLanguageSession

    _, tokenizer = smol
    vocab, image = tokenizer.vocab_size, 49000
    specs = kv_specs(2, 4, 64, vocab)
    for spec in specs:
        spec.update({"image_idx": [1, 1], "vision_embeds": [1, 4, 8], "vision_embeds_RetainedState": [1, 4, 8]})
    seen: list[tuple[int, bool]] = []

    def compute(inputs):
        seen.append((int(inputs["image_idx"][0, 0]), "vision_embeds" in fake.buffers))
        return {"logits": np.zeros((len(inputs["input_ids"]), 1, vocab), dtype=np.float32)}

    fake = FakeQaicRuntime(specs, compute)
    engine = Engine(QaicLanguageSession(str(qpc_dir), opener=opening(fake)), tokenizer)
    assert {"vision_embeds", "vision_embeds_RetainedState", "past_key.0_RetainedState"} <= set(fake.skipped)
    prompt = [5, 6, 7, image, image, image, image, 9]  # two chunks: the image's four embeddings, 1 then 3
    seq = engine.prepare(prompt, SamplingParams(max_tokens=3), media=Media(np.ones((1, 4, 8)), image, "d"))
    engine.enqueue([seq])
    while not seq.finished:
        engine.step()
    assert seen[:2] == [(0, True), (1, True)], "prefill: image_idx from the placeholders before each chunk"
    assert fake.buffers["vision_embeds"] == (1, 4, 8)
    assert [index for index, _ in seen[2:]] == [0, 0], "decode: image_idx 0"
    assert fake.skipped.count("vision_embeds") == 1 + 2, "skipped again after each prefill run"
