"""LoRA adapters on the CPU engine: each row's adapter in the same batch (mixed adapters a step, base rows
untouched), equal to the merged model (``merge_and_unload()``) at fp32, the same alone and mixed at the other
precisions; an unknown adapter named; prefix reuse never across adapters; ``max_loras`` honoured; the backend's
metrics count requests per adapter."""

from __future__ import annotations

import pytest
from helpers import engine_threads  # noqa: F401 (autouse: the engine's threads)
from lora_adapters import PROMPT, merged_answers

from backend_model.contract.errors import BadRequest
from backend_model.engine.loop import Engine
from backend_model.engine.metrics import Recorder
from backend_model.engine.sampling import SamplingParams
from backend_model.models import load_pretrained
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.lora import Adapter
from backend_model.sessions.protocol import Dims

MAX_TOKENS = 8
NAMES = (None, "A", "B")  # the base, then each adapter


@pytest.fixture(scope="module")
def smol():
    return load_pretrained("embedded", progress=lambda m: None)


@pytest.fixture(scope="module")
def adapters(smol, lora_folders):
    return {name: Adapter.read(folder, smol[0].config.to_dict()) for name, folder in lora_folders.items()}


def engine_on(smol, adapters, precision: str = "fp32", slots: int = 4, prefix_caching: bool = False) -> Engine:
    model, tokenizer = smol
    dims = Dims(batch_size=1, prefill_seq_len=8, ctx_len=96, vocab=model.config.vocab_size, full_batch_size=slots)
    session = CpuKVSession.of(model, dims, precision, adapters=adapters)
    engine = Engine(session, tokenizer, prefix_caching=prefix_caching)
    engine.meter = Recorder()
    return engine


def answers(engine: Engine, requests: list[tuple[str, str | None]]) -> list[list[int]]:
    """Each (prompt, adapter)'s greedy tokens, all submitted at once (they share the decode steps)."""
    seqs = [engine.submit(engine.encode(p), SamplingParams(max_tokens=MAX_TOKENS, lora_name=n)) for p, n in requests]
    while not all(s.finished for s in seqs):
        engine.step()
    return [s.tokens for s in seqs]


def test_a_mixed_batch_answers_as_each_merged_model_alone(smol, adapters, lora_folders):
    engine = engine_on(smol, adapters)
    mixed = answers(engine, [(PROMPT, n) for n in ("A", None, "B", "A")])
    expected = {n: merged_answers(lora_folders[n] if n else None, [PROMPT], MAX_TOKENS)[0] for n in NAMES}
    assert mixed == [expected["A"], expected[None], expected["B"], expected["A"]]
    assert len({tuple(t) for t in expected.values()}) == 3  # the adapters answer visibly otherwise than the base
    assert "pineapple" in smol[1].decode(expected["A"])  # what A was trained to say


@pytest.mark.parametrize("precision", ["bf16", "int8", "int4"])
def test_every_precision_applies_each_rows_adapter_and_leaves_the_base_untouched(smol, adapters, precision):
    """Mixed rows answer as alone (int8 aside: its rows vary with the batch by construction), the base rows as a
    session without adapters, and the adapters' rows otherwise."""
    engine = engine_on(smol, adapters, precision)
    alone = {n: answers(engine, [(PROMPT, n)])[0] for n in NAMES}
    plain = answers(engine_on(smol, {}, precision), [(PROMPT, None)])[0]
    assert alone[None] == plain
    assert len({tuple(t) for t in alone.values()}) == 3
    if precision != "int8":
        assert answers(engine, [(PROMPT, n) for n in ("B", None, "A")]) == [alone["B"], alone[None], alone["A"]]


def test_an_unknown_adapter_is_refused_naming_the_served_ones(smol, adapters):
    engine = engine_on(smol, adapters)
    with pytest.raises(BadRequest, match=r"^unknown adapter 'C'; this model serves: A, B$"):
        engine.prepare(engine.encode(PROMPT), SamplingParams(lora_name="C"))
    plain = engine_on(smol, {})
    with pytest.raises(BadRequest, match="unknown adapter 'A'; this model serves: no adapters"):
        plain.prepare(plain.encode(PROMPT), SamplingParams(lora_name="A"))


