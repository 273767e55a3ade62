"""The repository API of a tritonserver the console starts is the console's alone (real tritonserver).

The attacker is another process on this machine with no credential: it asks Triton over HTTP and gRPC to load a
model whose ``model.py`` it sends (code that would write a marker file), and to unload a served model.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from helpers import wait_until

from console.core.controller import ServerController
from console.server import TritonServer
from console.server.health import ServerHandle

pytestmark = pytest.mark.server

ATTACK = """\
import base64, json, sys, urllib.error, urllib.request
import tritonclient.grpc as grpcclient

http_url, grpc_url, marker, config = sys.argv[1:5]
code = f"open({marker!r}, 'w').write('ran')\\nclass TritonPythonModel:\\n    def execute(self, requests):\\n" \\
       "        return []\\n"
said = {}

def post(name, path, body):
    request = urllib.request.Request(f"http://{http_url}{path}", data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            said[name] = [answer.status, answer.read().decode()]
    except urllib.error.HTTPError as exc:
        said[name] = [exc.code, exc.read().decode()]

post("http_load", "/v2/repository/models/pwn/load",
     {"parameters": {"config": config, "file:1/model.py": base64.b64encode(code.encode()).decode()}})
post("http_unload", "/v2/repository/models/echo/unload", {})
post("http_index", "/v2/repository/index", {})
post("http_shm", "/v2/systemsharedmemory/region/r/register", {"key": "/r", "offset": 0, "byte_size": 8})
post("http_logging", "/v2/logging", {"log_verbose_level": 5})
client = grpcclient.InferenceServerClient(grpc_url)
for name, call in (("grpc_load", lambda: client.load_model("pwn_grpc", config=config,
                                                            files={"file:1/model.py": code.encode()})),
                   ("grpc_unload", lambda: client.unload_model("echo"))):
    try:
        call()
        said[name] = "done"
    except Exception as exc:
        said[name] = str(exc)
print(json.dumps(said))
"""


def attack(http_url: str, grpc_url: str, marker: Path) -> dict:
    """What the server answered the attacker, a process of its own with no key."""
    config = json.dumps({"backend": "python", "max_batch_size": 0,
                         "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                         "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]})
    env = {k: v for k, v in os.environ.items() if k != "QAIC_CONSOLE_CACHE"}  # not even this user's key files
    out = subprocess.run([sys.executable, "-c", ATTACK, http_url, grpc_url, str(marker), config], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def repo(echo_repo: Path) -> Path:
    return echo_repo


def echo_answers(http_url: str) -> bool:
    import numpy as np

    data = np.array([1.5, 2.5], dtype=np.float32)
    with httpclient.InferenceServerClient(http_url) as client:
        item = httpclient.InferInput("INPUT0", [2], "FP32")
        item.set_data_from_numpy(data)
        return bool((client.infer("echo", [item]).as_numpy("OUTPUT0") == data).all())


def test_code_sent_to_the_repository_api_never_runs_and_served_models_stay(repo: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(tmp_path / "cache"))
    marker = tmp_path / "ran"
    with TritonServer(repo) as server:
        said = attack(server.http_url, server.grpc_url, marker)
        for name in ("http_load", "http_unload", "http_index", "http_shm", "http_logging"):
            code, body = said[name]
            assert code == 403 and "This API is restricted" in body, (name, said[name])
        for name in ("grpc_load", "grpc_unload"):
            assert "This protocol is restricted" in said[name], (name, said[name])
        assert not marker.exists(), "the attacker's model.py ran"
        assert server.handle.model_states() == {"echo": ("READY", "")} and echo_answers(server.http_url)
        # the same load with the console's key is taken: what refused the attacker is the lock
        other = tmp_path / "ran-with-key"
        config = json.loads(json.dumps(server.handle.model_config("echo")))
        code = f"open({str(other)!r}, 'w').write('ran')\nclass TritonPythonModel:\n    def execute(self, r):\n" \
               "        return []\n"
        server.handle.request("/v2/repository/models/keyed/load", body={"parameters": {
            "config": json.dumps({k: config[k] for k in ("backend", "input", "output")}),
            "file:1/model.py": base64.b64encode(code.encode()).decode()}}, timeout=120)
        assert other.exists()


def test_the_key_is_in_no_command_line_log_or_environment(repo: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(tmp_path / "cache"))
    heard: list[str] = []
    server = TritonServer(repo, log_verbose=1).start(timeout=300, on_log=heard.append)
    try:
        key = server.handle.key
        assert len(key) >= 40
        seen = []
        for entry in (e for e in os.listdir("/proc") if e.isdigit()):
            for part in ("cmdline", "environ"):
                try:
                    if key.encode() in Path("/proc", entry, part).read_bytes():
                        seen.append((entry, part))
                except OSError:
                    pass
        assert not seen, f"the key is readable in /proc: {seen}"
        assert not any(key in line for line in heard + server.log_tail(500))
        assert key not in repr(server.handle) and key not in " ".join(server.command(None))
        # the one copy on disk: this user's only (0600 in a 0700 folder), gone with the server
        (kept,) = (tmp_path / "cache" / "server-keys").iterdir()
        assert kept.stat().st_mode & 0o777 == 0o600 and kept.parent.stat().st_mode & 0o777 == 0o700
        assert key in kept.read_text()
        assert ServerHandle(server.http_url).model_states() == {"echo": ("READY", "")}  # key-less: the loaded ones
    finally:
        server.stop()
    assert not any((tmp_path / "cache" / "server-keys").iterdir())


def test_a_model_unloaded_behind_the_consoles_back_is_said_and_loaded_again(repo: Path) -> None:
    lines: list[str] = []
    controller = ServerController(on_log=lines.append)
    controller.start(repo)
    try:
        wait_until(lambda: controller.poll().phase == "ready" and "echo" in controller.snapshot.infos, 300,
                   "the server")
        server = controller.server
        assert server is not None
        server.handle.request("/v2/repository/models/echo/unload", body={})  # with the key: a bug's unload
        wait_until(lambda: controller.poll() and "model echo: unloaded, not by this console: loading it again" in lines,
                   30, "the unload said")
        wait_until(lambda: "model echo: reloaded; it serves again" in lines and "echo" in controller.poll().infos,
                   120, "echo back")
        assert echo_answers(server.http_url)
    finally:
        controller.stop()


def test_models_of_another_console_list_every_model(repo: Path, tmp_path: Path) -> None:
    """This user's consoles read the index through the key file: a model that is not loaded is named."""
    from helpers import cli

    for name in ("echo", "spare"):
        shutil.copytree(repo / "echo", tmp_path / name)
    with TritonServer(tmp_path, models=("echo",)) as server:
        listed = cli("models", "--url", server.http_url)
    assert listed.exit_code == 0, listed.output
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[2:] if line.strip()}
    assert "READY" in rows["echo"] and "not loaded" in rows["spare"], listed.output
