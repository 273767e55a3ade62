"""Embedding models in a real tritonserver (one for the module) and the OpenAI-compatible front before it: the embedded
MiniLM sample against sentence-transformers' own ``encode`` on the same files, QEfficient's tiny-BERT export on the
card's twin against its reference, bad inputs refused by name while the server keeps serving, and Triton's dynamic
batching joining requests. Through the front, ``/v1/embeddings``: the ``openai`` SDK and LangChain get
sentence-transformers' vectors, bad input is a 400 naming the field, and headless ``--embed`` reads the matrix from
Triton and from the front; the TUI's Embeddings pane and the web page's tab (in Chromium) show sentence-transformers'
similarities; ``bench --endpoint embeddings`` and ``eval embeddings`` run on both. (Behaviour, one test each:
fast/test_front_embeddings.py, fast/test_embed_consoles.py, fast/test_bench_embeddings.py,
fast/test_eval_embeddings.py.)"""

from __future__ import annotations

import functools
import json
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from helpers import SERVER_START, cli, computed_key, front_before, kept
from tritonclient.utils import InferenceServerException

from backend_model.embedding.source import embedded_folder
from console.bench.front_report import aiperf_binary
from repo_gen.samples import EMBEDDED_EMBEDDING, write_samples
from repo_gen.writer import ModelSpec, write_model

pytestmark = pytest.mark.server
MODEL = EMBEDDED_EMBEDDING[0]
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


@pytest.fixture(scope="module")
def front(server) -> Iterator:
    """The OpenAI-compatible front (in this process, on a free loopback port, no key) before ``server``."""
    with front_before(server) as started:
        yield started


@functools.cache
def sentence_transformer() -> Any:
    """sentence-transformers on the embedded MiniLM's files, loaded once a module."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(embedded_folder()), device="cpu")


def reference(texts: list[str]) -> np.ndarray:
    """sentence-transformers' own vectors of ``texts`` on the same files, kept in the console's cache under a key of
    the files, the texts and sentence-transformers' version (``kept``): a later run loads no sentence-transformers."""
    key = computed_key(embedded_folder().name, json.dumps(texts), version("sentence-transformers"))

    def make(out: Path) -> None:
        np.save(out / "vectors.npy", sentence_transformer().encode(texts, convert_to_numpy=True))

    return np.load(kept("minilm-reference", key, make) / "vectors.npy")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


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
    vectors, tokens = embed(server, "minilm_embedding", TEXTS)
    expected = reference(TEXTS)
    assert vectors.shape == (16, 384) == expected.shape
    assert cosines(vectors, expected).min() >= 0.9999, cosines(vectors, expected)
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


def test_the_sdk_and_langchain_get_sentence_transformers_vectors(front) -> None:
    import openai
    from langchain_openai import OpenAIEmbeddings

    sdk = openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)
    answer = sdk.embeddings.create(model=MODEL, input=TEXTS)  # base64, the SDK's default
    vectors = np.array([d.embedding for d in answer.data], dtype=np.float32)
    assert vectors.shape == (16, 384) and cosines(vectors, reference(TEXTS)).min() >= 0.9999
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > 16 * 5
    lc = OpenAIEmbeddings(model=MODEL, base_url=front.base_url, api_key="none",  # type: ignore[arg-type]
                          check_embedding_ctx_length=False, max_retries=0)
    assert cosines(np.array(lc.embed_documents(TEXTS[:2])), vectors[:2]).min() >= 0.99999
    card = httpx.get(f"{front.base_url}/models/{MODEL}", timeout=30).json()
    assert card["max_model_len"] == 256 and card["controls"] == []


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"input": ["fine", "word " * 300]}, "input", "input 1 is 302 tokens"),
    ({"input": [list(range(1000, 1300))]}, "input", "300 tokens"),
    ({"input": "x", "dimensions": 128}, "dimensions", "(384)"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format", "float or base64"),
])
def test_bad_input_is_a_400_naming_the_field_and_the_server_keeps_serving(front, body: dict[str, Any], param: str,
                                                                            words: str) -> None:
    bad = httpx.post(f"{front.base_url}/embeddings", json={"model": MODEL, **body}, timeout=60)
    error = bad.json()["error"]
    assert (bad.status_code, error["param"]) == (400, param) and words in error["message"], bad.text
    good = httpx.post(f"{front.base_url}/embeddings", json={"model": MODEL, "input": "still here"}, timeout=60)
    assert good.status_code == 200 and len(good.json()["data"][0]["embedding"]) == 384


