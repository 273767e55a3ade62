"""A model with two device groups on a real tritonserver: two instances, each told its own SoCs.

The generator writes ``--device-groups "0,1;2,3"`` (num_devices 2) checked against the 8-SoC server's real
``qaic-util -q`` output (a script on PATH prints it). With no card here each instance runs its own CPU engine;
what each instance opened is read from its log line, and the metrics carry an ``instance`` label. A model whose
group is not the QPC's num_devices fails to load, naming both, while the other serves.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from helpers import SERVER_START, wait_until

from console.metrics.scrape import scrape
from repo_gen.command import main as generate

FIXTURE = Path("/work/shared/fixtures/qaic-util/sdk-1.5-server-8x16nsp.txt")


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with ``grouped`` (groups 0,1;2,3) and ``mismatched`` (a group of 3 for num_devices 2)."""
    root = tmp_path_factory.mktemp("device_groups")
    tool = root / "bin" / "qaic-util"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\ncat '{FIXTURE}'\n")
    tool.chmod(0o755)
    config = root / "cc.json"
    config.write_text(json.dumps({"num_devices": 2, "ctx_len": 128, "full_batch_size": 4}))
    repo = root / "repo"
    mp = pytest.MonkeyPatch()
    mp.setenv("PATH", f"{tool.parent}:{Path(sys.executable).parent}:/usr/bin:/bin")
    try:
        for name, groups in (("grouped", "0,1;2,3"), ("mismatched", "4,5")):
            assert generate(["--model_name", name, "--hf_model_name", "embedded", "--engine", "cpu", "--cpu_threads",
                             "1", "--compile_config_path", str(config), "--device-groups", groups, "-o",
                             str(repo)]) == 0
    finally:
        mp.undo()
    mismatched = repo / "mismatched" / "config.pbtxt"  # edited after generation: the backend must refuse it too
    mismatched.write_text(mismatched.read_text().replace('"4,5"', '"4,5,6"'))
    return repo


@pytest.mark.server
def test_each_instance_opens_its_own_group_and_reports_under_its_label(grouped: Path) -> None:
    from console.server import TritonServer

    server = TritonServer(grouped)
    server.start(timeout=SERVER_START)
    try:
        log = "\n".join(server.log_tail(600))
        opened = sorted(re.findall(r"grouped: engine=cpu .* instance=(\d) devices=([\d,]+)", log))
        assert opened == [("0", "0,1"), ("1", "2,3")], log
        assert re.search(r"device group 0 \(4,5,6\) has 3 SoCs but the model runs on num_devices 2 "
                         r"\(compile_config.json num_devices\)", log), log
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            assert client.is_model_ready("grouped") and not client.is_model_ready("mismatched")
            assert client.get_model_config("grouped")["instance_group"][0]["count"] == 2
        finally:
            client.close()

        def generate_one(prompt: str) -> str:
            body = json.dumps({"prompt": prompt, "max_tokens": 24, "exclude_input_in_output": True}).encode()
            request = urllib.request.Request(f"http://{server.http_url}/v2/models/grouped/generate", data=body,
                                             headers={"Content-Type": "application/json"}, method="POST")
            with urllib.request.urlopen(request, timeout=300) as response:
                return json.loads(response.read())["text_output"]

        prompts = [f"Tell me about the number {i}." for i in range(10)]
        alone = [generate_one(p) for p in prompts[:2]]
        with ThreadPoolExecutor(len(prompts)) as pool:  # more than one instance's 4 slots: both must take some
            together = list(pool.map(generate_one, prompts))
        assert together[:2] == alone
        metrics = f"http://127.0.0.1:{server.metrics_port}/metrics"
        page = scrape(metrics)
        assert page.instances("qaic_slots", "grouped") == {"0": 4.0, "1": 4.0}
        assert page.value("qaic_slots", "grouped") == 8.0  # summed over the instances

        def successes() -> dict[str, float]:
            return scrape(metrics).instances("qaic_request_success", "grouped")

        # each instance's publisher thread flushes its counts soon after a request ends, not before its answer
        wait_until(lambda: sum(successes().values()) == 12, 30, "12 successes in the metrics",
                   state=lambda: f"the metrics say {successes()}")
        split = successes()
        assert min(split.values()) >= 2, split
    finally:
        server.stop()
