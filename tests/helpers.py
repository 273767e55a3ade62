"""Helpers shared by the tests (importable: ``pythonpath = tests`` in pyproject)."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from console.bench.llama_cpp import LLAMA_MODEL as LLAMA_MODEL  # the tests' name for the GGUF's alias
from console.bench.llama_cpp import LlamaCppServer

ROOT = Path(__file__).resolve().parents[1]
SESSION_MARK = "QAIC_TEST_SESSION"
# a long server start (several models) waits this long: under pytest-timeout's 600 s, so a start that hangs fails
# with the server's own error and its log's tail, not with pytest's stack dump
SERVER_START = 400
SERVER_NAMES = ("tritonserver", "triton_python_backend_stub", "guard.py", "llama_cpp.server", "llama-server",
                "vllm.entrypoints", "VLLM::")  # vLLM's OpenAI server; its engine and workers name themselves VLLM::

# a Python model with the prompt -> text_output interface and no controls, answering "echo: <prompt>" at once
ECHO_LLM = """\
import numpy as np
import triton_python_backend_utils as pb_utils


def answer(request):
    prompts = pb_utils.get_input_tensor_by_name(request, "prompt").as_numpy().reshape(-1)
    return pb_utils.InferenceResponse([pb_utils.Tensor("text_output", np.array([b"echo: " + p for p in prompts],
                                                                                dtype=np.object_))])


class TritonPythonModel:
    def execute(self, requests):
        return [answer(r) for r in requests]
"""


def wait_for_log(server, needle: str, timeout: float = 30.0, before: Collection[str] = ()) -> str | None:
    """The newest log line of ``server`` containing ``needle`` and not in ``before``; polls up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        fresh = [line for line in server.log_tail(500) if needle in line and line not in before]
        if fresh or time.monotonic() >= deadline:
            return fresh[-1] if fresh else None
        time.sleep(0.05)


def signalled(cmd: list[str], ready: Callable[[str], bool], sig: int, on: str = "stderr", cwd: Path | None = None,
              timeout: float = 120) -> tuple[str, str, str, int]:
    """Run ``cmd`` until a line of its ``on`` stream (stdout or stderr) is ``ready``, then send it ``sig``: (that
    line, the rest of its stdout, the rest of its stderr, its exit code). The line is the marker, not the clock."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        seen = next((line for line in getattr(proc, on) if ready(line)), "")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return seen, out, err, proc.returncode


@contextlib.contextmanager
def started(cmd: list[str], **popen: object) -> Iterator[subprocess.Popen]:
    """``cmd`` running as a text-mode process (``popen``: Popen's other arguments), killed on the way out should it
    still run."""
    proc = subprocess.Popen(cmd, text=True, **popen)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_until(condition: Callable[[], object], timeout: float, what: str,
               state: Callable[[], str] | None = None) -> None:
    """Poll ``condition`` until it is true; fail naming ``what`` after ``timeout`` s (and what ``state()`` says then:
    what the wait held)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f"; {state()}" if state else ""))
        time.sleep(0.05)


def tritonserver_pid(server) -> int | None:
    """The tritonserver process of a :class:`~console.server.TritonServer` (a child of its guard)."""
    from console.server.procs import cmdline, group_members

    return next((p for p in group_members(server.pid) if cmdline(p)[:1] == [str(server.binary)]), None) \
        if server.pid else None


@contextlib.contextmanager
def front_before(server, **options: Any) -> Iterator:
    """The OpenAI-compatible front before a :class:`~console.server.TritonServer` (in this process, on a free
    loopback port, no key, the server's metrics page beside; ``options``: front_server's), stopped on leaving."""
    from console.front import front_server
    from console.server import free_port

    front = front_server(server.grpc_url, "127.0.0.1", free_port(), None, (), server.handle.metrics_url, **options)
    front.start()
    try:
        yield front
    finally:
        front.stop()


def cli(*args: str):
    """``qaic-console ARGS`` in this process (click's runner): its Result."""
    from click.testing import CliRunner

    from console.cli import main

    return CliRunner().invoke(main, list(args))