@pytest.mark.parametrize("where", ["triton", "front"])
def test_headless_embed_shows_the_matrix_from_triton_and_from_the_front(server, front, where: str) -> None:
    url = server.http_url if where == "triton" else front.base_url
    result = cli("--embed", "a cat|a kitten|stock prices", "--url", url, "--model", MODEL, "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    matrix = np.array(body["similarity"])
    expected = reference(["a cat", "a kitten", "stock prices"])
    assert [i["dimension"] for i in body["inputs"]] == [384] * 3
    assert np.allclose(matrix, expected @ expected.T, atol=1e-4) and matrix[0, 1] > matrix[0, 2]


def test_bench_sweeps_triton_and_the_front_side_by_side(server, front, tmp_path) -> None:
    """``bench --endpoint embeddings``: Triton's HTTP straight and the front before it, in one run, with ratios; one
    client at a time runs batches of one, four let Triton's dynamic batching join them (its counters say so)."""
    result = cli("bench", "--endpoint", "embeddings", "--url", server.http_url, "--metrics-url",
                 server.handle.metrics_url, "--compare-url", front.base_url, "--compare-model", MODEL, "--model", MODEL,
                 "--concurrency", "1,4",
                 "--requests", "12", "--warmup", "1", "--input-tokens-mean", "16", "--plots", "none",
                 "-o", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "bench.json").read_text())
    triton, through_front = document["targets"]
    assert (triton["api"], through_front["api"]) == ("triton", "openai")
    for target in (triton, through_front):
        assert [(lv["request_count"], lv["error_count"]) for lv in target["levels"]] == [(12, 0), (12, 0)]
        assert all(lv["input_throughput"]["avg"] > 0 for lv in target["levels"])
    assert all(lv["input_sequence_length"]["avg"] > 8 for lv in triton["levels"])  # the backend counts the tokens
    one, four = (lv["server"]["batch_size"] for lv in triton["levels"])
    assert one == 1.0 and four > 1.0, (one, four)
    assert any(r["metric"] == "inputs/s" and r["level"] == "c=4" and r["ratios"][1] > 0
               for r in document["comparison"])
    assert "batch avg" in result.stdout and "side by side" in result.stdout


