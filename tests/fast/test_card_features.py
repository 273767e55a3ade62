"""What a compile config turns on in the card itself, on the twin of QEfficient's own tiny-Llama exports: the
on-device sampler (``include_sampler``: the twin samples as the card's program, on the random numbers a request
draws from its seed, and a host that samples the same way gives the same tokens) and compute-context lengths (the
length each run attends, chosen as QEfficient's loop chooses it and checked by the twin; greedy tokens exact)."""

from __future__ import annotations

import dataclasses
import sys
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from twin_data import QEFF_GRAPH

from backend_model import build
from backend_model.contract import compile_config, specializations
from backend_model.contract.errors import BadRequest
from backend_model.engine import card_sampling
from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.sessions import qaic
from backend_model.sessions.qaic import QaicSession
from backend_model.twin.session import onnx_opener
from repo_gen import memory
from repo_gen.samples import SAMPLES

TOP_K = 64
SAMPLED = SamplingParams(max_tokens=16, temperature=0.9, top_k=40, top_p=0.95, repetition_penalty=1.3, seed=11)
CCL = {"comp_ctx_lengths_prefill": [4, 8, 64], "comp_ctx_lengths_decode": [16, 32, 128]}


def engine_on(graph: Path, tokenizer, top_k: int = 0) -> Engine:
    """The engine of the twin of ``graph``: sampling on the card when ``top_k``, else on the host as the card does."""
    engine = Engine(QaicSession(graph, opener=onnx_opener(max_top_k_ids=top_k)), tokenizer)
    engine.card_sampling = engine.on_card or TOP_K
    return engine


@pytest.mark.parametrize("mode", ["regular", "cb"])
def test_a_seeded_request_samples_the_same_tokens_on_the_card_and_on_the_host(qeff, qeff_tokenizer, mode):
    prompts = list(qeff.reference)
    card = engine_on(qeff.graph(mode), qeff_tokenizer, TOP_K)
    host = engine_on(qeff.graph(mode), qeff_tokenizer)
    assert card.on_card == TOP_K and host.on_card == 0 and not card.prefix_caching
    on_card = [s.tokens for s in card.generate(prompts, SAMPLED)]
    assert on_card == [s.tokens for s in host.generate(prompts, SAMPLED)]
    assert on_card != list(qeff.reference.values())  # sampled, not greedy
    other = [s.tokens for s in card.generate(prompts, replace(SAMPLED, seed=12))]
    assert other != on_card  # the seed decides the draws
    greedy = [s.tokens for s in card.generate(prompts, SamplingParams(max_tokens=24))]
    assert greedy == list(qeff.reference.values())  # temperature 0: the card's argmax


def test_a_sampling_qpc_takes_tokens_not_logits(qeff, qeff_tokenizer):
    card = engine_on(qeff.graph("regular"), qeff_tokenizer, TOP_K)
    names = card.session.session.input_names
    assert set(card_sampling.INPUTS) <= set(names) and "logits" not in card.session.session.output_names
    for params in (SamplingParams(logprobs=2), SamplingParams(structured_outputs={"choice": ["a"]})):
        with pytest.raises(BadRequest, match="samples on the card"):
            card.prepare(card.encode("My name is"), params)


def test_a_qpc_with_part_of_the_sampler_is_refused():
    class Part:
        input_names = ["input_ids", "position_ids", "temperatures", "random_numbers"]

    with pytest.raises(qaic.SessionError, match="2 of the 8 on-device sampler inputs"):
        qaic.samples_on_card(Part())


def test_the_card_sampler_keeps_top_k_and_draws_with_its_random_numbers():
    logits = np.array([[0.0, 3.0, 1.0, 2.0]], dtype=np.float32)
    none = np.zeros((1, 4), dtype=bool)

    def inputs(top_k: int, numbers: list[float], temperature: float = 1.0) -> card_sampling.Inputs:
        params = SamplingParams(temperature=temperature, top_k=top_k)
        return card_sampling.row_inputs(params, np.array(numbers), 4)

    # ascending top-4: tokens 0, 2, 3, 1; a draw near 1 on a position gives it the largest Gumbel noise
    assert card_sampling.sample(logits, none, none, inputs(4, [0.999999, 0.01, 0.01, 0.01]), 4).tolist() == [0]
    assert card_sampling.sample(logits, none, none, inputs(2, [0.999999, 0.01, 0.01, 0.01]), 4).tolist() == [1]
    assert card_sampling.sample(logits, none, none, inputs(1, [0.01, 0.01, 0.999999, 0.01]), 4).tolist() == [1]
    assert card_sampling.sample(logits, none, none, inputs(0, [0.999999] * 4, 0.0), 4).tolist() == [1]
    repeated = np.array([[False, True, False, False]])  # 3 / 4 < 2: token 3 is the argmax now
    penalised = card_sampling.row_inputs(SamplingParams(repetition_penalty=4.0), np.full(4, 0.5), 4)
    assert card_sampling.sample(logits, repeated, none, penalised, 4).tolist() == [3]


def test_compute_context_lengths_are_checked_in_the_compile_config():
    good = compile_config.validate({"ctx_len": 128, "prefill_seq_len": 4, **CCL})
    assert good["comp_ctx_lengths_decode"] == [16, 32, 128] and good["max_top_k_ids"] == 512
    for bad, message in (({"comp_ctx_lengths_prefill": [4]}, "needs its pair"),
                         ({**CCL, "comp_ctx_lengths_decode": [16, 64]}, "must end at 'ctx_len' .128."),
                         ({**CCL, "comp_ctx_lengths_prefill": [4, 256]}, "has 256, past 'ctx_len'"),
                         ({**CCL, "comp_ctx_lengths_prefill": [16]}, "16 is in both"),
                         ({**CCL, "comp_ctx_lengths_prefill": [8, 4]}, "increasing")):
        with pytest.raises(compile_config.CompileConfigError, match=message):
            compile_config.validate({"ctx_len": 128, "prefill_seq_len": 4, **bad})