def json_rows(result) -> list[dict]:
    """The --json rows of a CLI result that must have succeeded."""
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def greedy_answer(base_url: str, model: str, max_tokens: int, prompt: str | None = None,
                  messages: list | None = None) -> str:
    """An OpenAI-compatible server's own greedy answer (chat when ``messages``), asked through the ``openai``
    client directly."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
    if messages is not None:
        return client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens,
                                              temperature=0).choices[0].message.content
    return client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0).choices[0].text


def marked_servers(mark: str) -> list[tuple[int, str]]:
    """(pid, command) of live server processes (:data:`SERVER_NAMES`) whose environment has ``mark``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path("/proc", entry, "environ").read_bytes()
            cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        marked = f"{SESSION_MARK}={mark}".encode() in environ.split(b"\0")
        if state != "Z" and marked and any(name in cmdline for name in SERVER_NAMES):
            found.append((int(entry), cmdline[:160]))
    return found


class LlamaServer(LlamaCppServer):
    """llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``) on the embedded GGUF, on a free
    loopback port; its output goes to ``log`` (it names every client that went away).

    One thread by default: llama.cpp's threads spin while they wait for each other, and on two cores shared
    with other work two of them slow down many times over (measured: inter-token latency 30-200 ms instead
    of ~8 ms).
    """

    def start(self, timeout: float = 120.0) -> None:
        """Start it and wait until ``/v1/models`` answers; the test fails with the log's tail when it does not."""
        try:
            import llama_cpp.server  # noqa: F401
        except ImportError:
            pytest.fail("llama-cpp-python[server] is not installed: scripts/setup.sh --test installs it (the test "
                        "extra)")
        try:
            super().start(timeout)
        except RuntimeError as exc:
            pytest.fail(str(exc))


SHARED = "shared"  # the folder of what the workers of one run make once (made_once), under the run's temp root


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """Where the workers of this run meet: under pytest-xdist, beside their own temp folders; alone, in this
    session's temp folder."""
    base = factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / SHARED


def made_once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``name``, written by ``make(folder)`` once per run: the first worker to ask makes it under a lock,
    the others wait for it and read the same files. A folder that a failed ``make`` left is made again."""
    root = shared_root(factory)
    root.mkdir(parents=True, exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            make(folder)
            done.touch()
    return folder


def kept(name: str, key: str, make: Callable[[Path], None]) -> Path:
    """The folder ``name-key`` in the console's cache, written by ``make(folder)`` once for every run that computes
    the same ``key`` (:func:`computed_key`: everything that decides the folder's content), under a lock: the workers
    of a run and later runs read the same files. A failed ``make`` leaves nothing."""
    from backend_model.models import cache_root

    root = cache_root() / "test-kept"
    folder = root / f"{name}-{key}"
    if not folder.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        with open(root / f"{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not folder.is_dir():
                part = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", suffix=".part", dir=root))
                try:
                    make(part)
                    os.replace(part, folder)
                finally:
                    shutil.rmtree(part, ignore_errors=True)
    return folder


def computed_key(*parts: str, threads: int | None = None) -> str:
    """A short hash of ``parts`` (the inputs, the code and any other library of a computation on the CPU) and of what
    else decides its numbers: the versions of torch and transformers, torch's threads (``threads``: another process's;
    by default this one's) and the CPU's instruction sets."""
    from importlib.metadata import version

    import torch

    cpu = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    threads = torch.get_num_threads() if threads is None else threads
    machine = [version("torch"), version("transformers"), str(threads), cpu]
    return hashlib.sha256("\n".join([*parts, *machine]).encode()).hexdigest()[:16]


def remove_shared(factory: pytest.TempPathFactory) -> None:
    """Remove what was made once (1.3 GB of graphs: not kept among pytest's last three runs), by the process that
    owns the run at its end: pytest-xdist's controller once its workers are done, or the only process. A run that
    made no temp folder has nothing to remove."""
    if os.environ.get("PYTEST_XDIST_WORKER") or getattr(factory, "_basetemp", None) is None:
        return
    with contextlib.suppress(OSError):
        shutil.rmtree(shared_root(factory))


@lru_cache(maxsize=1)
def python38() -> str | None:
    """A working Python 3.8 interpreter (on PATH, or pyenv's), or None."""
    found = [shutil.which("python3.8"), *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))]
    for candidate in filter(None, found):
        try:
            done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                  text=True, timeout=30)
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == "(3, 8)":
            return candidate
    return None


