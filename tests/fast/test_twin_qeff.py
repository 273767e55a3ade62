"""The card's twin on the real QEfficient's graphs (the shared fixtures: QEfficient's own exports of a tiny
random Llama, regular and continuous batching) and on ``qaic-console onnx export``'s of the same model, which
has QEfficient's interface. The unchanged QAIC adapter and engine run both token-exact with transformers'
greedy tokens (``hf_greedy.json``), in one prefill chunk and in several, with slot refill; the invalid-index
constants follow the card's rule; an export folder as QEfficient writes it (no specializations.json) is
compiled for the compile config; the QPC layout of QEfficient's compile is found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from twin_data import QEFF_GRAPH, QeffFixtures, qeff_fixtures

from backend_model.build import BackendSettings, build_engine
from backend_model.contract import specializations
from backend_model.contract.qpc import model_type_of, specializations_of
from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.sessions.protocol import Dims, SessionError
from backend_model.sessions.qaic import QaicSession, binding_dims, find_qpc, read_dims, retained_names
from backend_model.twin.graph import INVALID_INDEX, prepare
from backend_model.twin.session import OnnxInferenceSession, onnx_opener
from backend_model.twin.weights import refer, without_weights
from console.cli import main

VOCAB, CTX = 49152, 128
MODES = ("regular", "cb")
CB_SPECS = [{"batch_size": "1", "seq_len": "32", "ctx_len": "128", "full_batch_size": "4", "full_batch_exec_size": "1"},
            {"batch_size": "4", "seq_len": "1", "ctx_len": "128", "full_batch_size": "4"}]


def linked(qeff: QeffFixtures, mode: str, folder: Path) -> Path:
    """``folder`` holding the fixture's graph and export record (links), as QEfficient's export writes them."""
    folder.mkdir(parents=True)
    for name in (QEFF_GRAPH, "hashed_export_params.json"):
        (folder / name).symlink_to(qeff.graph(mode) / name)
    return folder


@pytest.fixture(scope="module")
def graphs(qeff, tmp_path_factory) -> dict[str, dict[str, Path]]:
    """{"qeff" | "ours": {mode: folder}}: QEfficient's exports, and ours of the same HF folder (through the CLI,
    with the fixtures' dimensions: ctx_len 128, prefill_seq_len 32, batch_size 1 or full_batch_size 4)."""
    root = tmp_path_factory.mktemp("ours")
    for mode, rows in zip(MODES, (["--batch-size", "1"], ["--full-batch-size", "4"])):
        result = CliRunner().invoke(main, ["onnx", "export", "--model", str(qeff.hf), "--ctx-len", str(CTX),
                                           "--prefill-seq-len", "32", *rows, "-o", str(root / mode)])
        assert result.exit_code == 0, result.output
    return {"qeff": {m: qeff.graph(m) for m in MODES}, "ours": {m: root / m for m in MODES}}


def compiled(graph: Path, folder: Path, **dims: int) -> Path:
    """The graph in ``graph`` (a link) beside the specializations.json QEfficient's compile of ``dims`` writes."""
    folder.mkdir()
    source = specializations.find_graph(graph)
    (folder / source.name).symlink_to(source)
    specializations.write(folder, specializations.build(**dims))
    return folder


def record_runs(session: QaicSession) -> list[dict[str, np.ndarray]]:
    """Every input the twin receives, in order (the twin still runs them)."""
    runtime, calls = session.session, []
    run = runtime.run

    def recording(inputs):
        calls.append({k: np.array(v) for k, v in inputs.items()})
        return run(inputs)

    runtime.run = recording
    return calls


def test_the_fixtures_are_found_or_the_test_fails(qeff, tmp_path):
    assert qeff_fixtures([None, tmp_path, qeff.root.parent]) == qeff
    with pytest.raises(pytest.fail.Exception, match="QEfficient export fixtures not found.*QAIC_QEFF_FIXTURES"):
        qeff_fixtures([None, tmp_path])


