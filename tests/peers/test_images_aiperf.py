"""AIPerf's synthetic images (``--image-width-mean`` ...) through the OpenAI-compatible front to a served tiny
random-weight LLaVA (``tests/tiny_vlms.py``): every request AIPerf sends, its warm-up's included, reaches the model
with its image (the backend's ``qaic_vision_encode_seconds`` counts it) and none fails. AIPerf starts a dozen
processes, too slow for ``make test``: it runs from ``$QAIC_AIPERF``, the PATH or the peer tier's venv
(``<cache>/peers/aiperf-venv``: ``pip install 'aiperf==0.13.*'``)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SERVER_START
from tiny_vlms import save_tiny_vlm
from transformers import AutoTokenizer

from backend_model.models import cache_root, prepare_embedded
from console.bench.front_report import aiperf_binary
from console.metrics import scrape
from repo_gen.spec import generate as generate_model

MODEL = "llava"
REQUESTS, WARMUP = 3, 1


@pytest.fixture(scope="module")
def fronted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """(the model's folder, the front's base URL, the tritonserver's metrics page)."""
    from console.front import front_server
    from console.server import TritonServer, free_port

    root = tmp_path_factory.mktemp("images_aiperf")
    folder = save_tiny_vlm(MODEL, root / "model",
                           AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None))))
    (root / "compile.json").write_text(json.dumps({"prefill_seq_len": 8, "ctx_len": 256, "full_batch_size": 2}))
    generate_model(MODEL, root / "repo", hf_model_name=str(folder), model_type="image_text_to_text",
                   decoupled=True, engine="cpu", compile_config_path=root / "compile.json")
    with contextlib.ExitStack() as stack:
        server = TritonServer(root / "repo").start(timeout=SERVER_START)
        stack.callback(server.stop)
        front = front_server(server.grpc_url, "127.0.0.1", free_port(), None, ())
        front.start()
        stack.callback(front.stop)
        yield folder, front.base_url, server.handle.metrics_url or ""


def aiperf() -> str:
    venv = cache_root() / "peers" / "aiperf-venv" / "bin" / "aiperf"
    binary = aiperf_binary() or (str(venv) if venv.is_file() else None)
    if binary is None:
        pytest.fail(f"no AIPerf: set QAIC_AIPERF or install 'aiperf==0.13.*' into {venv.parent.parent}")
    return binary


def test_aiperfs_synthetic_images_reach_the_model_through_the_front(fronted, tmp_path: Path) -> None:
    folder, base_url, metrics = fronted

    def encoded() -> float:
        found = scrape(metrics).histogram("qaic_vision_encode_seconds", MODEL)
        return found[1] if found else 0.0

    before = encoded()
    done = subprocess.run([aiperf(), "profile", "--model", MODEL, "--url", base_url.removesuffix("/v1"),
                           "--endpoint-type", "chat", "--streaming", "--request-count", str(REQUESTS),
                           "--warmup-request-count", str(WARMUP), "--concurrency", "1", "--tokenizer", str(folder),
                           "--image-width-mean", "64", "--image-height-mean", "48", "--image-batch-size", "1",
                           "--image-format", "png", "--synthetic-input-tokens-mean", "8", "--output-tokens-mean", "4",
                           "--artifact-dir", str(tmp_path), "--ui-type", "none"],
                          capture_output=True, text=True, timeout=600)
    export = tmp_path / "profile_export_aiperf.json"
    assert done.returncode == 0 and export.is_file(), (done.stdout + done.stderr)[-3000:]
    figures = json.loads(export.read_text())
    assert figures["request_count"]["avg"] == REQUESTS and not figures.get("error_request_count", {}).get("avg")
    assert encoded() - before == REQUESTS + WARMUP, "each AIPerf request's image reached the model"