@pytest.fixture(scope="module", autouse=True)
def engine_threads() -> Iterator[int]:
    """An autouse fixture for the module that imports it: torch computes on the threads a served CPU model
    takes (``cpu_threads`` automatic: the CPUs less one), not on every CPU (on a shared machine, one thread per
    CPU spins waiting for the busiest); restored after."""
    import torch

    from backend_model.sessions.threads import auto_threads, available_cpus

    before = torch.get_num_threads()
    torch.set_num_threads(auto_threads(available_cpus(), 1))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def send(handler: http.server.BaseHTTPRequestHandler, body: bytes, content_type: str) -> None:
    """Answer a stand-in server's request with ``body`` (200)."""
    handler.send_response(200)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class Listener:
    """An OpenAI-compatible stand-in (listings, unstreamed completions) recording the headers of each request."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.requests: list[str] = []  # "GET /v1/models" ...
        got, asked = self.headers, self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.answer({"object": "list", "data": [{"id": "m", "object": "model"}]})

            def do_POST(self) -> None:  # /v1/completions, unstreamed
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.answer({"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": [
                    {"index": 0, "text": "ok", "finish_reason": "stop", "logprobs": None}]})

            def answer(self, reply: dict) -> None:
                got.append({k.lower(): v for k, v in self.headers.items()})
                asked.append(f"{self.command} {self.path}")
                send(self, json.dumps(reply).encode(), "application/json")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def seen(self) -> list[str | None]:
        """The Authorization header of each request (None: none sent)."""
        return [h.get("authorization") for h in self.headers]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def json_lines(result: Result) -> list[dict]:
    """The JSON object of each line of a command's stdout (whether it succeeded or not)."""
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def assert_one_line_error(result: Result, *needles: str) -> None:
    """The command failed (exit 1) with exactly one ``error:`` line holding every needle, and no traceback."""
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0]
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


# what a copy of the tree for building the wheel leaves out (local state, not the project)
LOCAL = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache", "llm_model_dir",
         "bench-results", "out")


def wheel_in_fresh_venv(tmp: Path) -> Path:
    """The wheel built from this tree, installed without its dependencies into a fresh venv under ``tmp``; its
    python."""
    source = tmp / "source"  # a copy: setuptools leaves build/ behind, and reuses a stale one
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(*LOCAL))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", str(tmp / "dist")],
                           cwd=source, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("qaic_console-*.whl")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(tmp / "venv")], check=True, timeout=300)
    python = tmp / "venv" / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], capture_output=True,
                          text=True, timeout=600, env=outside_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return python


def outside_env() -> dict[str, str]:
    """This process's environment without PYTHON* variables (a PYTHONPATH to the tree would shadow an install)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def site_packages(python: Path) -> Path:
    """The site-packages folder of ``python``'s environment."""
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", where], capture_output=True, text=True, check=True,
                               env=outside_env()).stdout.strip())


def write_qpc(root: Path, kv: bool = True) -> Path:
    """A QPC folder as QEfficient writes it: qpc/programqpc.bin, specializations.json beside qpc/."""
    (root / "qpc").mkdir(parents=True)
    (root / "qpc" / "programqpc.bin").write_bytes(b"\0QPC")
    symbols = {"batch_size": "1", "seq_len": "32", **({"ctx_len": "256"} if kv else {})}
    (root / "specializations.json").write_text(json.dumps({"specializations": [{"name": "Prefill",
                                                                                 "symbols": symbols}]}))
    return root


def consecutive_ports(count: int) -> int:
    """A free port whose next ``count - 1`` ports are free too (Triton's layout, which the consoles guess from one
    address: gRPC = HTTP + 1, metrics = HTTP + 2)."""
    from console.server.ports import free_port, port_in_use

    for _ in range(50):
        port = free_port()
        if port + count <= 65536 and not any(port_in_use(port + i) for i in range(1, count)):
            return port
    raise AssertionError(f"no {count} consecutive free ports")