@pytest.mark.parametrize(("mode", "gathers", "scatters"), [("regular", 2, 0), ("cb", 2, 1)])
def test_each_invalid_index_constant_follows_the_cards_rule(qeff, mode, gathers, scatters):
    """One INT32_MAX per layer feeds the cache gather; with continuous batching one more feeds the scatter."""
    prepared, done = prepare(qeff.graph(mode) / QEFF_GRAPH)
    assert (done.gathers, done.scatters, done.inlined) == (gathers, scatters, 3)
    assert len(prepared) < 200_000  # the graph without its 25 MB of weights: ONNX Runtime reads them from the file
    model = onnx.load_from_string(prepared)
    assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"} and not model.functions  # custom ops inlined
    invalid = {n.output[0] for n in model.graph.node if n.op_type == "Constant" for a in n.attribute
               if a.name == "value" and onnx.numpy_helper.to_array(a.t).tolist() == INVALID_INDEX}
    readers = {n.op_type for n in model.graph.node if invalid & set(n.input)}
    assert readers == ({"Where", "Equal"} if scatters else set())  # the gathers' constants now read 0
    skipping = [n for n in model.graph.node if n.op_type == "ScatterND" and n.input[1].startswith("twin_skip_")]
    assert len(skipping) == 4 * scatters  # every cache write of the 2 layers (key and value) skips invalid rows


@pytest.mark.parametrize("origin", ["qeff", "ours"])
@pytest.mark.parametrize(("mode", "dims", "expected"), [
    ("regular", None, Dims(1, 32, CTX, VOCAB)),  # the fixture's own specializations.json
    ("regular", {"batch_size": 2, "prefill_seq_len": 4, "ctx_len": CTX}, Dims(2, 4, CTX, VOCAB)),
    ("regular", {"batch_size": 1, "prefill_seq_len": 1, "ctx_len": CTX}, Dims(1, 1, CTX, VOCAB)),  # fixed shape
    ("cb", None, Dims(1, 32, CTX, VOCAB, full_batch_size=4)),
    ("cb", {"batch_size": 1, "prefill_seq_len": 4, "ctx_len": CTX, "full_batch_size": 2}, Dims(1, 4, CTX, VOCAB, 2)),
], ids=["regular-bs1-p32", "regular-bs2-p4", "regular-bs1-p1", "cb-fbs4-p32", "cb-fbs2-p4"])
def test_both_exports_are_token_exact_with_transformers(qeff, graphs, qeff_tokenizer, tmp_path, mode, dims, expected,
                                                       origin):
    graph = graphs[origin][mode]
    folder = graph if dims is None else compiled(graph, tmp_path / "compiled", **dims)
    session = QaicSession(folder, opener=onnx_opener())
    assert session.dims == expected
    runtime = session.session
    logits = binding_dims(runtime, "logits")  # named Castlogits_dim_* in the graph: resolved by running it
    assert logits == [[expected.batch_size, 1, VOCAB], [expected.slots, 1, VOCAB]][: len(logits)]
    assert len(runtime.allowed_shapes) == (0 if expected.prefill_seq_len == 1 else 2)  # one compiled shape: none
    calls = record_runs(session)
    prompts, tokens = list(qeff.reference), list(qeff.reference.values())
    engine = Engine(session, qeff_tokenizer)
    assert [s.tokens for s in engine.generate(prompts, SamplingParams(max_tokens=24))] == tokens
    prefills = [c for c in calls if c["input_ids"].shape == (expected.batch_size, expected.prefill_seq_len)]
    starts = [c for c in prefills if (c["position_ids"][:, 0] == 0).all()]
    assert len(starts) == len(prompts) // expected.batch_size  # each prompt (regular: each batch) starts once
    if expected.prefill_seq_len == 4:  # prompts of 3 to 6 tokens: some take two chunks
        assert len(prefills) > len(starts)
    if expected.full_batch_size == 2:  # 4 prompts, 2 slots: both slots are refilled
        assert sorted(int(c["batch_index"][0, 0]) for c in starts) == [0, 0, 1, 1]


def padded_prefill(runtime: OnnxInferenceSession, tokenizer, chunk: int, slot: int | None) -> dict[str, np.ndarray]:
    """"My name is" (3 tokens) in one chunk padded with -1, the retained state returned."""
    runtime.skip_buffers([n for n in retained_names(runtime) if not n.endswith("_RetainedState")])
    ids, pos = np.zeros((1, chunk), np.int64), np.full((1, chunk), -1, np.int64)
    ids[0, :3], pos[0, :3] = tokenizer("My name is").input_ids, np.arange(3)
    runtime.set_buffers({"logits": np.zeros((1, 1, VOCAB), np.float32)})
    inputs = {"input_ids": ids, "position_ids": pos}
    return runtime.run(inputs if slot is None else {**inputs, "batch_index": np.array([[slot]])})


