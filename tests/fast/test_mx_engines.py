"""The card's MX formats in the CPU engine and the ONNX twin, selected by the compile config as a QPC is compiled
(``mxfp6_matmul``, ``mxint8_kv_cache``), on the real QEfficient export of the tiny Llama (the shared fixtures):
what each engine holds is what ``mx_formats`` computes, bit for bit; the two engines, and transformers on the
MXFP6 weights, answer the same greedy tokens under each choice; both off, nothing changes."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from tiny_models import tiny_model
from twin_data import qeff_fixtures

from backend_model.build import BackendSettings, build_engine, open_cpu_session
from backend_model.contract import compile_config, specializations
from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.models import read_tensors, safetensors_files
from backend_model.mx_formats import MXFP6, MXINT8, Mx, quantize
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.protocol import Dims, SessionError
from backend_model.twin.session import OnnxInferenceSession
from console.cli import main
from console.eval import predict

CHOICES = ["", "mxfp6", "mxint8kv", "mxfp6+mxint8kv"]
CTX, VOCAB = 128, 49152
DIMS = {"prefill_seq_len": 32, "ctx_len": CTX, "full_batch_size": 4}  # the cb fixture's


@pytest.fixture(scope="module")
def qeff():
    return qeff_fixtures()


@pytest.fixture(scope="module")
def weights(qeff) -> dict[str, torch.Tensor]:
    return read_tensors(safetensors_files(str(qeff.hf), lambda message: None))


def engine_for(qeff, kind: str, choice: str) -> tuple[Engine, str]:
    mx = Mx.parse(choice) if choice else Mx()
    graph = {"onnx_path": str(qeff.graph("cb"))} if kind == "onnx" else {}
    config = compile_config.validate({**DIMS, **graph, "mxfp6_matmul": mx.mxfp6_matmul,
                                      "mxint8_kv_cache": mx.mxint8_kv_cache})
    return build_engine(BackendSettings(engine=kind, hf_model_name=str(qeff.hf), compile=config), lambda m: None)


@pytest.fixture(scope="module")
def answers(qeff) -> dict[tuple[str, str], list[list[int]]]:
    """{(choice, engine): the greedy tokens of the four fixture prompts}, and each build's log line checked."""
    found = {}
    for choice in CHOICES:
        for kind in ("onnx", "cpu"):
            engine, described = engine_for(qeff, kind, choice)
            assert (f" mx={choice} " in described) == bool(choice) and ("mx=" in described) == bool(choice)
            found[choice, kind] = [s.tokens for s in engine.generate(list(qeff.reference),
                                                                     SamplingParams(max_tokens=24))]
    return found


def test_the_cpu_engine_holds_the_mxfp6_weights_and_keeps_the_embedding(weights, qeff):
    config = json.loads((qeff.hf / "config.json").read_text())
    from transformers import LlamaConfig

    session = CpuKVSession(LlamaConfig(**config), weights, Dims(1, 32, CTX, VOCAB, 4), mx=Mx(mxfp6_matmul=True))
    down = weights["model.layers.1.mlp.down_proj.weight"].numpy()
    assert session.layers[1].down.weight is not None
    np.testing.assert_array_equal(session.layers[1].down.weight.numpy(), quantize(down, MXFP6, axis=1))
    assert not np.array_equal(session.layers[1].down.weight.numpy(), down)
    embed = weights["model.embed_tokens.weight"].numpy()  # tied: the head is the embedding's MXFP6 copy
    np.testing.assert_array_equal(session.embed.numpy(), embed)  # a Gather: never an MXFP6 MatMul weight
    assert session.lm_head.weight is not None
    np.testing.assert_array_equal(session.lm_head.weight.numpy(), quantize(embed, MXFP6, axis=1))


