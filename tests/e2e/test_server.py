"""console.server, console.doctor and the serve/doctor CLI against a real tritonserver."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from click.testing import CliRunner

from console import doctor, server
from console.cli import main
from console.server import ServerError, TritonServer, locate, procs
from console.server.process import group_members

ROOT = Path(__file__).resolve().parents[2]

BOOM_MODEL = """\
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("boom-xyz")
"""

SLOW_MODEL = """\
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(120)

    def execute(self, requests):
        return []
"""


def assert_group_gone(pgid: int) -> None:
    """No live process is left in the server's process group."""
    assert group_members(pgid) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def check_client(client, module, data: np.ndarray) -> None:
    """Readiness and one echo inference through a tritonclient (http or grpc) client."""
    assert client.is_server_ready()
    assert client.is_model_ready("echo")
    inp = module.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    np.testing.assert_array_equal(client.infer("echo", [inp]).as_numpy("OUTPUT0"), data)


# --------------------------------------------------------------------------- no server needed


def test_find_tritonserver_and_backend_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(locate.ENV_TRITONSERVER, raising=False)
    binary = server.find_tritonserver()
    assert os.access(binary, os.X_OK)
    assert server.stub_for_python(binary).is_file()

    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(tmp_path))
    backends = locate.backend_directory(binary)
    if backends is not None:  # the wheel's server: the assembled Python backend, idempotently
        assert locate.backend_directory(binary) == backends
        names = {p.name for p in (backends / "python").iterdir() if not p.name.startswith("__")}
        assert names == {*locate.PYTHON_BACKEND_FILES, locate.STUB_NAME}

    with pytest.raises(ServerError, match="not an executable"):
        server.find_tritonserver(tmp_path / "nope")
    monkeypatch.setenv(locate.ENV_TRITONSERVER, str(tmp_path / "nope"))
    with pytest.raises(ServerError, match=locate.ENV_TRITONSERVER):
        server.find_tritonserver()