@pytest.mark.parametrize("origin", ["qeff", "ours"])
def test_continuous_batching_padding_writes_nothing_into_any_slot(qeff, graphs, qeff_tokenizer, origin):
    """The scatter's INT32_MAX writes nothing, as on the card: rewritten to 0 (QEfficient's ORT check) the
    NaN rows of the padding would land in position 0; to -1, in the slot's last position."""
    runtime = OnnxInferenceSession(specializations.find_graph(graphs[origin]["cb"]), CB_SPECS)
    out = padded_prefill(runtime, qeff_tokenizer, 32, slot=2)
    assert np.isfinite(out["logits"]).all() and int(out["logits"].argmax()) == qeff.reference["My name is"][0]
    for name in ("past_key.0", "past_value.1"):
        state = out[name + "_RetainedState"]
        assert np.isfinite(state).all()
        assert np.abs(state[2, :, :3]).sum(-1).all()  # the 3 prompt positions are written
        assert not state[2, :, 3:].any()  # the 29 padded ones are not, nor is the last position
        assert not state[[0, 1, 3]].any()  # nor any other slot


@pytest.mark.parametrize("origin", ["qeff", "ours"])
def test_regular_padding_keeps_onnxs_negative_index(qeff, graphs, qeff_tokenizer, origin):
    """Position -1 reaches the regular graph's scatter as -1 itself: the last cache position, as ONNX (and
    QEfficient's PyTorch CtxScatterFunc) index it; nothing reads it before a real token overwrites it."""
    runtime = OnnxInferenceSession(specializations.find_graph(graphs[origin]["regular"]),
                                   [{"batch_size": "1", "seq_len": "32", "ctx_len": "128"}])
    out = padded_prefill(runtime, qeff_tokenizer, 32, slot=None)
    assert int(out["logits"].argmax()) == qeff.reference["My name is"][0]
    key = out["past_key.1_RetainedState"]
    assert np.abs(key[0, :, :3]).sum(-1).all() and not key[0, :, 3:-1].any()
    assert np.isnan(key[0, :, -1]).all()  # layer 1's padded rows attend to nothing (-inf scores): NaN


@pytest.mark.parametrize(("mode", "rows"), [("regular", {"batch_size": 2}), ("cb", {"full_batch_size": 2})])
def test_an_export_folder_without_specializations_takes_the_compile_config(qeff, tmp_path, mode, rows):
    graph = linked(qeff, mode, tmp_path / "LlamaForCausalLM-5f1b2c3d4e")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    config = {"onnx_path": str(graph), "prefill_seq_len": 4, "ctx_len": CTX, **rows}
    (model_dir / "compile_config.json").write_text(json.dumps(config))
    settings = BackendSettings.from_model_dir(model_dir, {"engine": "onnx", "hf_model_name": str(qeff.hf)})
    engine, description = build_engine(settings, progress=lambda message: None)
    mode_text = "continuous batching full_batch_size=2" if mode == "cb" else "batch_size=2"
    assert f"engine=onnx model={qeff.hf} type=kv_cache {mode_text} prefill_seq_len=4 ctx_len=128" in description
    source = "compile_config.json (no specializations.json beside the graph)"
    assert f"graph={graph} specializations={source}" in description
    prompts = list(qeff.reference)
    assert [s.tokens for s in engine.generate(prompts, SamplingParams(max_tokens=24))] == list(qeff.reference.values())


def test_a_continuous_batching_graph_needs_full_batch_size_in_the_compile_config(qeff, tmp_path):
    graph = linked(qeff, "cb", tmp_path / "LlamaForCausalLM-5f1b2c3d4e")
    opener = onnx_opener(specializations.build(1, 32, CTX), fallback_from="compile_config.json")
    with pytest.raises(SessionError, match=r"dimension 'full_batch_size' of past_key.0 is not a specialization "
                                           r"symbol .* in compile_config.json \(no specializations.json"):
        QaicSession(graph, opener=opener)


def run_check(qeff: QeffFixtures, graph: Path, *options: str):
    prompts = "|".join(qeff.reference)
    return CliRunner().invoke(main, ["check", "--model", str(qeff.hf), "--onnx", str(graph), "--prompt", prompts,
                                     "--max-tokens", "24", "--json", *options])


@pytest.mark.parametrize("mode", ["regular", "cb"])
def test_check_matches_on_each_fixture_graph(qeff, mode):
    result = run_check(qeff, qeff.graph(mode))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["match"] is True and out["prompts"] == list(qeff.reference)
    assert out["paths"]["onnx"] == out["paths"]["hf"] == list(qeff.reference.values())


