"""``make bench``'s CPU peer section (``console/bench/llama_cpp.py``): the served demo precision and llama.cpp's
``llama-server -np 8 -cb`` alternately, with fakes at the seams (the two load generators, the served tritonserver,
and the peer's process or a fake binary), and its build script's failure path."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from backend_model.sessions.threads import choose_threads
from console.bench import llama_cpp, streams
from console.bench import report as perf
from console.bench.engine import Timed
from console.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The served side and the peer's streams faked, each run taking the next of its side's seconds (warm-up, then
    the rounds at 1 and 8 streams): each call is recorded as (side, streams, tokens)."""
    calls: list[tuple] = []
    seconds = {"served": iter([9.0, 2.0, 1.0, 1.0, 4.0]), "llama_server": iter([9.0, 1.0, 4.0, 4.0, 2.0])}

    @contextlib.contextmanager
    def served_precision(precision: str):
        calls.append(("tritonserver", precision))
        yield SimpleNamespace(grpc_url="127.0.0.1:1", pid=os.getpgrp())

    def triton_streams(url, n, tokens, model, min_tokens=None):
        assert (url, model, min_tokens) == ("127.0.0.1:1", "smollm2_int4_stream", tokens)  # every token counts
        calls.append(("served", n, tokens))
        return Timed(n * tokens, next(seconds["served"]))

    def openai_streams(base_url, n, tokens, model):
        assert base_url.startswith("http://127.0.0.1:") and model == llama_cpp.LLAMA_MODEL
        calls.append(("llama_server", n, tokens))
        return Timed(n * tokens, next(seconds["llama_server"]))

    monkeypatch.setattr(streams, "served_precision", served_precision)
    monkeypatch.setattr(streams, "triton_streams", triton_streams)
    monkeypatch.setattr(streams, "openai_streams", openai_streams)
    return calls


@pytest.fixture
def peer_process(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The peer's process faked: what happened to it, in order."""
    events: list[str] = []
    monkeypatch.setenv("QAIC_LLAMA_SERVER", "/opt/llama/llama-server")
    monkeypatch.setattr(llama_cpp.LlamaServerPeer, "version", lambda self: "version: 1 (0c1e570)")
    def start(self) -> None:
        events.append("start")
        self.process = SimpleNamespace(pid=os.getpgrp(), poll=lambda: None)

    monkeypatch.setattr(llama_cpp.LlamaServerPeer, "start", start)
    monkeypatch.setattr(llama_cpp.LlamaServerPeer, "stop", lambda self: events.append("stop"))
    return events


def section(tokens: int = 16, repeats: int = 2) -> perf.Report:
    report = perf.Report()
    llama_cpp.llama_server_section(report, perf.ReportOptions(tokens=tokens, repeats=repeats), progress=lambda m: None)
    return report


def test_the_sides_alternate_at_1_and_8_streams_and_the_best_runs_make_the_ratios(served, peer_process) -> None:
    report = section(tokens=16, repeats=2)
    assert peer_process == ["start", "stop"]
    one_round = [(side, n, 16) for n in (1, 8) for side in ("served", "llama_server")]
    assert served == [("tritonserver", "int4"), ("served", 1, 4), ("llama_server", 1, 4), *one_round, *one_round]
    # the fastest of each side's rounds: served 16 tokens in 1 s (round 2), 128 in 1 s (round 1); llama-server
    # 16 in 1 s (round 1), 128 in 2 s (round 2)
    assert [report.context[f"{side}_{n}_tokens_per_s"] for n in (1, 8) for side in ("demo", "llama_server")] == [
        16, 16, 128, 64]
    assert report.ratios == {"demo_1_tokens_per_s": 16, "demo_1_over_llama_server": 1.0,
                             "demo_8_over_llama_server": 2.0}
    threads = choose_threads(0, 1)[0]
    assert report.context["llama_server"] == (  # -c: 8 x (512 + 16)
        f"llama.cpp's llama-server (version: 1 (0c1e570)) -np 8 -cb -c 4224 -t {threads} --ignore-eos, "
        f"{threads} thread{'s' * (threads != 1)} as the served model")
    assert report.context["demo_precision"] == "int4"
    assert report.context["llama_server_tokens_per_stream"] == {"served": 16, "llama_server": 16}
    busy = report.context["llama_server_cores_busy"]  # this process group's CPU seconds over the fake seconds
    assert list(busy) == ["served_1", "llama_server_1", "served_8", "llama_server_8"] and min(busy.values()) >= 0
    assert {perf.TARGETS[f"demo_{n}_over_llama_server"] for n in (1, 8)} == {(">=", 0.8), (">=", 1.0)}


def test_the_peer_runs_its_8_slots_on_the_served_models_threads_on_loopback(tmp_path: Path) -> None:
    peer = llama_cpp.LlamaServerPeer("/opt/llama/llama-server", tmp_path / "log", threads=3, tokens=64)
    command = peer.command()
    assert command[0] == "/opt/llama/llama-server" and command[command.index("-m") + 1].endswith(".gguf")
    assert " -np 8 -cb -c 4608 -t 3 --ignore-eos " in f" {' '.join(command)} "  # 8 x (512 prompt + 64 tokens)
    assert command[command.index("--host") + 1] == "127.0.0.1" and peer.base_url == f"http://127.0.0.1:{peer.port}/v1"


def test_a_peer_that_does_not_start_is_said_with_its_exit_code_and_its_words(served, monkeypatch, tmp_path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "version: 9 (abc1234)"; exit 0; }\n'
                      'echo "error: invalid argument: -cb" >&2\nexit 2\n')
    binary.chmod(0o755)
    monkeypatch.setenv("QAIC_LLAMA_SERVER", str(binary))
    report = section()
    said = report.context["llama_server"]
    assert said.startswith("it failed (exit code 2): llama-server did not answer at http://127.0.0.1:")
    assert said.endswith("/health: error: invalid argument: -cb")
    assert report.ratios == {} and served == []  # nothing measured, no tritonserver started


