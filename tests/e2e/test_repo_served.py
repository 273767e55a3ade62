"""The generated embedded samples as the session's tritonserver serves them, and a repository generated before
the backend moved into sub-packages, as this console serves it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from helpers import SERVER_START

from console.server import TritonServer
from repo_gen.samples import EMBEDDED_SAMPLES, SAMPLES

ROOT = Path(__file__).resolve().parents[2]
FLAT_BACKEND = "4e8474c06675ed67d773ec43ad8da4e518aab4c4"  # the last commit whose backend_model/ was one flat folder


@pytest.mark.server
def test_embedded_models_config_in_server(embedded_server) -> None:
    client = httpclient.InferenceServerClient(embedded_server.http_url)
    try:
        for name in EMBEDDED_SAMPLES:
            sample = SAMPLES[name]
            config = client.get_model_config(name)
            assert config.get("model_transaction_policy", {}).get("decoupled", False) is sample.decoupled
            prompt = next(i for i in config["input"] if i["name"] == "prompt")
            assert (prompt["data_type"], prompt["dims"]) == ("TYPE_STRING", [-1])
            kv = config["parameters"]["use_kv_cache"]["string_value"]
            assert kv == ("true" if sample.model_type == "kv_cache" else "false")
            assert config["parameters"]["hf_model_name"]["string_value"] == "embedded"
    finally:
        client.close()


def generate(http_url: str, model: str) -> str:
    """The text ``model`` generates for a short prompt, through Triton's generate endpoint."""
    body = json.dumps({"prompt": "My name is", "id": "42", "max_tokens": 8}).encode()
    request = urllib.request.Request(f"http://{http_url}/v2/models/{model}/generate", data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        reply = json.loads(response.read())
    text = reply["text_output"]
    return text[0] if isinstance(text, list) else text


@pytest.mark.server
def test_generate_on_smollm2_kv(embedded_server) -> None:
    text = generate(embedded_server.http_url, "smollm2_kv")
    assert isinstance(text, str) and text.strip()


@pytest.fixture(scope="module")
def flat_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository written by the generator of ``FLAT_BACKEND`` (from git), so its model carries that flat backend."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", FLAT_BACKEND, "backend_model", "repo_gen"],
                             capture_output=True, timeout=60)
    if archive.returncode != 0:
        pytest.skip(f"this checkout has no commit {FLAT_BACKEND[:7]} (a shallow clone?): {archive.stderr.decode()}")
    src = tmp_path_factory.mktemp("flat_backend")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(src, filter="data")
    repo = src / "repo"
    done = subprocess.run([sys.executable, "-c", "import sys; from repo_gen.samples import write_samples; "
                           "write_samples(('smollm2_kv',), sys.argv[1])", str(repo)], cwd=src, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(src)}, timeout=300)
    assert done.returncode == 0, done.stderr
    return repo


@pytest.mark.server
def test_a_repository_generated_with_the_flat_backend_still_serves(flat_repo: Path) -> None:
    backend = flat_repo / "smollm2_kv" / "1" / "backend_model"
    assert (backend / "engine.py").is_file() and not (backend / "engine").exists()  # written the old way
    server = TritonServer(flat_repo).start(timeout=SERVER_START)
    try:
        assert generate(server.http_url, "smollm2_kv").strip()
    finally:
        server.stop()