def test_prefix_reuse_never_matches_across_adapters(smol, adapters):
    engine = engine_on(smol, adapters, slots=1, prefix_caching=True)
    long = PROMPT + " and I say it twice a day, every day, to everyone I meet. " + PROMPT
    first, again, other = (engine.submit(engine.encode(long), SamplingParams(max_tokens=2, lora_name=n))
                           for n in ("A", "A", "B"))
    while not other.finished:
        engine.step()
    assert again.reused > 0 and other.reused == 0
    fresh = engine_on(smol, adapters, slots=1)
    assert answers(fresh, [(long, "B")])[0][:2] == other.tokens


def test_max_loras_keeps_other_adapters_waiting(smol, adapters):
    engine = engine_on(smol, adapters)
    engine.max_loras = 1
    seqs = [engine.submit(engine.encode(PROMPT), SamplingParams(max_tokens=3, lora_name=n)) for n in ("A", "B", "A")]
    mixed = set()
    while not all(s.finished for s in seqs):
        engine.step()
        live = {s.lora for s in engine.slots if s is not None and not s.finished}
        mixed.add(len(live - {0}))
        assert len(live - {0}) <= 1
    assert mixed >= {1}


def test_the_metrics_count_requests_per_adapter(smol, adapters):
    engine = engine_on(smol, adapters)
    answers(engine, [(PROMPT, n) for n in ("A", "B", None, "A")])
    counts, _ = engine.meter.take()
    assert counts[("qaic_lora_requests_total", "A")] == 2 and counts[("qaic_lora_requests_total", "B")] == 1
    assert ("qaic_lora_requests_total", "") not in counts


def test_on_a_card_each_row_carries_its_lora_ids(smol, adapters, tmp_path):
    """The card's path against a stand-in QPC with QEfficient's ``lora_ids`` input [B, 1] (its arithmetic the CPU
    session's): the same answers as the CPU, each prefill and decode row with its adapter's id."""
    from test_qaic_session import FakeQaicRuntime, kv_specs, opening

    from backend_model.build import BackendSettings, _card_adapters
    from backend_model.contract import compile_config
    from backend_model.sessions.protocol import SessionError
    from backend_model.sessions.qaic import QaicSession

    model, tokenizer = smol
    (tmp_path / "qpc-1" / "qpc").mkdir(parents=True)
    (tmp_path / "qpc-1" / "qpc" / "programqpc.bin").write_bytes(b"\0")
    specs = [{**spec, "lora_ids": [spec["input_ids"][0], 1]} for spec in kv_specs(2, 8, 96, model.config.vocab_size)]
    direct = engine_on(smol, adapters, slots=2)
    fake = FakeQaicRuntime(specs, compute=engine_on(smol, adapters, slots=2).session.run)
    card = QaicSession(tmp_path, opener=opening(fake))
    settings = BackendSettings(aic_binary_dir=str(tmp_path), adapters={"A": tmp_path, "B": tmp_path},
                               compile=compile_config.validate({"lora_adapters": ["A", "B"]}))
    _card_adapters(settings, card)
    requests = [(PROMPT, n) for n in ("B", None, "A")]
    assert answers(Engine(card, tokenizer), requests) == answers(direct, requests)
    assert {c["lora_ids"] for c in fake.calls} == {(1, 1), (2, 1)}
    settings.compile["lora_adapters"] = ["B", "A"]  # the QPC's ids would answer with the other adapter
    with pytest.raises(SessionError, match=r"lora_adapters \['B', 'A'\] must name the QPC's adapters"):
        _card_adapters(settings, card)
    fake.input_names.remove("lora_ids")
    with pytest.raises(SessionError, match="the QPC has no lora_ids input"):
        _card_adapters(settings, card)
