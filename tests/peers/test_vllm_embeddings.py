"""Real vLLM serving the embedded all-MiniLM-L6-v2 folder (``--runner pooling``: 0.32's spelling of ``--task embed``)
beside a tritonserver serving the MiniLM sample and the front before it: ``bench --endpoint embeddings --compare-url``
puts the two side by side in one run, and ``eval embeddings`` finds their vectors alike."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import SERVER_START, cli
from peer_vllm import VllmServer

from backend_model.embedding.source import embedded_folder
from repo_gen.samples import EMBEDDED_EMBEDDING, write_samples

MODEL = EMBEDDED_EMBEDDING[0]


@pytest.fixture(scope="module")
def servers(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, VllmServer]]:
    """(the front before a tritonserver serving the MiniLM sample, vLLM serving the same files under its name)."""
    from console.front import front_server
    from console.server import TritonServer, free_port

    repo = tmp_path_factory.mktemp("embedding_peer")
    write_samples(EMBEDDED_EMBEDDING, repo)
    triton = TritonServer(repo)
    vllm = VllmServer(venv, embedded_folder(), tmp_path_factory.mktemp("vllm-embed") / "server.log",
                      ("--runner", "pooling", "--max-model-len", "256", "--served-model-name", MODEL))
    triton.start(timeout=SERVER_START)
    front = front_server(triton.grpc_url, "127.0.0.1", free_port(), None, (), triton.handle.metrics_url)
    front.start()
    try:
        vllm.start()
        yield front, vllm
    finally:
        vllm.stop()
        front.stop()
        triton.stop()


def test_bench_compares_the_front_with_vllm_in_one_run(servers, tmp_path: Path) -> None:
    front, vllm = servers
    result = cli("bench", "--endpoint", "embeddings", "--url", front.base_url, "--compare-url", vllm.base_url,
                 "--model", MODEL, "--concurrency", "1,4", "--batch-size", "4", "--requests", "8", "--warmup", "1",
                 "--input-tokens-mean", "16", "--plots", "none", "-o", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "bench.json").read_text())
    for target in document["targets"]:
        assert [(lv["request_count"], lv["error_count"]) for lv in target["levels"]] == [(8, 0), (8, 0)], target
        assert all(lv["input_throughput"]["avg"] > 0 for lv in target["levels"])
    ratios = [r["ratios"][1] for r in document["comparison"] if r["metric"] == "inputs/s"]
    assert len(ratios) == 2 and all(r > 0 for r in ratios)


def test_eval_finds_vllms_vectors_those_of_the_front(servers, tmp_path: Path) -> None:
    front, vllm = servers
    result = cli("eval", "embeddings", "--reference", f"{MODEL}@{front.base_url}", "--candidate",
                 f"{MODEL}@{vllm.base_url}", "-o", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    row = json.loads((tmp_path / "eval_embeddings.json").read_text())["summary"][1]
    assert row["dimension"] == 384 and row["min_cosine"] >= 0.999 and row["top1_agreement"] == 1.0, row