def test_the_twin_overrides_every_constant_matmul_weight_with_its_mxfp6_values(qeff):
    import onnx
    from onnx import numpy_helper

    graph = specializations.find_graph(qeff.graph("cb"))
    specs = specializations.read(qeff.graph("cb") / specializations.FILE)
    plain, mx = OnnxInferenceSession(graph, specs), OnnxInferenceSession(graph, specs, mx=Mx(mxfp6_matmul=True))
    assert plain._weights == {}
    model = onnx.load(str(graph))
    originals = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    head = [n for n, a in originals.items() if a.shape == (64, VOCAB)]  # the export's own [hidden, vocab] head
    assert len(mx._weights) == 2 * 7 + 1 and head[0] in mx._weights  # q k v o gate up down per layer, the head
    assert "model.embed_tokens.weight" not in mx._weights
    for name, value in mx._weights.items():  # [in, out]: the blocks run along the inputs
        np.testing.assert_array_equal(value.numpy(), quantize(originals[name], MXFP6, axis=0))


def prefill(runtime: OnnxInferenceSession, ids: list[int], slot: int) -> dict[str, np.ndarray]:
    """One padded prefill of ``ids`` into ``slot``, the retained state returned."""
    chunk = np.zeros((1, 32), np.int64), np.full((1, 32), -1, np.int64)
    chunk[0][0, : len(ids)], chunk[1][0, : len(ids)] = ids, np.arange(len(ids))
    runtime.set_buffers({"logits": np.zeros((1, 1, VOCAB), np.float32)})
    return runtime.run({"input_ids": chunk[0], "position_ids": chunk[1], "batch_index": np.array([[slot]])})


def test_each_engine_stores_a_runs_kv_entries_as_mxint8(qeff, weights):
    """A prefill attends to its own keys as computed, then stores them: the cache holds mx_formats' MXINT8 of the
    fp32 run's entries exactly (the twin's retained state, the CPU engine's cache), and only those positions."""
    from transformers import LlamaConfig

    graph = specializations.find_graph(qeff.graph("cb"))
    specs = specializations.read(qeff.graph("cb") / specializations.FILE)
    ids = [504, 1345, 314, 253, 1789]
    fp32, mx = (prefill(OnnxInferenceSession(graph, specs, mx=m), ids, 2) for m in (Mx(), Mx(mxint8_kv_cache=True)))
    np.testing.assert_array_equal(mx["logits"], fp32["logits"])  # stored after the run: its logits are fp32's
    for name in ("past_key.0_RetainedState", "past_value.1_RetainedState"):
        assert not np.array_equal(mx[name], fp32[name])
        np.testing.assert_array_equal(mx[name], quantize(fp32[name], MXINT8))
    config = LlamaConfig(**json.loads((qeff.hf / "config.json").read_text()))
    dims = Dims(1, 32, CTX, VOCAB, 4)
    sessions = [CpuKVSession(config, weights, dims, mx=m) for m in (Mx(), Mx(mxint8_kv_cache=True))]
    for session in sessions:
        session.run({"input_ids": np.array([ids]), "position_ids": np.array([np.arange(len(ids))]),
                     "batch_index": np.array([[2]])})
    for layer in (0, 1):
        plain, stored = sessions[0].k_cache[layer].numpy(), sessions[1].k_cache[layer].numpy()
        np.testing.assert_array_equal(stored, quantize(plain, MXINT8))
        np.testing.assert_array_equal(stored, mx[f"past_key.{layer}_RetainedState"])  # the twin's, bit for bit


def test_both_engines_answer_the_same_under_each_choice(answers):
    for choice in CHOICES:
        assert answers[choice, "onnx"] == answers[choice, "cpu"], choice


def test_both_off_changes_nothing(answers, qeff):
    assert answers["", "cpu"] == answers["", "onnx"] == list(qeff.reference.values())


def test_mxfp6_answers_are_transformers_on_the_mxfp6_weights(answers, qeff):
    """The reference computation: transformers' own model and generate, its Linear weights (the head untied from
    the embedding) replaced by mx_formats' MXFP6."""
    from transformers import AutoModelForCausalLM

    from backend_model.models import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(qeff.hf, dtype=torch.float32)
    tokenizer = load_tokenizer(str(qeff.hf), lambda message: None)[0]
    with torch.no_grad():
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.copy_(torch.from_numpy(quantize(module.weight.numpy(), MXFP6, axis=1)))
        expected = []
        for prompt in qeff.reference:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            expected.append(model.generate(ids, do_sample=False, max_new_tokens=24)[0, ids.shape[1]:].tolist())
    assert answers["mxfp6", "cpu"] == expected


