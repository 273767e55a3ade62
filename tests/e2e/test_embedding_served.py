"""Embedding models in a real tritonserver (one for the module): the embedded MiniLM sample against
sentence-transformers' own ``encode`` on the same files, QEfficient's tiny-BERT export on the card's twin against its
reference, bad inputs refused by name while the server keeps serving, and Triton's dynamic batching joining requests."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from helpers import SERVER_START
from tritonclient.utils import InferenceServerException

from backend_model.embedding.source import embedded_folder
from repo_gen.samples import EMBEDDED_EMBEDDING, write_samples
from repo_gen.writer import ModelSpec, write_model

pytestmark = pytest.mark.server
TINY_BERT = Path("/work/shared/fixtures/qeff/tiny-bert")
TEXTS = [f"{subject} is the subject of sentence {i}." for i, subject in enumerate(
    ("A cat on a mat", "Paris", "The QAIC card", "Retrieval", "A mountain lake", "Green tea", "Jazz music", "Rust code",
     "A quiet library", "Rain in Tokyo", "The stock market", "A chess opening", "Sourdough bread", "Deep sea fish",
     "An old violin", "Solar panels"))]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The MiniLM sample on the CPU and, when the fixture is here, the tiny-BERT export on the twin."""
    from console.server import TritonServer

    repo = tmp_path_factory.mktemp("embedding_repo")
    write_samples(EMBEDDED_EMBEDDING, repo)
    if TINY_BERT.is_dir():
        compiled = {"seq_len": [8, 16], "batch_size": 2, "onnx_path": str(TINY_BERT / "export" / "PooledModel.onnx")}
        write_model(ModelSpec("tiny_bert_twin", "embedding", hf_model_name=str(TINY_BERT / "hf"), engine="onnx",
                              compile=compiled, vectors={"pooling": "mean", "normalize": "false"}), repo)
    server = TritonServer(repo)
    server.start(timeout=SERVER_START)
    yield server
    server.stop()


def embed(server, model: str, rows: list[str], name: str = "text") -> tuple[np.ndarray, np.ndarray]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    try:
        data = np.array([[r.encode()] for r in rows], dtype=object)
        tensor = httpclient.InferInput(name, list(data.shape), "BYTES")
        tensor.set_data_from_numpy(data)
        result = client.infer(model, [tensor])
        return result.as_numpy("embedding"), result.as_numpy("input_tokens")
    finally:
        client.close()


def test_sixteen_strings_match_sentence_transformers(server) -> None:
    from sentence_transformers import SentenceTransformer

    vectors, tokens = embed(server, "minilm_embedding", TEXTS)
    reference = SentenceTransformer(str(embedded_folder()), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert vectors.shape == (16, 384) == reference.shape
    cosines = (vectors * reference).sum(axis=1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosines.min() >= 0.9999, cosines
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)  # the model normalises (modules.json)
    assert tokens[:, 0].tolist() == [len(ids) for ids in _token_ids(TEXTS)]


def _token_ids(texts: list[str]) -> list[list[int]]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_folder())(texts)["input_ids"]


def test_token_ids_in_give_the_texts_vectors(server) -> None:
    ids = _token_ids(TEXTS[:2])
    by_ids, _ = embed(server, "minilm_embedding", [json.dumps(i) for i in ids], name="token_ids")
    by_text, _ = embed(server, "minilm_embedding", TEXTS[:2])
    assert np.allclose(by_ids, by_text, atol=1e-6)


@pytest.mark.skipif(not TINY_BERT.is_dir(), reason="QEfficient's tiny-bert export is not here")
def test_the_twin_serves_qeffs_export_as_its_reference(server) -> None:
    reference = json.loads((TINY_BERT / "reference.json").read_text())
    vectors, _ = embed(server, "tiny_bert_twin", reference["texts"])
    assert np.abs(vectors - np.array(reference["mean_pooled"], dtype=np.float32)).max() < 1e-4


@pytest.mark.parametrize(("rows", "message"), [
    (["fine", " ".join(["word"] * 300)], "input 1 is 302 tokens, over this model's max_seq_len of 256"),
    (["fine", ""], "input 1 is empty"),
])
def test_bad_input_is_refused_by_name_and_the_server_keeps_serving(server, rows: list[str], message: str) -> None:
    with pytest.raises(InferenceServerException) as refused:
        embed(server, "minilm_embedding", rows)
    assert message in refused.value.message() and refused.value.status() == "400"
    vectors, _ = embed(server, "minilm_embedding", ["still here"])
    assert vectors.shape == (1, 384)


def _batches(server, model: str) -> dict[int, int]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats", timeout=30) as answer:
        stats = json.load(answer)["model_stats"][0]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])}


def test_dynamic_batching_joins_concurrent_requests(server) -> None:
    """24 one-row requests sent at once: while the model embeds the first, Triton queues the others and hands them
    to one execution (a model without dynamic batching runs each alone: batch size 1 only)."""
    before = _batches(server, "minilm_embedding")
    start, failures = threading.Barrier(24), []

    def one(i: int) -> None:
        start.wait(timeout=60)
        try:
            embed(server, "minilm_embedding", [TEXTS[i % 16]])
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures
    after = _batches(server, "minilm_embedding")
    joined = {size: count - before.get(size, 0) for size, count in after.items() if size > 1}
    assert sum(size * count for size, count in joined.items()) > 0, after
