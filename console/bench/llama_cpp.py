"""llama.cpp on the embedded GGUF on a free loopback port: llama-cpp-python's server (what the tests talk to) and
llama.cpp's own ``llama-server``, the CPU peer ``make bench`` measures the served demo samples against.

The peer is ``llama-server -np 8 -cb`` (8 slots, continuous batching) built once by
``scripts/setup-llama-server.sh`` from the llama.cpp that llama-cpp-python's sources vendor; ``make bench`` passes its
path as ``QAIC_LLAMA_SERVER`` (otherwise the PATH's ``llama-server``). It runs on as many threads as a served CPU
model (``cpu_threads`` automatic) and ignores the end-of-sequence token, as the served side gets ``min_tokens``: each
stream makes the same number of tokens on both sides (the context says so, and how many cores each side's
processes kept busy: on a shared machine a side with more threads of its own may get more). A peer that is
missing, failed to build or fails to serve leaves the section's figures n/a and says why; the rest of the report
goes on.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backend_model.models import embedded_gguf
from backend_model.sessions.threads import choose_threads
from console.server import free_port
from repo_gen.samples import SAMPLES

from . import streams
from .instances import group_cpu_seconds
from .verdicts import STREAMS, best_rate, ratio

LLAMA_MODEL = "smollm2-gguf"  # the alias the servers list the embedded GGUF under
PARALLEL = 8  # llama-server's slots
PROMPT_ROOM = 512  # context tokens per slot for a prompt (the bench prompts are far shorter)
SIDES = ("served", "llama_server")  # each round's order at each stream count
LLAMA_SERVER_TARGETS = {  # key -> (comparison, threshold)
    "demo_1_tokens_per_s": (">=", 100.0),
    "demo_1_over_llama_server": (">=", 0.8),
    "demo_8_over_llama_server": (">=", 1.0),
}
LLAMA_SERVER_LABELS = {
    "demo_1_tokens_per_s": "served demo precision, 1 stream, tokens/s",
    "demo_1_over_llama_server": "served demo precision 1 stream ÷ llama-server -np 8 -cb",
    "demo_8_over_llama_server": "served demo precision 8 streams ÷ llama-server -np 8 -cb",
}


class LlamaCppServer:
    """``python -m llama_cpp.server`` on the embedded GGUF on a free loopback port; its output goes to ``log``."""

    name = "llama.cpp's server"
    ready = "/v1/models"  # answers 200 once the model is loaded

    def __init__(self, log: Path, threads: int = 1) -> None:
        self.log, self.threads = log, threads
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None  # when it ended by itself

    def command(self) -> list[str]:
        # interrupt_requests off: by default a new request cuts the stream in flight short (a|b, load levels)
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf()), "--model_alias",
                LLAMA_MODEL, "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "2048",
                "--n_threads", str(self.threads), "--interrupt_requests", "False"]

    def start(self, timeout: float = 120.0) -> None:
        """Start it and wait until ``ready`` answers; RuntimeError with the log's tail when it does not."""
        with self.log.open("wb") as out:
            try:
                self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                                start_new_session=True)
            except OSError as exc:
                raise RuntimeError(f"{self.name} did not start: {exc}") from None
        url = f"http://127.0.0.1:{self.port}{self.ready}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.exit_code = self.process.poll()
        tail = self.text()[-2000:]
        self.stop()
        raise RuntimeError(f"{self.name} did not answer at {url}:\n{tail}")

    def ended(self) -> int | None:
        """Its exit code if it ended by itself, else None."""
        return self.exit_code if self.process is None else self.process.poll()

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


class LlamaServerPeer(LlamaCppServer):
    """llama.cpp's ``llama-server`` at ``binary``: ``PARALLEL`` slots with continuous batching, each with room for a
    bench prompt and ``tokens`` generated tokens, on ``threads`` threads."""

    name = "llama-server"
    ready = "/health"

    def __init__(self, binary: str, log: Path, threads: int, tokens: int) -> None:
        super().__init__(log, threads)
        self.binary = binary
        self.flags = ["-np", str(PARALLEL), "-cb", "-c", str(PARALLEL * (PROMPT_ROOM + tokens)), "-t", str(threads),
                      "--ignore-eos"]

    def command(self) -> list[str]:
        return [self.binary, "-m", str(embedded_gguf()), "--alias", LLAMA_MODEL, *self.flags, "--host", "127.0.0.1",
                "--port", str(self.port)]

    def version(self) -> str:
        """What ``--version`` says (its build number and commit), on one line."""
        try:
            done = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"{self.name} --version failed: {exc}") from None
        said = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} --version failed (exit code {done.returncode}): {said[-300:]}")
        return "; ".join(line.strip() for line in said.splitlines() if line.startswith(("version", "built")))