def test_the_answers_move_as_the_formats_precision_predicts(answers, qeff):
    """MXFP6 E2M3 keeps 3 mantissa bits of every weight (about 3 % off each): on this random tiny model, whose
    greedy steps are near-ties (gaps from 0.004), the first token moves already. MXINT8 keeps 7 bits of the cache
    and the prefill attends to its own entries unstored: every first token is fp32's, and some later one moves."""
    fp32 = answers["", "cpu"]
    first = {c: [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None)
                 for x, y in zip(answers[c, "cpu"], fp32)] for c in CHOICES[1:]}
    assert all(at is not None for at in first["mxfp6"]) and 0 in first["mxfp6"]
    assert all(at != 0 for at in first["mxint8kv"]) and any(at is not None for at in first["mxint8kv"])


def test_a_choice_the_cpu_cannot_compute_is_refused(tmp_path):
    dims = Dims(1, 8, 64, VOCAB)
    with pytest.raises(SessionError, match="precision must be fp32 or bf16, not int4"):
        open_cpu_session(tiny_model("llama"), dims, True, "int4", Mx(mxfp6_matmul=True))
    with pytest.raises(SessionError, match="mxint8_kv_cache: the CPU engine computes the card's MX formats for "
                                           "the Llama family .* not for a gpt2 model"):
        open_cpu_session(tiny_model("gpt2"), dims, True, "fp32", Mx(mxint8_kv_cache=True))


def test_mx_terms_are_read_and_named():
    assert Mx.parse("mxfp6+mxint8kv") == Mx(True, True) and Mx.parse("mxint8kv").label == "mxint8kv"
    assert Mx.of(compile_config.validate({"mxfp6_matmul": True})) == Mx(mxfp6_matmul=True) and not Mx()
    with pytest.raises(ValueError, match="'mxfp4' is not an MX format: use mxfp6 or mxint8kv"):
        Mx.parse("mxfp6+mxfp4")


def test_a_compile_config_asks_each_format_alone_then_both(tmp_path):
    path = tmp_path / "compile_config.json"
    both = {"mxfp6_matmul": True, "mxint8_kv_cache": True}
    for asked, expected in ((both, [Mx(True), Mx(False, True), Mx(True, True)]),
                            ({"mxint8_kv_cache": True}, [Mx(False, True)]), ({}, [])):
        path.write_text(json.dumps(asked))
        assert predict.choices(path) == expected
    assert predict.specs([Mx(True)], None) == ("cpu:fp32", ["cpu:fp32+mxfp6"])


def test_check_predicts_how_far_a_compile_configs_formats_move_the_answers(qeff, tmp_path):
    """On the twin of QEfficient's export: the eval table (fp32 the reference) and one verdict a format."""
    config = tmp_path / "compile_config.json"
    config.write_text(json.dumps({"mxfp6_matmul": True}))
    args = ["check", "--model", str(qeff.hf), "--predict", str(config), "--prompt", "My name is|Maroon bells",
            "--max-tokens", "8"]
    result = CliRunner().invoke(main, [*args, "--onnx", str(qeff.graph("cb"))])
    assert result.exit_code == 0, result.output
    table = result.stdout.splitlines()
    assert table[1].startswith("twin ") and "reference" in table[1]
    assert table[2].startswith("twin-mxfp6 ") and "0/2 (0%)" in table[2]
    assert re.search(r"^twin-mxfp6: 0 of 2 answers stay fp32's over 8 tokens; the others part at token \d+ \(median\); "
                     r"NLL of fp32's answers \+\d\.\d{4} nats/token; perplexity x\d\.\d{4}; KL to fp32 \d\.\d\de-\d\d$",
                     result.stdout, re.M), result.stdout
    assert re.search(r"^memory: ctx_len 128 × batch_size 1 needs about .* on a Cloud AI 100 card .*mxfp6 weights, "
                     r"fp16 cache: \d+ MB less than fp16\)$", result.stdout, re.M), result.stdout
    config.write_text("{}")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0 and "asks no MX format" in result.stdout
    result = CliRunner().invoke(main, [*args, "--qpc", str(tmp_path)])
    assert result.exit_code == 2 and "--predict runs an eval: drop --qpc" in result.output