def test_a_peer_that_fails_mid_run_leaves_every_figure_out(served, peer_process, monkeypatch) -> None:
    def failing(base_url, n, tokens, model):
        raise RuntimeError("stream 3: unavailable: the connection was closed")

    monkeypatch.setattr(streams, "openai_streams", failing)
    report = section()
    assert report.context["llama_server"] == "it failed: stream 3: unavailable: the connection was closed"
    assert report.ratios == {} and peer_process == ["start", "stop"]


def test_a_served_side_that_fails_is_an_error_of_the_report(served, peer_process, monkeypatch) -> None:
    def failing(*args, **kwargs):
        raise RuntimeError("stream 0: the model is not ready")

    monkeypatch.setattr(streams, "triton_streams", failing)
    with pytest.raises(RuntimeError, match="the model is not ready"):
        section()
    assert peer_process == ["start", "stop"]


def test_a_failed_build_and_a_missing_binary_are_said(monkeypatch) -> None:
    monkeypatch.setenv("QAIC_LLAMA_SERVER", "")  # make bench: the build script printed no path
    assert section().context == {"llama_server": "its build failed: scripts/setup-llama-server.sh said why"}
    monkeypatch.delenv("QAIC_LLAMA_SERVER")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert section().context == {
        "llama_server": "not built: scripts/setup-llama-server.sh builds it (make bench runs it)"}


def test_bench_report_runs_the_sections_it_is_asked_for(monkeypatch) -> None:
    monkeypatch.setenv("QAIC_LLAMA_SERVER", "")
    result = CliRunner().invoke(main, ["bench", "report", "--section", "llama_server", "--json"])
    assert result.exit_code == 0, result.output
    context = json.loads(result.output)["context"]
    assert context["llama_server"].startswith("its build failed")
    assert "threads" not in context and "loop_overhead_ms" not in context  # the precision section did not run
    wrong = CliRunner().invoke(main, ["bench", "report", "--section", "nope"])
    assert wrong.exit_code == 2 and "'nope' is not one of 'precision', 'llama_server'" in wrong.output


def test_a_failing_build_step_names_its_log_and_shows_its_end(tmp_path: Path) -> None:
    python = tmp_path / "python"  # a Python whose pip cannot download the sources
    python.write_text("#!/bin/sh\necho 'Looking in indexes: https://pypi.org/simple'\n"
                      "echo 'ERROR: No matching distribution found for llama-cpp-python==0.3.36' >&2\nexit 3\n")
    python.chmod(0o755)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup-llama-server.sh")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": str(python), "QAIC_CONSOLE_CACHE": str(tmp_path)},
                          timeout=60)
    assert done.returncode == 1 and done.stdout == ""  # stdout is for the binary's path alone
    lines = done.stderr.splitlines()
    what = "downloading llama-cpp-python 0.3.36's sources (about 75 MB)"
    assert lines[0] == f"[setup-llama-server] {what}"
    log = next((tmp_path / "peers").glob("llama-server-0.3.36-*.build.log"))
    assert lines[1] == f"[setup-llama-server] failed: {what} (exit code 3); the end of {log}:"
    assert lines[2].startswith(f"  | === {what}: {python} -m pip download")
    assert lines[3:5] == ["  | Looking in indexes: https://pypi.org/simple",
                          "  | ERROR: No matching distribution found for llama-cpp-python==0.3.36"]
    assert re.fullmatch(rf"  \| === {re.escape(what)}: exit code 3 after [01] s", lines[5]) and len(lines) == 6