def test_check_compiles_an_export_folder_for_its_dimension_options(qeff, tmp_path):
    graph = linked(qeff, "cb", tmp_path / "LlamaForCausalLM-5f1b2c3d4e")
    result = run_check(qeff, graph, "--full-batch-size", "2", "--prefill-seq-len", "4")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["paths"]["onnx"] == list(qeff.reference.values())
    refused = run_check(qeff, qeff.graph("cb"), "--ctx-len", "64")
    assert refused.exit_code == 2
    assert refused.stderr.splitlines()[-1] == (f"error: {qeff.graph('cb') / specializations.FILE} fixes the graph's "
                                               "dimensions: drop --ctx-len")


def test_qefficients_compile_layout_is_found_from_the_export_folder(qeff, tmp_path):
    """compile() writes ``<export>/qpc-<hash>/qpc/programqpc.bin`` with specializations.json beside ``qpc/``."""
    export = linked(qeff, "cb", tmp_path / "LlamaForCausalLM-5f1b2c3d4e")
    (export / "qpc-9a8b7c" / "qpc").mkdir(parents=True)
    (export / "qpc-9a8b7c" / "qpc" / "programqpc.bin").write_bytes(b"\0")
    (export / "qpc-9a8b7c" / specializations.FILE).symlink_to(qeff.graph("cb") / specializations.FILE)
    program = find_qpc(export)
    assert program == export / "qpc-9a8b7c" / "qpc"
    assert specializations_of(program) == CB_SPECS
    assert model_type_of(export, progress=lambda message: None) == "kv_cache"
    runtime = OnnxInferenceSession(export / QEFF_GRAPH, specializations_of(program))  # the card's twin of that QPC
    assert read_dims(runtime, program) == (Dims(1, 32, CTX, VOCAB, full_batch_size=4), True)


def interface(folder: Path) -> dict[str, Any]:
    """The graph's default opset, and its inputs and outputs in order: (name, element type, dims)."""
    model = onnx.load(str(specializations.find_graph(folder)), load_external_data=False)

    def rows(values) -> list[tuple[str, int, list[int | str]]]:
        types = [(v.name, v.type.tensor_type) for v in values]
        return [(name, t.elem_type, [d.dim_param or d.dim_value for d in t.shape.dim]) for name, t in types]

    opset = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return {"opset": opset, "inputs": rows(model.graph.input), "outputs": rows(model.graph.output)}


@pytest.mark.parametrize("mode", MODES)
def test_our_export_has_qefficients_interface(graphs, mode):
    """Names, dtypes, dims, input order and the invalid-index convention are QEfficient's. Kept differences:

    * logits dims: ours name the symbol and the fixed 1 (``[batch_size, 1, vocab]``); QEfficient's exporter
      leaves them unnamed (``Castlogits_dim_*``). The twin takes output dims from the graph run under each
      specialization, never from names, so both open the same way.
    * cache ops: ours are plain ScatterND / GatherND, what QEfficient's CtxScatter / CtxGather functions
      inline to (the twin inlines them); there is no custom-op library to compile against here.
    * one gather INT32_MAX for all layers (torch's exporter merges the layers' identical index computation)
      where QEfficient's attention makes one per layer: each constant gets the same rule.
    * files: ``model.onnx`` + the specializations.json of the dimensions it was exported for, where QEfficient
      writes ``LlamaForCausalLM.onnx`` + ``hashed_export_params.json`` and leaves the dimensions to compile().
    """
    ours, theirs = interface(graphs["ours"][mode]), interface(graphs["qeff"][mode])
    assert ours["outputs"][0] == ("logits", onnx.TensorProto.FLOAT, ["batch_size", 1, VOCAB])
    assert theirs["outputs"][0] == ("logits", onnx.TensorProto.FLOAT, ["Castlogits_dim_0", "Castlogits_dim_1", VOCAB])
    ours["outputs"][0] = theirs["outputs"][0]
    assert ours == theirs
    mine, qeffs = (prepare(specializations.find_graph(graphs[origin][mode]))[1] for origin in ("ours", "qeff"))
    assert (mine.scatters, qeffs.scatters) == ((1, 1) if mode == "cb" else (0, 0))  # CB: -1 becomes INT32_MAX
    assert (mine.gathers, qeffs.gathers, mine.inlined, qeffs.inlined) == (1, 2, 0, 3)


