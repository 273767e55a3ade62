"""``engine=onnx`` in a real tritonserver: the card's code path (``QaicSession``) on the ONNX twin answers
stream, batch and generate with the CPU KV model's text, in continuous and regular batching."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import SERVER_START
from twin_data import events, generate_model, texts

from backend_model.build import BackendSettings, build_engine
from backend_model.contract import compile_config
from backend_model.engine.sampling import SamplingParams
from console.cli import main
from console.clients import GenerationParams, TextDelta, generate, infer, stream
from repo_gen.inspection import list_models

pytestmark = pytest.mark.server
PROMPTS = ["My name is", "Maroon bells are mountains in Colorado, and"]
CONTINUOUS = {"prefill_seq_len": 4, "ctx_len": 128, "full_batch_size": 4}
REGULAR = {"prefill_seq_len": 8, "ctx_len": 128, "batch_size": 2}
PARAMS = GenerationParams(max_tokens=12)
PAIRS = {"onnx_cb": "onnx_cb_decoupled", "onnx_regular": "onnx_regular_decoupled"}


@pytest.fixture(scope="module")
def twin_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """From nothing to served: the generator exports the continuous-batching graph into its model
    folder; ``qaic-console onnx export`` writes the regular one; the other models name a graph."""
    root = tmp_path_factory.mktemp("twin")
    repo = root / "repo"
    generate_model(repo, "onnx_cb", CONTINUOUS, "--engine", "onnx", "--hf_model_name", "embedded")
    graph = repo / "onnx_cb" / json.loads((repo / "onnx_cb" / "compile_config.json").read_text())["onnx_path"]
    generate_model(repo, "onnx_cb_decoupled", {**CONTINUOUS, "onnx_path": str(graph)}, "--engine", "onnx",
                   "--decoupled")
    exported = CliRunner().invoke(main, ["onnx", "export", "--ctx-len", "128", "--prefill-seq-len", "8",
                                         "--batch-size", "2", "-o", str(root / "regular")])
    assert exported.exit_code == 0, exported.output
    for name, flags in (("onnx_regular", ()), ("onnx_regular_decoupled", ("--decoupled",))):
        generate_model(repo, name, {**REGULAR, "onnx_path": str(root / "regular" / "model.onnx")}, "--engine", "onnx",
                       *flags)
    yield repo
    shutil.rmtree(root, ignore_errors=True)  # two 650 MB graphs


@pytest.fixture(scope="module")
def twin_server(twin_repo: Path):
    from console.server import TritonServer

    with TritonServer(twin_repo).start(timeout=SERVER_START) as server:  # four twins load one after another
        yield server


@pytest.fixture(scope="module")
def cpu_text() -> list[str]:
    """What the CPU KV model answers (the same compile, the CPU session)."""
    settings = BackendSettings(engine="cpu", compile=compile_config.validate(CONTINUOUS))
    engine, _ = build_engine(settings, progress=lambda message: None)
    return [s.text for s in engine.generate(PROMPTS, SamplingParams(max_tokens=PARAMS.max_tokens))]


def test_the_generated_repository_lists_its_graphs(twin_repo):
    models = {m.name: m for m in list_models(twin_repo)}
    assert all(m.valid and m.engine == "onnx" for m in models.values()), [m.problems for m in models.values()]
    assert models["onnx_cb"].source == "onnx onnx/model.onnx"  # inside the model folder, relative
    assert (twin_repo / "onnx_cb" / "onnx" / "specializations.json").is_file()
    assert models["onnx_regular"].source.startswith("onnx /") and models["onnx_regular"].compile["batch_size"] == 2


@pytest.mark.parametrize("batch_model", list(PAIRS))
def test_onnx_models_answer_stream_batch_and_generate_like_the_cpu_kv_model(twin_server, cpu_text, batch_model):
    http, grpc = twin_server.http_url, twin_server.grpc_url
    assert texts(events(infer(http, batch_model, PROMPTS, PARAMS))) == cpu_text
    streamed = events(stream(grpc, PAIRS[batch_model], PROMPTS, PARAMS))
    assert texts(streamed) == cpu_text
    assert len([e for e in streamed if isinstance(e, TextDelta)]) > 2 * len(PROMPTS)  # token by token
    for prompt, expected in zip(PROMPTS, cpu_text):
        assert texts(events(generate(http, batch_model, [prompt], PARAMS))) == [expected]
    log = "\n".join(twin_server.log_tail(2000))
    mode = "continuous batching full_batch_size=4" if batch_model == "onnx_cb" else "batch_size=2"
    for name in (batch_model, PAIRS[batch_model]):
        assert f"{name}: engine=onnx model=embedded type=kv_cache {mode}" in log
