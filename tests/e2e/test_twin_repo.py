"""``generate-llm-model-repo --engine onnx`` with a named graph, and the backend built from that folder."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from twin_data import CTX_LEN, PROMPTS

from backend_model.build import BackendSettings, build_engine
from backend_model.engine.sampling import SamplingParams
from console.commands.repo import gen
from repo_gen.inspection import list_models


def run_gen(tmp_path, config: dict, *flags: str):
    path = tmp_path / "compile.json"
    path.write_text(json.dumps(config))
    return CliRunner().invoke(gen, ["--model_name", "twin", "--engine", "onnx", "--compile_config_path", str(path),
                                    "-o", str(tmp_path / "repo"), *flags])


def test_a_named_graph_brings_its_compile_and_the_backend_runs_it(graphs, tmp_path, reference):
    graph = graphs["regular"] / "model.onnx"
    result = run_gen(tmp_path, {"onnx_path": str(graph)})
    assert result.exit_code == 0, result.output
    folder = tmp_path / "repo" / "twin"
    written = json.loads((folder / "compile_config.json").read_text())
    assert written == {"onnx_path": str(graph), "prefill_seq_len": 8, "ctx_len": CTX_LEN, "batch_size": 2}
    (model,) = list_models(tmp_path / "repo")
    assert model.valid and model.source == f"onnx {graph}" and model.compile_summary() == "ctx=64 prefill=8 bs=2"
    settings = BackendSettings.from_model_dir(folder, {"engine": "onnx"})
    engine, description = build_engine(settings, progress=lambda message: None)
    assert description.startswith("engine=onnx model=embedded type=kv_cache batch_size=2 prefill_seq_len=8 ctx_len=64")
    (seq,) = engine.generate(PROMPTS[:1], SamplingParams(max_tokens=8))
    assert seq.tokens == reference(PROMPTS[0])[:8]


@pytest.mark.parametrize(("config", "flags", "message"), [
    ({"ctx_len": 128}, (), "compile config ctx_len 128 differs from .*specializations.json: 64"),
    ({"full_batch_size": 4}, (), "compile config full_batch_size 4 differs from .*: None"),
    ({}, ("--model_type", "causal"), "--engine onnx runs a KV-cache graph"),
])
def test_a_compile_config_that_contradicts_the_graph_is_refused(graphs, tmp_path, config, flags, message):
    result = run_gen(tmp_path, {"onnx_path": str(graphs["regular"] / "model.onnx"), **config}, *flags)
    assert result.exit_code == 2 and not (tmp_path / "repo" / "twin").exists()
    last = result.stderr.splitlines()[-1]
    assert last.startswith("error: ") and re.search(message, last), result.stderr
