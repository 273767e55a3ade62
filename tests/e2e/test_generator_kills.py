"""A generator killed mid-write (SIGKILL) leaves nothing that ``repo list`` or ``serve`` chokes on.

Each run is a real ``generate-llm-model-repo --force`` process that SIGKILLs itself at its N-th executed line
of the writer, the staging module or shutil (the copy): points drawn at random over the whole write, then one
in the middle of the copy, whose leftover a real ``serve`` then meets.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from helpers import SESSION_MARK, marked_servers

from repo_gen import staging
from repo_gen.inspection import list_models

ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2_kv"
RUNS = 30
KILLER = """
import os, shutil, signal, sys
from repo_gen import command, staging, writer

at, seen, files = int(sys.argv[1]), 0, {writer.__file__, staging.__file__, shutil.__file__}

def trace(frame, event, arg):
    global seen
    if frame.f_code.co_filename not in files:
        return None
    if event == "line":
        seen += 1
        if seen == at:
            os.kill(os.getpid(), signal.SIGKILL)
    return trace

sys.settrace(trace)
code = command.main(sys.argv[2:])
sys.settrace(None)
print(f"lines {seen}", file=sys.stderr)
sys.exit(code)
"""


def generate(repo: Path, at: int = 0) -> subprocess.CompletedProcess[str]:
    """``generate-llm-model-repo --model_name smollm2_kv --force`` killed at its ``at``-th line (0: never)."""
    return subprocess.run([sys.executable, "-c", KILLER, str(at), "--model_name", MODEL, "-o", str(repo), "--force"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def assert_listable(repo: Path) -> None:
    """The repository lists cleanly: the model is there and valid, or a leftover says it holds it."""
    models = list_models(repo)
    assert [m.name for m in models] in ([MODEL], []) and all(m.valid for m in models), [m.problems for m in models]
    lines = staging.leftovers(repo)
    assert all("left by a killed generator run" in line for line in lines), lines
    assert models or any(f"it holds {MODEL}" in line for line in lines), lines


@pytest.mark.server
def test_sigkill_at_any_point_of_a_force_write_leaves_nothing_serve_chokes_on(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    first = generate(repo)
    assert first.returncode == 0, first.stderr
    lines = int(generate(repo).stderr.split("lines ")[-1])  # a --force write, from start to end
    seed = random.randrange(1 << 30)
    points = sorted(random.Random(seed).sample(range(1, lines + 1), min(RUNS, lines)))
    for at in points:
        killed = generate(repo, at)
        assert killed.returncode == -signal.SIGKILL, (seed, at, killed.stderr)
        assert_listable(repo)
    assert generate(repo, lines // 2).returncode == -signal.SIGKILL  # in the middle of the copy
    left = staging.leftovers(repo)
    assert len(left) == 1 and (repo / MODEL).is_dir(), left
    holder = left[0].split(":")[0]

    mark = uuid.uuid4().hex
    # Ctrl-C as a terminal's user sends it: with Python's SIGINT handler, whatever this process's is
    start = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "from console.cli import main; main()")
    cmd = [sys.executable, "-c", start, "serve", "--model-repository", str(repo)]
    serve = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                             env={**os.environ, SESSION_MARK: mark})
    said = []
    try:
        for line in serve.stdout:  # until it is ready, or it exits
            said.append(line)
            if "press Ctrl-C to stop" in line:
                break
        assert f"  model {MODEL}: READY\n" in said, "".join(said[-20:])
        assert any(f"qaic-console: ignoring {holder}: left by a killed generator run" in s for s in said), said[-20:]
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            rest = serve.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            serve.kill()
            rest = serve.communicate()[0] + "(killed: still running 60 s after Ctrl-C)\n"
        for pid, _ in marked_servers(mark):  # what a failure left
            os.kill(pid, signal.SIGKILL)
    assert "\nstopped\n" in "\n" + rest, rest[-2000:]  # Ctrl-C stops it

    done = generate(repo)  # the next run sweeps the leftover and says so
    assert done.returncode == 0 and f"note: removed {holder}" in done.stderr, done.stderr
    assert sorted(p.name for p in repo.iterdir()) == [MODEL]
