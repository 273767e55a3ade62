"""Real vLLM for the peer tier: its venv (``scripts/setup-vllm.sh``) and its OpenAI-compatible server."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

from backend_model.models import cache_root

MAX_MODEL_LEN = 1024
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2"}  # GiB of KV cache (vLLM's CPU default would take far more)


def vllm_venv() -> Path:
    """``$VLLM_VENV``, else where scripts/setup-vllm.sh puts it."""
    return Path(os.environ.get("VLLM_VENV") or cache_root() / "peers" / "vllm-venv")


class VllmServer:
    """vLLM's OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``: the wheel's ``vllm``
    script fails) on a free loopback port, its own process group; its output goes to ``log``."""

    def __init__(self, venv: Path, model: Path, log: Path, args: Sequence[str] = ()) -> None:
        """``args``: more of the server's flags (an embedding model's ``--runner pooling``)."""
        from console.server import free_port

        self.venv, self.model, self.log, self.args = venv, model, log, list(args)
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.root}/v1"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 900.0) -> None:
        """Start it and wait until ``/v1/models`` answers; fails with the log's tail when it does not."""
        cmd = [str(self.venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model",
               str(self.model), "--max-model-len", str(MAX_MODEL_LEN), "--host", "127.0.0.1", "--port", str(self.port),
               *self.args]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                            env={**os.environ, **VLLM_ENV})
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        self.started_in = time.monotonic() - t0
                        return
            except OSError:
                time.sleep(0.5)
        tail = self.log.read_text(errors="replace")[-3000:]
        self.stop()
        pytest.fail(f"vLLM's server did not answer at {self.base_url}:\n{tail}")

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.root}{path}", timeout=30) as resp:
            return json.loads(resp.read())

    def post(self, path: str, body: dict) -> dict:
        """POST ``body``; the JSON answer, an error's included."""
        request = urllib.request.Request(f"{self.root}{path}", data=json.dumps({"model": str(self.model), **body})
                                         .encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read())

    def metric(self, name: str) -> float:
        """The sum of a Prometheus metric's samples (``vllm:num_requests_running``, ...)."""
        with urllib.request.urlopen(f"{self.root}/metrics", timeout=10) as resp:
            lines = resp.read().decode().splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name + "{"))

    def stop(self) -> None:
        """SIGTERM its process group (the server, its engine core and workers), SIGKILL what is left after 30 s."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(15)
        self.process = None