def test_explicit_port_in_use(echo_repo: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        srv = TritonServer(echo_repo, http_port=port)
        with pytest.raises(ServerError, match=f"port {port} is in use"):
            srv.start(timeout=30)
    assert srv.pid is None


def test_missing_repository(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="model repository not found"):
        TritonServer(tmp_path / "absent").start()


def test_bad_argument_exits_with_reason(echo_repo: Path) -> None:
    srv = TritonServer(echo_repo, extra_args=["--no-such-flag"])
    with pytest.raises(ServerError, match="exited with code 1: .*unrecognized option '--no-such-flag'"):
        srv.start(timeout=30)
    assert_group_gone(srv.pid)


def test_free_ports_are_distinct() -> None:
    ports = server.free_ports(3)
    assert len(set(ports)) == 3
    assert not any(server.port_in_use(p) for p in ports)


# --------------------------------------------------------------------------- real server


@pytest.mark.server
def test_echo_server_http_grpc_and_clean_stop(echo_repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "finalized"
    lines: list[str] = []
    srv = TritonServer(echo_repo, env={"ECHO_FINALIZE_MARKER": str(marker)})
    t0 = time.monotonic()
    with srv.start(timeout=120, on_log=lines.append):
        print(f"tritonserver ready in {time.monotonic() - t0:.2f} s")
        pgid = srv.pid
        assert srv.running
        assert srv.handle.model_states() == {"echo": ("READY", "")}
        data = np.arange(5, dtype=np.float32)
        # close the clients: Triton's graceful exit waits for open HTTP connections
        with httpclient.InferenceServerClient(srv.http_url) as http:
            check_client(http, httpclient, data)
        with grpcclient.InferenceServerClient(srv.grpc_url) as grpc:
            check_client(grpc, grpcclient, data)
        assert any("successfully loaded 'echo'" in line for line in lines)
        assert srv.log_tail(3) == lines[-3:]
    assert not srv.running
    assert srv.stop() == 0
    assert_group_gone(pgid)
    # finalize ran (graceful stop) in a stub that took its environment from this interpreter
    assert marker.read_text() == sys.prefix


@pytest.mark.server
def test_stop_without_grace_kills_the_group(echo_repo: Path) -> None:
    srv = TritonServer(echo_repo).start(timeout=120)
    pgid = srv.pid
    members = group_members(pgid)
    assert len(members) >= 2  # tritonserver + the echo model's stub
    shm = procs.shm_regions(members)
    assert shm, "the Python backend maps a /dev/shm region"
    assert srv.stop(grace=0) == -signal.SIGKILL
    assert_group_gone(pgid)
    assert not any(region.exists() for region in shm)  # a killed backend leaks them: stop() removes them


@pytest.mark.server
def test_model_failing_to_load(tmp_path: Path, python_model) -> None:
    python_model(tmp_path, "boom", BOOM_MODEL)
    srv = TritonServer(tmp_path)
    with pytest.raises(ServerError, match="boom-xyz") as info:
        srv.start(timeout=120)
    assert "model 'boom' failed to load" in str(info.value)
    assert any("boom-xyz" in line for line in info.value.log_tail)
    assert "boom-xyz" in info.value.details()
    assert not srv.running
    assert_group_gone(srv.pid)


@pytest.mark.server
def test_timeout_while_loading_stops_everything(tmp_path: Path, python_model) -> None:
    python_model(tmp_path, "slow", SLOW_MODEL)
    srv = TritonServer(tmp_path)
    with pytest.raises(ServerError, match="not ready after 2 s"):
        srv.start(timeout=2)
    assert not srv.running
    assert_group_gone(srv.pid)


# --------------------------------------------------------------------------- CLI


def test_cli_help() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0 and "serve" in result.output and "doctor" in result.output
    result = runner.invoke(main, ["serve", "--help"])
    assert result.exit_code == 0
    for option in ("--model-repository", "--http-port", "--grpc-port", "--tritonserver", "--timeout"):
        assert option in result.output


def test_one_start_timeout_for_serve_the_tui_and_the_embedded_server() -> None:
    from console.cli import serve
    from console.server.embedded import START_TIMEOUT

    serve_default = next(p.default for p in serve.params if p.name == "timeout")
    start_default = inspect.signature(TritonServer.start).parameters["timeout"].default
    assert serve_default == start_default == START_TIMEOUT  # the TUI's Start timeout field shows START_TIMEOUT


def test_cli_serve_a_model_the_repository_lacks(echo_repo: Path) -> None:
    result = CliRunner().invoke(main, ["serve", "--model-repository", str(echo_repo), "--model", "nosuch"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.startswith(f"error: not in {echo_repo}: nosuch (it holds ")
    assert "tritonserver" not in result.stderr  # refused before any server starts


def test_cli_serve_missing_repository(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["serve", "--model-repository", str(tmp_path / "absent")])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: model repository not found")
    assert "Traceback" not in result.output


def test_cli_serve_port_in_use(echo_repo: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", "--model-repository", str(echo_repo), "--grpc-port", str(port)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: port {port} is in use")
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_web_port_in_use_is_refused_before_any_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(tmp_path))  # should a server start anyway: not the user's cache
    monkeypatch.setenv("QAIC_TRITONSERVER", str(tmp_path / "no-tritonserver"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = CliRunner().invoke(main, ["web", "--port", str(port)])
    assert result.exit_code == 1 and (result.exception is None or isinstance(result.exception, SystemExit))
    assert result.stderr == f"error: port {port} is in use: choose another --port or leave it out (7860 or the next " \
                            "free one)\n"
    assert "tritonserver" not in result.output and not (tmp_path / "llm_model_dir").exists()


@pytest.mark.server
def test_cli_serve_refuses_a_second_server_on_the_models_a_server_serves(tmp_path: Path, echo_repo: Path) -> None:
    repo = tmp_path / "repo"
    for name in ("echo", "other"):
        shutil.copytree(echo_repo / "echo", repo / name)
    first = TritonServer(repo, models=("echo",)).start(timeout=120)
    try:
        (pid,) = [p for p in group_members(first.pid) if procs.cmdline(p)[:1] == [str(first.binary)]]  # not the guard
        for args in ((), ("--model", "echo", "--model", "other")):
            cmd = [sys.executable, "-c", "from console.cli import main; main()", "serve", "--model-repository",
                   str(repo), *args]  # a process: a second server would serve until killed
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert done.returncode == 1 and "started here" not in done.stdout  # no second server
            (line,) = done.stderr.splitlines()
            assert line.startswith(f"error: tritonserver pid {pid} on {repo} (ports {first.http_port}/")
            assert line.endswith(f"already serves {'echo' if args else 'this repository'}: use it (--url "
                                 f"{first.http_url}) or stop it first")
        from console.server.stale import already_serving, find_servers

        assert already_serving(find_servers(repo), repo, ["other"]) is None  # a model it does not load: allowed
    finally:
        first.stop()


def test_cli_doctor_never_prints_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "hf_secret_value_123"
    result = CliRunner().invoke(main, ["doctor"], env={"HF_TOKEN": secret})
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    for check in ("tritonserver", "python backend stub", "QEfficient", "qaicrt", "embedded model", "free ports"):
        assert check in result.output
    assert re.search(r"HF token configured\s+\S+\s+yes", result.output)
    assert secret not in result.output


def test_doctor_rows_and_hf_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    rows, ok = doctor.run_doctor()
    table = {check: (status, detail) for check, status, detail in rows}
    assert table["HF token configured"] == (doctor.INFO, "no")
    assert table["tritonserver"][0] == doctor.OK
    version_status, version = table["tritonserver version"]  # asked of the server itself (the wheel has no file)
    assert version_status == doctor.OK and re.match(r"2\.\d+\.\d+ \(", version), version
    assert ok == all(status != doctor.FAIL for status, _ in table.values())
    (tmp_path / "token").write_text("hf_other_secret")
    assert doctor.check_hf_token() == ("HF token configured", doctor.INFO, "yes")


@pytest.mark.server
def test_cli_serve_runs_until_sigterm(echo_repo: Path) -> None:
    cmd = [sys.executable, "-u", "-c", "from console.cli import main; main()"]
    args = ["serve", "--model-repository", str(echo_repo), "--timeout", "120"]
    proc = subprocess.Popen([*cmd, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pid = http_url = None
        assert proc.stdout is not None
        for line in proc.stdout:
            if match := re.search(r"started here \(pid (\d+)\)", line):
                pid = int(match.group(1))
            if match := re.match(r"\s+HTTP\s+(\S+)", line):
                http_url = match.group(1)
            if "press Ctrl-C" in line:
                break
        assert pid and http_url, "serve never became ready"
        with httpclient.InferenceServerClient(http_url) as client:
            assert client.is_model_ready("echo")
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, rest
    assert rest.rstrip().endswith("stopped")
    assert_group_gone(pid)
