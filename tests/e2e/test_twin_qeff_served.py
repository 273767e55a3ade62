"""``generate-llm-model-repo --engine onnx`` on the real QEfficient exports (the shared fixtures), served by a real
tritonserver: stream, batch and generate answer transformers' greedy text (``hf_greedy.json``), regular and
continuous batching. The regular model names the fixture's folder (its specializations.json); the continuous
one names an export folder as QEfficient writes it (no specializations.json: compiled for the compile config)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from twin_data import QEFF_GRAPH, QeffFixtures, events, generate_model, qeff_fixtures, texts

from backend_model.models import load_tokenizer
from console.clients import GenerationParams, TextDelta, generate, infer, stream
from repo_gen.inspection import list_models

pytestmark = pytest.mark.server
PARAMS = GenerationParams(max_tokens=24)
EXPORT = "LlamaForCausalLM-5f1b2c3d4e"  # QEfficient's <dir>-<hash> export folder
MODES = {"qeff_regular": "batch_size=1", "qeff_cb": "continuous batching full_batch_size=2"}


@pytest.fixture(scope="module")
def qeff() -> QeffFixtures:
    return qeff_fixtures()


@pytest.fixture(scope="module")
def qeff_repo(qeff, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Each mode as a batch model and a decoupled one; the export folder links the fixture's files."""
    root = tmp_path_factory.mktemp("qeff_twin")
    export = root / EXPORT
    export.mkdir()
    for name in (QEFF_GRAPH, "hashed_export_params.json"):
        (export / name).symlink_to(qeff.graph("cb") / name)
    configs = {"qeff_regular": {"onnx_path": str(qeff.graph("regular"))},
               "qeff_cb": {"onnx_path": str(export), "full_batch_size": 2, "prefill_seq_len": 4, "ctx_len": 128}}
    for name, config in configs.items():
        for suffix, flags in (("", ()), ("_decoupled", ("--decoupled",))):
            generate_model(root / "repo", name + suffix, config, "--engine", "onnx", "--hf_model_name", str(qeff.hf),
                           *flags)
    yield root / "repo"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def qeff_server(qeff_repo: Path):
    from console.server import TritonServer

    with TritonServer(qeff_repo).start(timeout=300) as server:
        yield server


@pytest.fixture(scope="module")
def expected(qeff) -> list[str]:
    """transformers' greedy tokens as text."""
    tokenizer, _ = load_tokenizer(str(qeff.hf), progress=lambda message: None)
    return [tokenizer.decode(tokens) for tokens in qeff.reference.values()]


def test_the_repository_lists_the_fixture_graphs_with_their_compile(qeff, qeff_repo):
    models = {m.name: m for m in list_models(qeff_repo)}
    assert all(m.valid and m.engine == "onnx" for m in models.values()), [m.problems for m in models.values()]
    assert models["qeff_regular"].compile_summary() == "ctx=128 prefill=32 bs=1"  # from its specializations.json
    assert models["qeff_cb"].compile_summary() == "ctx=128 prefill=4 fbs=2"  # from the compile config
    assert models["qeff_cb"].source == f"onnx {qeff_repo.parent / EXPORT}"


@pytest.mark.parametrize("model", list(MODES))
def test_fixture_graphs_answer_stream_batch_and_generate_with_transformers_text(qeff, qeff_server, expected, model):
    http, grpc = qeff_server.http_url, qeff_server.grpc_url
    prompts = list(qeff.reference)
    assert texts(events(infer(http, model, prompts, PARAMS))) == expected
    streamed = events(stream(grpc, f"{model}_decoupled", prompts, PARAMS))
    assert texts(streamed) == expected
    assert len([e for e in streamed if isinstance(e, TextDelta)]) > 2 * len(prompts)  # token by token
    assert texts(events(generate(http, model, prompts[1:2], PARAMS))) == expected[1:2]
    log = "\n".join(qeff_server.log_tail(2000))
    source = (f"{qeff.graph('regular')}/specializations.json" if model == "qeff_regular" else
              "compile_config.json (no specializations.json beside the graph)")
    for name in (model, f"{model}_decoupled"):
        assert f"{name}: engine=onnx model={qeff.hf} type=kv_cache {MODES[model]}" in log
        assert f"specializations={source}" in log