def test_specializations_carry_one_entry_per_compute_context_length():
    entries = specializations.with_lengths(specializations.build(1, 4, 128), [4, 8, 64], [16, 32, 128])
    assert [(e["name"], e["symbols"]["seq_len"], e["symbols"]["comp_ctx_lengths"]) for e in entries] == [
        ("Prefill", "4", "4"), ("Prefill", "4", "8"), ("Prefill", "4", "64"),
        ("Decode", "1", "16"), ("Decode", "1", "32"), ("Decode", "1", "128")]
    dims = specializations.compile_dims(specializations.parse({"specializations": entries}))
    assert {k: dims[k] for k in CCL} == CCL


def test_each_run_attends_the_length_qeffs_loop_chooses():
    prefill, decode = CCL["comp_ctx_lengths_prefill"], CCL["comp_ctx_lengths_decode"]
    # a prefill chunk: the first length holding (i + 1) * prefill_seq_len; decode: the first past position + 1
    assert [specializations.choose_length(prefill, [start], 4) for start in (0, 4, 8, 60, 64)] == [4, 8, 64, 64, 64]
    assert [specializations.choose_length(decode, [p], 1) for p in (5, 13, 14, 15, 30, 31, 127)] == [
        16, 16, 16, 32, 32, 128, 128]


@pytest.mark.parametrize("mode", ["regular", "cb"])
def test_compute_context_lengths_serve_exact_greedy_tokens_and_a_wrong_choice_is_refused(qeff, qeff_tokenizer, mode,
                                                                                         monkeypatch, tmp_path):
    c = compile_config.validate({"ctx_len": 128, "prefill_seq_len": 4, **CCL,
                                 **({"full_batch_size": 2} if mode == "cb" else {})})
    (tmp_path / QEFF_GRAPH).symlink_to(specializations.find_graph(qeff.graph(mode)))
    specializations.write(tmp_path, specializations.of_config(c))  # as QEfficient's compile of ``c`` writes it
    engine = engine_on(tmp_path, qeff_tokenizer)
    assert engine.session.ccl == {4: [4, 8, 64], 1: [16, 32, 128]}
    runtime, chosen = engine.session.session, []
    run = runtime.run

    def recording(inputs):
        pos = inputs["position_ids"]
        chosen.append((pos.shape[1], len(inputs["comp_ctx_lengths"]), int(pos.max())))
        return run(inputs)

    monkeypatch.setattr(runtime, "run", recording)
    prompts = list(qeff.reference)
    assert [s.tokens for s in engine.generate(prompts, SamplingParams(max_tokens=24))] == list(qeff.reference.values())
    assert {(width, length) for width, length, _ in chosen} >= {(4, 4), (4, 8), (1, 16), (1, 32)}
    assert all(last < length for _, length, last in chosen)
    too_long = engine.encode("word " * 70)
    with pytest.raises(BadRequest, match="past the largest prefill compute-context length, 64"):
        engine.prepare(too_long, SamplingParams())
    monkeypatch.setattr(qaic, "choose_length", lambda lengths, positions, seq_len: lengths[0])
    wrong = engine.generate(prompts[:1], SamplingParams(max_tokens=24))[0]
    assert wrong.finish_reason == "error" and "past the compute-context length" in (wrong.error or "")


def test_the_memory_check_counts_the_samplers_masks_and_not_less_cache_for_ccl():
    card = dataclasses.replace(SAMPLES["smollm2_kv"], engine="qaic", compile={"ctx_len": 4096, "full_batch_size": 16})
    plain = memory.estimate(card, None)
    sampling = memory.estimate(dataclasses.replace(card, compile={**card.compile, "include_sampler": True}), None)
    ccl = memory.estimate(dataclasses.replace(card, compile={**card.compile, "comp_ctx_lengths_prefill": [1024],
                                                             "comp_ctx_lengths_decode": [2048, 4096]}), None)
    assert plain is not None and sampling is not None and ccl is not None
    assert sampling.total - plain.total == 2 * 16 * 49152  # two one-byte [16, vocab] masks
    assert "the sampler's masks 2 MB" in str(sampling)
    assert ccl.total == plain.total and "compute-context lengths read less of the cache" in str(ccl)


def test_the_sampler_reaches_from_pretrained_and_the_lengths_compile(monkeypatch):
    """A recording stand-in of QEfficient's QEFFAutoModelForCausalLM (QEfficient is not installable here)."""
    calls: list[tuple[str, dict]] = []

    class Recorder:
        @classmethod
        def from_pretrained(cls, name: str, **kwargs: object) -> Recorder:
            calls.append(("from_pretrained", kwargs))
            return cls()

        def compile(self, **kwargs: object) -> str:
            calls.append(("compile", kwargs))
            return "/qpcs/qpc"

    monkeypatch.setitem(sys.modules, "QEfficient", types.SimpleNamespace(QEFFAutoModelForCausalLM=Recorder))
    c = compile_config.validate({"prefill_seq_len": 4, "include_sampler": True, "max_top_k_ids": 256, **CCL})
    assert build._compile_qpc(build.BackendSettings(hf_model_name="org/model", compile=c), lambda _: None)
    assert calls[0][1]["qaic_config"] == {"include_sampler": True, "max_top_k_ids": 256}
    options = calls[1][1]
    assert options["comp_ctx_lengths_decode"] == [16, 32, 128] and "include_sampler" not in options
    assert "max_top_k_ids" not in options  # a compile() option would become a compiler flag