def test_weights_in_files_beside_the_graph_are_read_from_there(qeff, qeff_tokenizer, tmp_path):
    """QEfficient writes a model over 2 GB with its weights in files beside the .onnx."""
    folder = tmp_path / "LlamaForCausalLM-5f1b2c3d4e"
    folder.mkdir()
    onnx.save(onnx.load(str(qeff.graph("cb") / QEFF_GRAPH)), str(folder / QEFF_GRAPH), save_as_external_data=True,
              location="weights.data", size_threshold=1024)
    (folder / specializations.FILE).symlink_to(qeff.graph("cb") / specializations.FILE)
    session = QaicSession(folder, opener=onnx_opener())
    prompts = list(qeff.reference)[:2]
    tokens = [s.tokens for s in Engine(session, qeff_tokenizer).generate(prompts, SamplingParams(max_tokens=24))]
    assert tokens == [qeff.reference[p] for p in prompts]


def test_a_file_that_is_not_a_graph_is_one_clear_error(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"not a graph")
    with pytest.raises(SessionError, match=r"^\S+model.onnx is not a usable ONNX graph: ") as caught:
        OnnxInferenceSession(tmp_path / "model.onnx", [{"batch_size": "1"}])
    assert "\n" not in str(caught.value)


def test_embedded_weights_are_read_from_the_file_itself(tmp_path):
    """The twin never loads a graph's weights: their byte ranges in the .onnx become external data."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 32])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.ones(32, np.float32), "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    weightless, ranges = without_weights(tmp_path / "m.onnx")
    assert set(ranges) == {"w"} and len(weightless) < weight.nbytes  # the 128-byte bias stays in the graph
    offset, length = ranges["w"]
    assert (tmp_path / "m.onnx").read_bytes()[offset:offset + length] == weight.tobytes()
    model = onnx.load_from_string(weightless)
    refer(model, "m.onnx", ranges)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(tmp_path))
    x = {"x": np.arange(128, dtype=np.float32).reshape(2, 64)}
    got = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, x)
    whole = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, x)
    np.testing.assert_array_equal(got[0], whole[0])
    np.testing.assert_allclose(got[0], x["x"] @ weight + 1, rtol=1e-5)


@pytest.mark.parametrize(("mode", "rows"), [("regular", {"batch_size": 2}), ("cb", {"full_batch_size": 2})])
def test_the_card_path_reuses_a_kept_prefix_and_answers_the_same(qeff, tmp_path, mode, rows):
    """QEfficient's own export on the twin (the card's code path): the next turn of a chat prefills only what a
    slot's retained cache does not hold, and its greedy answer is the one a prefill from token 0 gives."""
    graph = linked(qeff, mode, tmp_path / "LlamaForCausalLM-5f1b2c3d4e")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "compile_config.json").write_text(json.dumps({"onnx_path": str(graph), "prefill_seq_len": 4,
                                                               "ctx_len": CTX, **rows}))

    def turns(reuse: str) -> tuple[list[list[int]], list[int]]:
        settings = BackendSettings.from_model_dir(model_dir, {"engine": "onnx", "hf_model_name": str(qeff.hf),
                                                              "enable_prefix_caching": reuse})
        engine, description = build_engine(settings, progress=lambda message: None)
        assert ("prefix_caching=on" in description) == (reuse == "true")
        prompt, answers, reused = "My name is Sarah and I live by the sea. My name is", [], []
        for _ in range(2):
            (seq,) = engine.generate([prompt], SamplingParams(max_tokens=16))
            answers.append(seq.tokens)
            reused.append(seq.reused)
            prompt += seq.text + " Then"
        return answers, reused

    fresh, none = turns("false")
    answers, reused = turns("true")
    assert answers == fresh and none == [0, 0]
    assert reused[0] == 0 and reused[1] >= 8, "the second turn prefills from a chunk boundary past the first prompt"


def test_enable_prefix_caching_is_a_boolean_parameter(tmp_path):
    assert not BackendSettings.from_model_dir(tmp_path, {"enable_prefix_caching": "false"}).prefix_caching
    assert BackendSettings.from_model_dir(tmp_path, {}).prefix_caching
    with pytest.raises(SessionError, match="enable_prefix_caching must be true or false, got 'maybe'"):
        BackendSettings.from_model_dir(tmp_path, {"enable_prefix_caching": "maybe"})