def peer_binary() -> tuple[str | None, str]:
    """llama-server's path (``QAIC_LLAMA_SERVER``, else the PATH's), or None and why there is none."""
    if "QAIC_LLAMA_SERVER" in os.environ:
        path = os.environ["QAIC_LLAMA_SERVER"]
        return (path, "") if path else (None, "its build failed: scripts/setup-llama-server.sh said why")
    found = shutil.which("llama-server")
    return found, "" if found else "not built: scripts/setup-llama-server.sh builds it (make bench runs it)"


class ReferenceFailed(Exception):
    """The peer failed: the section says so and measures nothing (the served side's errors go on)."""


def reference(measure: Callable[..., Any], *args: Any) -> Any:
    """``measure(*args)`` on the peer's side; its RuntimeError becomes ReferenceFailed."""
    try:
        return measure(*args)
    except RuntimeError as exc:
        raise ReferenceFailed(" ".join(str(exc).split())[:300]) from None


def alternate(measure: Callable[[str, int], Any], repeats: int, progress: Callable[[str], None]) -> dict[str, list]:
    """``repeats`` rounds of, at 1 and 8 streams, each of ``SIDES`` in turn (``measure(side, streams)``): the runs
    by ``{side}_{streams}``."""
    runs: dict[str, list] = {}
    for i in range(repeats):
        progress(f"llama-server round {i + 1}/{repeats}: served and llama-server x1 and x8 ...")
        for n in STREAMS:
            for side in SIDES:
                runs.setdefault(f"{side}_{n}", []).append(measure(side, n))
    return runs


def llama_server_section(report: Any, opts: Any, progress: Callable[[str], None]) -> None:
    """The demo samples' precision served (gRPC streams) and llama-server (streamed completions) on the same GGUF
    and threads, alternately at 1 and 8 streams (``demo_*``: the samples smollm2_decoupled and smollm2_kv)."""

    precision = SAMPLES["smollm2_decoupled"].precision
    binary, why = peer_binary()
    if binary is None:
        report.context["llama_server"] = why
        return
    threads, _ = choose_threads(0, 1)  # what a served CPU model alone takes
    on_threads = f"{threads} thread{'s' * (threads != 1)}"
    with tempfile.TemporaryDirectory(prefix="qaic-report-llama-server-") as tmp:
        peer = LlamaServerPeer(binary, Path(tmp) / "llama-server.log", threads, opts.tokens)
        progress(f"llama-server: starting it on the embedded GGUF ({on_threads}) ...")
        try:
            version = reference(peer.version)
            reference(peer.start)
            runs, cores = _side_by_side(peer, precision, opts, progress)
        except ReferenceFailed as exc:
            code = peer.ended()
            report.context["llama_server"] = f"it failed{'' if code is None else f' (exit code {code})'}: {exc}"
            return
        finally:
            peer.stop()
    best = {key: best_rate(timed) for key, timed in runs.items()}
    report.ratios["demo_1_tokens_per_s"] = best["served_1"]
    for n in STREAMS:
        report.ratios[f"demo_{n}_over_llama_server"] = ratio(best[f"served_{n}"], best[f"llama_server_{n}"])
        report.context[f"demo_{n}_tokens_per_s"] = round(best[f"served_{n}"], 1)
        report.context[f"llama_server_{n}_tokens_per_s"] = round(best[f"llama_server_{n}"], 1)
    report.context["demo_precision"] = precision
    report.context["llama_server_tokens_per_stream"] = {  # the fewest of any run: opts.tokens when none ended sooner
        side: min(t.tokens / n for n in STREAMS for t in runs[f"{side}_{n}"]) for side in SIDES}
    report.context["llama_server_cores_busy"] = {key: round(sum(c) / len(c), 2) for key, c in cores.items()}
    report.context["llama_server"] = (f"llama.cpp's llama-server ({version}) {shlex.join(peer.flags)}, "
                                      f"{on_threads} as the served model")


def _side_by_side(peer: LlamaServerPeer, precision: str, opts: Any,
                  progress: Callable[[str], None]) -> tuple[dict[str, list], dict[str, list[float]]]:
    """A tritonserver serving ``precision`` beside the running peer, warmed up, then :func:`alternate`: the runs,
    and the cores each side's processes kept busy in each run (their CPU seconds over its wall time)."""

    cores: dict[str, list[float]] = {}
    with streams.served_precision(precision) as server:
        url, name = server.grpc_url, streams.served_model(precision)
        assert peer.process is not None, "the peer is started first"
        groups = {"served": server.pid, "llama_server": peer.process.pid}  # each started in a session of its own

        def run(side: str, n: int, tokens: int) -> Any:
            if side == "served":
                return streams.triton_streams(url, n, tokens, name, min_tokens=tokens)
            return reference(streams.openai_streams, peer.base_url, n, tokens, LLAMA_MODEL)

        def measure(side: str, n: int) -> Any:
            before = group_cpu_seconds(groups[side])
            timed = run(side, n, opts.tokens)
            cores.setdefault(f"{side}_{n}", []).append((group_cpu_seconds(groups[side]) - before) / timed.seconds)
            return timed

        for side in SIDES:
            run(side, 1, 4)  # warm-up
        return alternate(measure, opts.repeats, progress), cores
