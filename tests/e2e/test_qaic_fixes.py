"""What a real card would have hit, each fixed and held here: fixed-shape QPCs, both specializations.json
forms, several QPC folders, compile options, retained-state names, idle decode rows, and a QPC
without QEfficient under engine=auto."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from twin_data import CTX_LEN, PROMPTS, VOCAB

from backend_model.build import BackendSettings, _compile_qpc, build_engine, choose_engine
from backend_model.contract import compile_config, specializations
from backend_model.contract.qpc import model_type_of as detect_model_type
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.protocol import Dims, SessionError
from backend_model.sessions.qaic import find_qpc, read_dims, retained_names
from backend_model.twin.session import OnnxInferenceSession

KV = [{"batch_size": 1, "seq_len": 32, "ctx_len": 256, "full_batch_size": 4},
      {"batch_size": 4, "seq_len": 1, "ctx_len": 256, "full_batch_size": 4}]
CAUSAL = [{"batch_size": 1, "seq_len": 128}]


def qpc_folder(root: Path, name: str = "qpc-1234") -> Path:
    """A compiled QPC's layout, as current QEfficient writes it: <dir>/qpc-<hash>/qpc/programqpc.bin."""
    qpc = root / name / "qpc"
    qpc.mkdir(parents=True)
    (qpc / "programqpc.bin").write_bytes(b"\0")
    return root / name


def write_specs(folder: Path, entries: list[dict], named: bool) -> None:
    if named:
        entries = [{"name": f"Graph_{i}", "symbols": {k: str(v) for k, v in e.items()}} for i, e in enumerate(entries)]
    (folder / specializations.FILE).write_text(json.dumps({"specializations": entries}))


@pytest.mark.parametrize("named", [False, True], ids=["flat", "named"])
@pytest.mark.parametrize(("entries", "kind"), [(KV, "kv_cache"), (CAUSAL, "causal")], ids=["kv", "causal"])
def test_model_type_is_read_from_both_specializations_forms(tmp_path, entries, kind, named):
    write_specs(qpc_folder(tmp_path), entries, named)
    assert detect_model_type(tmp_path, progress=lambda message: None) == kind


@pytest.mark.parametrize("named", [False, True], ids=["flat", "named"])
def test_dims_read_ctx_len_from_both_specializations_forms(compiled, tmp_path, named):
    folder = compiled(prefill_seq_len=8, full_batch_size=4)
    runtime = OnnxInferenceSession(folder / "model.onnx", specializations.read(folder / specializations.FILE))
    qpc = qpc_folder(tmp_path)
    write_specs(qpc, [{**e, "ctx_len": 48} for e in KV], named)  # specializations.json is authoritative
    dims, kv = read_dims(runtime, qpc / "qpc")
    assert kv and dims == Dims(1, 8, 48, VOCAB, full_batch_size=4)
    assert read_dims(runtime, folder / "model.onnx")[0].ctx_len == CTX_LEN


def test_several_qpc_folders_are_an_error_naming_them(tmp_path):
    qpc_folder(tmp_path, "qpc-aaa")
    qpc_folder(tmp_path, "qpc-bbb")
    with pytest.raises(SessionError, match=r"2 compiled QPCs \(qpc-aaa/qpc, qpc-bbb/qpc\)"):
        find_qpc(tmp_path)
    assert find_qpc(tmp_path / "qpc-bbb") == tmp_path / "qpc-bbb" / "qpc"


def test_retained_state_names_are_qefficients():
    names = types.SimpleNamespace(
        input_names=["input_ids", "past_key.0", "conv_state.0", "recurrent_state.0", "compressed_kv.0", "k_pe.0"],
        output_names=["logits", "past_key.0_RetainedState", "conv_state.0_RetainedState", "k_pe.0_RetainedState"],
    )
    assert retained_names(names) == names.input_names[1:] + names.output_names[1:]


def test_compile_passes_mos_and_depth_first_only_when_they_mean_something(monkeypatch):
    """QEfficient turns extra options into compiler flags as given (``-mos=-1`` would reach the compiler)."""
    calls = []

    class Model:
        @classmethod
        def from_pretrained(cls, name, continuous_batching):
            calls.append(("from_pretrained", name, continuous_batching))
            return cls()

        def compile(self, **options):
            calls.append(("compile", options))
            return "/qpc"

    monkeypatch.setitem(sys.modules, "QEfficient", types.SimpleNamespace(QEFFAutoModelForCausalLM=Model))
    settings = BackendSettings(hf_model_name="org/model", compile=compile_config.validate({"full_batch_size": 4}))
    assert _compile_qpc(settings, progress=lambda message: None) == "/qpc"
    options = calls[1][1]
    assert calls[0] == ("from_pretrained", "org/model", True)
    assert "mos" not in options and "aic_enable_depth_first" not in options and "onnx_path" not in options
    assert options["full_batch_size"] == 4 and options["mxfp6_matmul"] is False
    settings.compile = compile_config.validate({"mos": 2, "aic_enable_depth_first": True})
    _compile_qpc(settings, progress=lambda message: None)
    assert calls[3][1]["mos"] == 2 and calls[3][1]["aic_enable_depth_first"] is True
    assert "full_batch_size" not in calls[3][1] and calls[2][2] is False


def test_a_qpc_without_qefficient_under_engine_auto_is_an_error_not_a_cpu_run(tmp_path):
    qpc_folder(tmp_path)
    settings = BackendSettings.from_model_dir(tmp_path / "model", {"aic_binary_dir": str(tmp_path)})
    assert settings.engine == "auto"
    with pytest.raises(SessionError, match="aic_binary_dir is set .* but QEfficient/qaicrt are not importable"):
        build_engine(settings, progress=lambda message: None)
    settings.aic_binary_dir = ""
    assert choose_engine(settings) == "cpu"  # without a QPC, auto still means the CPU here


def test_a_repeated_decode_row_leaves_the_cpu_cache_as_it_was(smol):
    """An idle row repeats its last token and position: the cache keeps what produced it."""
    model, tokenizer = smol
    session = CpuKVSession.of(model, Dims(1, 4, CTX_LEN, VOCAB, full_batch_size=2))
    ids = tokenizer(PROMPTS[0]).input_ids
    for slot in (0, 1):
        chunk = np.full((1, 4), -1, np.int64)
        chunk[0, : len(ids)] = np.arange(len(ids))
        session.run({"input_ids": np.where(chunk >= 0, ids + [0] * (4 - len(ids)), 0), "position_ids": chunk,
                     "batch_index": np.array([[slot]])})
    step = {"input_ids": np.array([[11], [11]]), "position_ids": np.array([[3], [3]]),
            "batch_index": np.array([[0], [1]])}
    first = session.run(step)["logits"]
    cache = [c.clone() for c in session.k_cache + session.v_cache]
    step["input_ids"], step["position_ids"] = np.array([[11], [12]]), np.array([[3], [4]])  # slot 0 idles
    second = session.run(step)["logits"]
    np.testing.assert_array_equal(second[0], first[0])  # the logits its last write gave
    assert all(torch.equal(a[0], b[0]) for a, b in zip(cache, session.k_cache + session.v_cache))
    assert not all(torch.equal(a[1], b[1]) for a, b in zip(cache, session.k_cache + session.v_cache))
    prefill_again = {"input_ids": np.array([[11]]), "position_ids": np.array([[3]]), "batch_index": np.array([[0]])}
    np.testing.assert_array_equal(session.run(prefill_again)["logits"][0], first[0])
