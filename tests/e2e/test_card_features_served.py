"""A compile config's card features served by a real tritonserver, on the twin of the embedded model's graph: one
model samples on the card and attends compute-context lengths, the other samples on the host (as the card does) at
the fixed length; a seeded request gives the same tokens on both, and greedy answers are exact."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SERVER_START
from twin_data import CTX_LEN, events, generate_model, texts

from backend_model.contract import compile_config, specializations
from console.clients import GenerationParams, generate

pytestmark = pytest.mark.server
PROMPTS = ["My name is", "Maroon bells are mountains in Colorado, and"]
REGULAR = {"prefill_seq_len": 8, "ctx_len": CTX_LEN, "batch_size": 2}  # the shared regular graph's compile
CCL = {"comp_ctx_lengths_prefill": [16, 40], "comp_ctx_lengths_decode": [32, CTX_LEN]}
SAMPLER = {"include_sampler": True, "max_top_k_ids": 64}
SAMPLED = GenerationParams(max_tokens=24, temperature=0.9, top_k=50, top_p=0.95, repetition_penalty=1.2, seed=5)
GREEDY = GenerationParams(max_tokens=40)  # past the first decode length


@pytest.fixture(scope="module")
def repo(graphs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two models of one graph: ``card`` (include_sampler and CCL) and ``host`` (neither)."""
    root = tmp_path_factory.mktemp("card-features")
    graph = graphs["regular"] / "model.onnx"
    compiled = root / "ccl"  # the graph beside the specializations a compile with the CCL lists writes
    compiled.mkdir()
    os.link(graph, compiled / "model.onnx")
    specializations.write(compiled, specializations.of_config(compile_config.validate({**REGULAR, **CCL})))
    generate_model(root / "repo", "card", {**REGULAR, **CCL, **SAMPLER, "onnx_path": str(compiled / "model.onnx")},
                   "--engine", "onnx")
    generate_model(root / "repo", "host", {**REGULAR, "max_top_k_ids": 64, "onnx_path": str(graph)}, "--engine", "onnx")
    yield root / "repo"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server(repo: Path):
    from console.server import TritonServer

    with TritonServer(repo).start(timeout=SERVER_START) as server:
        yield server


def answers(server, model: str, params: GenerationParams) -> list[str]:
    return [texts(events(generate(server.http_url, model, [prompt], params)))[0] for prompt in PROMPTS]


def test_a_seeded_request_gives_the_same_tokens_sampled_on_the_card_and_on_the_host(server):
    on_card = answers(server, "card", SAMPLED)
    assert on_card == answers(server, "host", SAMPLED)
    assert on_card != answers(server, "host", GenerationParams(max_tokens=24))  # sampled, not greedy
    log = "\n".join(server.log_tail(2000))
    assert "sampler=card max_top_k_ids=64 comp_ctx_lengths={1: [32, 64], 8: [16, 40]}" in log
    assert "sampler=host max_top_k_ids=64 graph=" in log


def test_compute_context_lengths_serve_the_fixed_length_greedy_answers(server):
    assert answers(server, "card", GREEDY) == answers(server, "host", GREEDY)
