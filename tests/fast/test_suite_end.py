"""The session's end keeps failures visible: an unreadable pytest-textual-snapshot record (a write that failed
part way, as on a full disk) is said and fails the run, instead of crashing the plugin before pytest's summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SPOIL = """
import os, pathlib, pytest

@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    (pathlib.Path(os.environ["TEXTUAL_SNAPSHOT_TEMPDIR"]) / "spoiled").write_bytes(b"")
"""


def test_an_empty_snapshot_record_fails_the_run_with_pytests_summary(tmp_path: Path) -> None:
    (tmp_path / "spoil.py").write_text(SPOIL)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "spoil",
                          "tests/fast/test_tui_snapshots.py::test_snapshot_server_pane"],
                         capture_output=True, text=True, timeout=300, cwd=TESTS.parent, env=env)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "unreadable snapshot record" in run.stdout and "EOFError" in run.stdout, run.stdout
    assert "1 passed" in run.stdout and "INTERNALERROR" not in run.stdout + run.stderr, run.stdout + run.stderr
