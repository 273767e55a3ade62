"""``qaic-console serve`` keeps serving through faults injected from another process (real tritonserver, real
model): tritonserver SIGKILLed mid-stream, its backend stub SIGSTOPped, tritonserver itself SIGSTOPped. Each time
the same greedy answer comes back on the same ports within a minute, serve says what happened in one line, prints
no traceback, and the shared memory of the stubs it lost does not stay in /dev/shm."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import wait_until

from console.clients import GenerationParams, Timeouts, stream
from console.server.procs import cmdline, group_members, parent
from console.server.stubs import Stubs
from repo_gen.samples import write_samples

pytestmark = pytest.mark.server
MODEL = "smollm2_decoupled"
ROOT = Path(__file__).resolve().parents[2]
BACK_WITHIN = 60.0  # s from a fault to the same answer again


def answer(url: str) -> str:
    replies = stream(url, MODEL, ["My name is"], GenerationParams(max_tokens=8), Timeouts(network=60)).replies()
    return replies[0].text if replies[0].ok else ""


@dataclass
class Serving:
    """A ``serve`` process, what it printed, and every stub's shared-memory region seen."""

    proc: subprocess.Popen[str]
    reader: threading.Thread | None = None
    lines: list[str] = field(default_factory=list)
    regions: set[Path] = field(default_factory=set)
    grpc_url: str = ""
    greedy: str = ""

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def said(self, needle: str, since: int = 0) -> list[str]:
        return [line for line in self.lines[since:] if needle in line]

    def guard(self) -> int:
        children = (int(e) for e in os.listdir("/proc") if e.isdigit() and parent(int(e)) == self.proc.pid)
        return next(p for p in children if any(a.endswith("guard.py") for a in cmdline(p)))

    def tritonserver(self) -> int:
        guard = self.guard()
        return next(p for p in group_members(guard) if parent(p) == guard)

    def stub(self) -> int:
        stubs = Stubs.of(self.guard())
        self.regions |= stubs.regions
        return next(pid for name, pid in stubs.instances.items() if name.startswith(MODEL))

    def says(self, *needles: str, since: int) -> None:
        """Wait until serve says one of ``needles`` (it says so once it sees the server ready, which a client can
        see a little sooner)."""
        wait_until(lambda: any(self.said(n, since) for n in needles), 30, f"serve to say {' or '.join(needles)!r}",
                   lambda: "it said:\n" + "\n".join(self.lines[since:][-20:]))

    def back_after(self, started: float) -> float:
        """Seconds from ``started`` until the same greedy answer comes again (polled)."""
        wait_until(lambda: self._answers(), BACK_WITHIN + 30, "the same answer again")
        return time.monotonic() - started

    def _answers(self) -> bool:
        try:
            return answer(self.grpc_url) == self.greedy
        except Exception:  # tritonclient raises while the server restarts
            return False


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    repo = tmp_path_factory.mktemp("supervised_repo")
    write_samples((MODEL,), repo)
    cmd = [sys.executable, "-u", "-c", "from console.cli import main; main()", "serve", "--model-repository", str(repo)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    serving = Serving(proc)
    serving.reader = threading.Thread(target=serving.read, daemon=True)
    serving.reader.start()
    try:
        wait_until(lambda: serving.said("press Ctrl-C") or proc.poll() is not None, 600, "serve ready")
        (grpc_line,) = [line for line in serving.lines if re.match(r"\s+gRPC\s", line)]
        serving.grpc_url = grpc_line.split()[-1]
        serving.greedy = answer(serving.grpc_url)
        assert serving.greedy.strip(), "no first answer"
        serving.stub()  # its region seen
        yield serving
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def test_tritonserver_killed_mid_stream_is_said_once_and_restarted_on_the_same_ports(serving: Serving) -> None:
    since = len(serving.lines)
    events = iter(stream(serving.grpc_url, MODEL, ["Once upon a time"], GenerationParams(max_tokens=400),
                         Timeouts(network=120, idle=60)))
    next(events)  # text is coming
    serving.stub()
    pid = serving.tritonserver()
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    failure = list(events)[-1]
    assert failure.kind == "connection" and "the server went away" in failure.message, failure
    assert "HTTP port" not in failure.message, failure.message  # it was the gRPC port: the server died
    took = serving.back_after(killed)
    assert took < BACK_WITHIN, f"back after {took:.0f} s"
    (said,) = serving.said("killed by SIGKILL", since)
    assert re.search(r"tritonserver \(pid \d+\) exited with code -9 \(killed by SIGKILL\): restarting it in 1 s on "
                     r"the same models and ports \(1 of 5\)", said), said
    serving.says("tritonserver restarted: ", since=since)


def test_a_stopped_stub_is_reported_unresponsive_and_replaced(serving: Serving) -> None:
    since = len(serving.lines)
    pid = serving.stub()
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    took = serving.back_after(stopped)
    assert took < BACK_WITHIN, f"back after {took:.0f} s"
    (said,) = serving.said(f"its Python backend stub (pid {pid})", since)
    assert "is stopped (SIGSTOP) and does not answer" in said and "died" not in said, said
    # replaced and reloaded (should tritonserver abort meanwhile, as it may on a stub it lost, it is restarted)
    serving.says("reloaded; it serves again", "tritonserver restarted: ", since=since)


def test_a_stopped_tritonserver_is_restarted(serving: Serving) -> None:
    since = len(serving.lines)
    serving.stub()
    os.kill(serving.tritonserver(), signal.SIGSTOP)
    stopped = time.monotonic()
    took = serving.back_after(stopped)
    assert took < BACK_WITHIN, f"back after {took:.0f} s"
    (said,) = serving.said("is stopped (SIGSTOP)", since)
    assert "restarting it in" in said and "on the same models and ports" in said, said


def test_serve_stops_cleanly_with_no_traceback_and_no_shared_memory_left(serving: Serving) -> None:
    serving.stub()
    serving.proc.send_signal(signal.SIGTERM)
    assert serving.proc.wait(60) == 0
    assert serving.reader is not None
    serving.reader.join(10)
    assert serving.lines[-1] == "stopped"
    assert not serving.said("Traceback"), "\n".join(serving.lines[-40:])
    assert len(serving.regions) >= 3  # the stubs of the first server, of the reload and of the restarts
    left = sorted(str(r) for r in serving.regions if r.exists())
    assert not left, f"shared memory left behind: {left}"