def test_eval_finds_triton_the_front_and_the_cpu_encoder_alike(server, front, tmp_path) -> None:
    """``eval embeddings``: Triton's vectors against the front's and the CPU encoder's in this process, then a golden
    recording of Triton's gating the front's."""
    triton, through_front = f"{MODEL}@{server.http_url}", f"{MODEL}@{front.base_url}"
    result = cli("eval", "embeddings", "--reference", triton, "--candidate", through_front, "--candidate", "cpu",
                 "-o", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    summary = {row["path"]: row for row in json.loads((tmp_path / "eval_embeddings.json").read_text())["summary"]}
    for name in (through_front, "cpu-fp32"):
        row = summary[name]
        assert row["dimension"] == 384 and row["min_cosine"] >= 0.9999 and row["top1_agreement"] == 1.0, row
        assert row["spearman"] >= 0.99, row
    golden = tmp_path / "golden.json"
    assert cli("eval", "embeddings", "record", "--path", triton, "-o", str(golden), "-q").exit_code == 0
    gated = cli("eval", "embeddings", "compare", str(golden), "--candidate", through_front, "--min-cosine", "0.9999",
                "-q")
    assert gated.exit_code == 0 and f"pass {through_front}" in gated.stdout, gated.output


@pytest.mark.skipif(aiperf_binary() is None,
                    reason="AIPerf is not installed: pip install 'aiperf==0.13.*' into a venv and set QAIC_AIPERF")
def test_aiperf_profiles_the_fronts_embeddings_endpoint(server, front, tmp_path) -> None:
    """AIPerf's embeddings endpoint (``--endpoint-type embeddings``, four texts a request) against the front: every
    request answered, its latency and throughput reported. AIPerf runs from $QAIC_AIPERF or the PATH (a venv of its
    own: its pins fight the project's, see docs/benchmarks.md)."""
    binary = aiperf_binary()
    assert binary is not None
    command = [binary, "profile", "--model", MODEL, "--url", front.base_url.removesuffix("/v1"), "--endpoint-type",
               "embeddings", "--batch-size-text", "4", "--concurrency", "2", "--request-count", "8",
               "--warmup-request-count", "1", "--synthetic-input-tokens-mean", "16", "--synthetic-input-tokens-stddev",
               "0", "--tokenizer", str(embedded_folder()), "--artifact-dir", str(tmp_path), "--ui-type", "none"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    export = tmp_path / "profile_export_aiperf.json"
    assert done.returncode == 0 and export.exists(), (done.stdout + done.stderr)[-3000:]
    data = json.loads(export.read_text())
    assert data["request_count"]["avg"] == 8 and not (data.get("error_request_count") or {}).get("avg"), data
    assert data["request_latency"]["avg"] > 0 and data["request_throughput"]["avg"] > 0


CONSOLE_TEXTS = ["a cat", "a kitten", "stock prices"]


def test_the_tuis_embeddings_pane_shows_sentence_transformers_similarities(server) -> None:
    from textual.widgets import DataTable, Input, Select
    from tui_pilot import SIZE, run, table_rows, until

    from console.tui.app import QaicConsoleApp

    expected = reference(CONSOLE_TEXTS)
    expected = expected @ expected.T

    async def go() -> None:
        app = QaicConsoleApp(http_url=server.http_url, grpc_url=server.grpc_url)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.embed_pane
            await until(pilot, lambda: pane.server is not None, 60, "the connection")
            await pilot.press("f10")
            pane.query_one("#embed-model", Select).value = MODEL
            pane.query_one("#embed-input", Input).value = "|".join(CONSOLE_TEXTS)
            await pilot.press("enter")
            await until(pilot, lambda: pane.found is not None, 60, "the vectors")
            inputs = list(table_rows(pane.query_one("#embed-inputs", DataTable)).values())
            assert [row[1:3] for row in inputs] == [("384", "1.0000")] * 3
            matrix = list(table_rows(pane.query_one("#embed-matrix", DataTable)).values())
            assert [[float(cell) for cell in row[1:]] for row in matrix] == pytest.approx(expected, abs=1e-4)

    run(go)


def test_the_web_pages_embeddings_tab_shows_sentence_transformers_similarities(server) -> None:
    from web_page import LogWatch, open_page

    from console.core.controller import ServerController
    from console.web.handlers import WebConsole

    expected = reference(CONSOLE_TEXTS)
    expected = expected @ expected.T
    log = LogWatch()
    controller = ServerController(on_log=log.add)
    controller.connect(server.http_url, server.grpc_url)
    try:
        with open_page(WebConsole(controller), log, ready="connected") as web:
            web.tab("Embeddings")
            web.page.locator("#qc-embed-input textarea").fill("|".join(CONSOLE_TEXTS))
            web.page.locator("#qc-embed-model textarea, #qc-embed-model input").first.fill(MODEL)
            web.page.locator("#qc-embed-send").click()
            web.wait_text("#qc-embed-heat", "cosine similarity")
            assert f"3 vectors from {MODEL}" in web.text("#qc-embed-status")
            cells = [float(t) for t in web.page.locator("#qc-embed-heat td").all_inner_texts()]
            assert cells == pytest.approx(expected.ravel(), abs=1e-4)
    finally:
        controller.stop()
