"""console.server, console.commands.doctor and the serve/doctor CLI against a real tritonserver."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from click.testing import CliRunner
from helpers import wait_until

from console import server
from console.cli import main
from console.commands import doctor
from console.server import ServerError, TritonServer, locate, procs
from console.server.procs import group_members

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


def check_client(client, module, data: np.ndarray, server_ready: bool = True) -> None:
    """Readiness and one echo inference through a tritonclient (http or grpc) client."""
    assert client.is_server_live() and client.is_server_ready() == server_ready
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
        files = {p.name: p for p in (backends / "python").iterdir() if not p.name.startswith("__")}
        assert set(files) == {*locate.PYTHON_BACKEND_FILES, locate.STUB_NAME}
        # hard links or copies: tritonserver refuses a Python-based backend whose libtriton_python.so is a symlink
        assert not any(p.is_symlink() for p in files.values())
        assert files[locate.STUB_NAME].read_bytes() == server.stub_for_python(binary).read_bytes()

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
def test_a_model_failing_to_load_is_named_and_the_others_serve(tmp_path: Path, echo_repo: Path, python_model) -> None:
    python_model(tmp_path, "boom", BOOM_MODEL)
    shutil.copytree(echo_repo / "echo", tmp_path / "echo")
    lines: list[str] = []
    with TritonServer(tmp_path).start(timeout=120, on_log=lines.append) as srv:
        states = srv.handle.model_states()
        assert states["echo"] == ("READY", "")
        assert states["boom"][0] == "FAILED" and "boom-xyz" in states["boom"][1]
        assert any(line.startswith("qaic-console: model 'boom' failed to load (the others serve): ") and
                   "boom-xyz" in line for line in lines)
        with httpclient.InferenceServerClient(srv.http_url) as http:  # strict readiness (Triton's default): not ready
            check_client(http, httpclient, np.arange(3, dtype=np.float32), server_ready=False)
        srv.handle.request("/v2/repository/models/echo/unload", body={})  # unloaded is not failed
        wait_until(lambda: srv.handle.model_states()["echo"][0] == "UNAVAILABLE", 30, "echo unloaded")


@pytest.mark.server
def test_stubs_run_the_python_env_given(tmp_path: Path, echo_repo: Path) -> None:
    """A venv of our own (this console's packages through a .pth file): the echo model's finalize sees its prefix."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(env), "platbase": str(env)})["purelib"])
    (site / "console.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    found, here = server.PythonEnv.at(env), server.PythonEnv.current()
    assert (found.bin, found.version, found.libdir, found.numpy) == (env / "bin", here.version, here.libdir, here.numpy)
    # numpy 2's metadata there (the module still comes from this console's site-packages): serve says what breaks
    (site / "numpy-2.1.0.dist-info").mkdir()
    (site / "numpy-2.1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 2.1.0\n")
    marker, lines = tmp_path / "finalized", []
    srv = TritonServer(echo_repo, python_env=env, env={"ECHO_FINALIZE_MARKER": str(marker)})
    with srv.start(timeout=120, on_log=lines.append), httpclient.InferenceServerClient(srv.http_url) as http:
        check_client(http, httpclient, np.arange(4, dtype=np.float32))
    assert marker.read_text() == str(env)
    assert f"qaic-console: note: the Python of {env} has numpy 2.1.0: nvidia-pytriton's stub breaks on string " \
           "tensors with numpy 2 (the wheel pins numpy<2): `pip install 'numpy<2'` there" in lines
    with pytest.raises(ServerError, match=r"python env .*nope: no bin/python3 there"):
        TritonServer(echo_repo, python_env=tmp_path / "nope").start(timeout=30)


@pytest.mark.server
def test_a_python_based_backend_from_a_backend_folder(tmp_path: Path, echo_repo: Path) -> None:
    """``backend: "qc_echo"`` served by backends/qc_echo/model.py (how Triton's vLLM backend is served)."""
    backends, repo = tmp_path / "backends", tmp_path / "repo"
    (backends / "qc_echo").mkdir(parents=True)
    shutil.copy2(echo_repo / "echo" / "1" / "model.py", backends / "qc_echo" / "model.py")
    (repo / "echo" / "1").mkdir(parents=True)
    config = (echo_repo / "echo" / "config.pbtxt").read_text()
    (repo / "echo" / "config.pbtxt").write_text(config.replace('backend: "python"', 'backend: "qc_echo"'))
    srv = TritonServer(repo, backends=[backends])
    with srv.start(timeout=120), httpclient.InferenceServerClient(srv.http_url) as http:
        check_client(http, httpclient, np.arange(2, dtype=np.float32))
    with pytest.raises(ServerError, match="no Python-based backend there"):
        TritonServer(repo, backends=[repo]).start(timeout=30)


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
def test_cli_serve_runs_until_sigterm(tmp_path: Path, echo_repo: Path, python_model) -> None:
    """Beside a model that fails to load, which serve names with its reason."""
    shutil.copytree(echo_repo / "echo", tmp_path / "echo")
    python_model(tmp_path, "boom", BOOM_MODEL)
    cmd = [sys.executable, "-u", "-c", "from console.cli import main; main()"]
    args = ["serve", "--model-repository", str(tmp_path), "--timeout", "120"]
    proc = subprocess.Popen([*cmd, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pid = http_url = boom = None
        assert proc.stdout is not None
        for line in proc.stdout:
            boom = boom or re.match(r"\s+model boom: FAILED \(.*boom-xyz", line)
            if match := re.search(r"started here \(pid (\d+)\)", line):
                pid = int(match.group(1))
            if match := re.match(r"\s+HTTP\s+(\S+)", line):
                http_url = match.group(1)
            if "press Ctrl-C" in line:
                break
        assert pid and http_url, "serve never became ready"
        assert boom, "serve did not name the model that failed to load"
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
