"""llama.cpp's server on the embedded GGUF beside the served demo samples' precision, measured alternately.

The server is llama-cpp-python's (``python -m llama_cpp.server``, in the llama extra): it runs on as many
threads as a served CPU model (``cpu_threads`` automatic) and answers one request at a time (it has no
parallel decoding), so its 8-stream figure is its single stream shared by eight; the report says so.
``QAIC_LLAMA_CPP_ARGS`` adds server flags (e.g. ``--n_batch 1 --n_ubatch 1`` where llama.cpp's batched
kernels fail on the CPU); a server that fails leaves the section's figures n/a and says why.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

LLAMA_MODEL = "smollm2-gguf"  # the alias the server lists the embedded GGUF under
INSTALL = "pip install 'llama-cpp-python[server]' (the llama extra; its first install compiles llama.cpp)"


def available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


class LlamaCppServer:
    """``python -m llama_cpp.server`` on the embedded GGUF on a free loopback port; its output goes to ``log``."""

    def __init__(self, log: Path, threads: int = 1, extra: tuple[str, ...] = ()) -> None:
        from console.server import free_port

        self.log, self.threads, self.extra = log, threads, extra
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        from backend_model.models import embedded_gguf

        # interrupt_requests off: by default a new request cuts the stream in flight short (a|b, load levels)
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf()), "--model_alias",
                LLAMA_MODEL, "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "2048",
                "--n_threads", str(self.threads), "--interrupt_requests", "False", *self.extra]

    def start(self, timeout: float = 120.0) -> None:
        """Start it and wait until ``/v1/models`` answers; RuntimeError with the log's tail when it does not."""
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        tail = self.text()[-2000:]
        self.stop()
        raise RuntimeError(f"llama.cpp's server did not answer at {self.base_url}:\n{tail}")

    def text(self) -> str:
        """What the server printed so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(15)
        self.process = None


class ReferenceFailed(Exception):
    """llama.cpp's server failed: the section says so and measures nothing (the served side's errors go on)."""


def reference(measure: Callable[..., Any], *args: Any) -> Any:
    """``measure(*args)`` on llama.cpp's side; its RuntimeError becomes ReferenceFailed."""
    try:
        return measure(*args)
    except RuntimeError as exc:
        raise ReferenceFailed(" ".join(str(exc).split())[:300]) from None


def llama_section(report: Any, opts: Any, progress: Callable[[str], None]) -> None:
    """The demo samples' precision served (gRPC streams) and llama.cpp's server (streamed completions) on the
    same GGUF, alternately at 1 and 8 streams (``demo_*``: the samples smollm2_decoupled and smollm2_kv)."""
    from backend_model.threads import choose_threads
    from repo_gen.samples import SAMPLES

    from .report import STREAMS, best_rate, ratio
    from .streams import openai_streams, served_model, served_precision, triton_streams

    precision = SAMPLES["smollm2_decoupled"].precision
    if not available():
        report.context["llama_cpp"] = f"not installed: {INSTALL}"
        return
    threads, _ = choose_threads(0, 1)  # what a served CPU model alone takes
    extra = tuple(shlex.split(os.environ.get("QAIC_LLAMA_CPP_ARGS", "")))
    runs: dict[str, list] = {}
    with tempfile.TemporaryDirectory(prefix="qaic-report-llama-") as tmp:
        llama = LlamaCppServer(Path(tmp) / "llama.log", threads, extra)
        progress(f"llama.cpp: starting its server on the embedded GGUF ({threads} threads) ...")
        try:
            reference(llama.start)
            with served_precision(precision) as server:
                url, name = server.grpc_url, served_model(precision)
                triton_streams(url, 1, 4, name)  # warm-up
                reference(openai_streams, llama.base_url, 1, 4, LLAMA_MODEL)
                for i in range(opts.repeats):
                    progress(f"llama.cpp round {i + 1}/{opts.repeats}: served {precision} and llama.cpp x1 and x8 ...")
                    for n in STREAMS:
                        runs.setdefault(f"served_{n}", []).append(triton_streams(url, n, opts.tokens, name))
                        runs.setdefault(f"llama_{n}", []).append(
                            reference(openai_streams, llama.base_url, n, opts.tokens, LLAMA_MODEL))
        except ReferenceFailed as exc:
            exit_code = None if llama.process is None else llama.process.poll()
            report.context["llama_cpp"] = (f"its server failed (exit code {exit_code}): {exc}; "
                                           "QAIC_LLAMA_CPP_ARGS adds server flags")
            return
        finally:
            llama.stop()
    best = {key: best_rate(timed) for key, timed in runs.items()}
    report.ratios["demo_1_tokens_per_s"] = best["served_1"]
    for n in STREAMS:
        report.ratios[f"demo_{n}_over_llama_cpp"] = ratio(best[f"served_{n}"], best[f"llama_{n}"])
        report.context[f"demo_{n}_tokens_per_s"] = round(best[f"served_{n}"], 1)
        report.context[f"llama_cpp_{n}_tokens_per_s"] = round(best[f"llama_{n}"], 1)
    report.context["demo_precision"] = precision
    report.context["llama_cpp"] = (f"llama-cpp-python's server, {threads} threads{' ' if extra else ''}"
                                   f"{shlex.join(extra)}; one request at a time, so its 8 streams share one")
