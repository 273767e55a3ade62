"""Adding a control is one row of the schema: a copy of the backend whose ``controls.py`` has one more row
generates a model repository, a real tritonserver serves it, the console (run on that copy) offers the
control as an option and sends it, and its value arrives in the backend's sampler. Nothing else is edited."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from helpers import SERVER_START, wait_for_log
from tritonclient.utils import InferenceServerException

from console.server import TritonServer
from repo_gen.writer import SKIPPED, bundled_backend_package

pytestmark = pytest.mark.server
MODEL = "smollm2_kv"
ROW = '    Control("probe_level", int, "INT64", "Probe level", "A test-only control.", minimum=1, maximum=9),\n'


CONSOLE = ("-c", "from console.cli import main; main()")


def run(src: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Python with ``src`` (the edited backend copy) first on the path, outside the project tree."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([sys.executable, *args], cwd=src, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory):
    """(src, server): the backend with one more row, and a tritonserver on the repository it generated."""
    src = tmp_path_factory.mktemp("grown_schema")
    shutil.copytree(bundled_backend_package(), src / "backend_model", ignore=shutil.ignore_patterns(*SKIPPED))
    schema = src / "backend_model" / "contract" / "controls.py"
    text = schema.read_text()
    assert text.count("\n)\nBY_NAME") == 1
    schema.write_text(text.replace("\n)\nBY_NAME", "\n" + ROW + ")\nBY_NAME"))  # the one edit: a row
    repo = src / "repo"
    done = run(src, "-c", "import sys; from repo_gen.samples import write_samples; "
                          f"write_samples(({MODEL!r},), sys.argv[1])", str(repo))
    assert done.returncode == 0, done.stderr
    server = TritonServer(repo).start(timeout=SERVER_START)
    yield src, server
    server.stop()


def test_the_generated_config_and_the_served_copy_carry_the_row(grown) -> None:
    src, _ = grown
    config = (src / "repo" / MODEL / "config.pbtxt").read_text()
    assert '{ name: "probe_level" data_type: TYPE_INT64 dims: [ 1 ] optional: true },' in config
    assert ROW in (src / "repo" / MODEL / "1" / "backend_model" / "contract" / "controls.py").read_text()


def test_the_console_offers_and_sends_the_row_and_the_sampler_gets_it(grown) -> None:
    src, server = grown
    helped = run(src, *CONSOLE, "--help")
    assert "--probe-level" in helped.stdout and "A test-only control." in helped.stdout
    before = set(server.log_tail(500))
    done = run(src, *CONSOLE, "--prompt", "My name is", "--mode", "generate", "--http-url",
               server.http_url, "--model", MODEL, "--max-tokens", "4", "--probe-level", "3", "--quiet")
    assert done.returncode == 0, done.stderr
    line = wait_for_log(server, "controls=max_tokens=4,probe_level=3", before=before)
    assert line is not None and f"{MODEL}: request" in line, server.log_tail(20)
    refused = run(src, *CONSOLE, "--prompt", "My name is", "--http-url", server.http_url,
                  "--probe-level", "12")
    assert refused.returncode == 2 and "Probe level must be an integer >= 1 and <= 9, got 12" in refused.stderr


def test_the_backend_applies_the_rows_rule_on_each_wire(grown) -> None:
    _, server = grown
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        prompt = httpclient.InferInput("prompt", [1], "BYTES")
        prompt.set_data_from_numpy(np.array([b"My name is"], dtype=np.object_))
        level = httpclient.InferInput("probe_level", [1], "INT64")
        level.set_data_from_numpy(np.array([12], dtype=np.int64))
        with pytest.raises(InferenceServerException) as error:
            client.infer(MODEL, [prompt, level])
        assert error.value.status() == "400"
        assert error.value.message() == "probe_level must be an integer >= 1 and <= 9, got 12"
    finally:
        client.close()
    before = set(server.log_tail(500))
    body = {"text_input": "My name is", "sampling_parameters": json.dumps({"max_tokens": 2, "probe_level": "5"})}
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/{MODEL}/generate",
                                     data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=300) as response:
        assert json.loads(response.read())["output_tokens"] == 2
    assert wait_for_log(server, "controls=max_tokens=2,probe_level=5", before=before) is not None
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(request.full_url, data=json.dumps(
            {"text_input": "x", "sampling_parameters": json.dumps({"probe_level": 0})}).encode()), timeout=60)
    assert refused.value.code == 400
    assert "probe_level must be an integer >= 1 and <= 9, got 0" in refused.value.read().decode()
