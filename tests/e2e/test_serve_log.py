"""What ``serve`` and ``web`` print on the terminal: tritonserver's log condensed (``--raw-log``: as it is), and the
web's server becoming ready or stopping."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from console.server import free_port

pytestmark = pytest.mark.server
ROOT = Path(__file__).resolve().parents[2]
CONSOLE = [sys.executable, "-u", "-c", "from console.cli import main; main()"]


def run_until(cmd: list[str], ready: str, timeout: float = 300) -> tuple[list[str], int]:
    """Run ``cmd`` until a line contains ``ready``, then SIGTERM it; its lines (stdout and stderr) and exit code."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if ready in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return lines + rest.splitlines(), proc.returncode


def test_serve_prints_the_log_condensed_and_raw_when_asked(echo_repo: Path) -> None:
    serve = [*CONSOLE, "serve", "--model-repository", str(echo_repo), "--timeout", "120"]
    condensed, code = run_until(serve, "press Ctrl-C")
    assert code == 0 and condensed[-1] == "stopped", condensed
    assert any(line.endswith("successfully loaded 'echo'") for line in condensed), condensed
    assert any("Started HTTPService at 127.0.0.1:" in line for line in condensed)
    assert not [line for line in condensed if line.startswith(("+---", "| "))], "Triton's tables are left out"
    raw, code = run_until([*serve, "--raw-log"], "press Ctrl-C")
    assert code == 0 and any(line.startswith("+---") for line in raw) and "| echo  | 1       | READY  |" in raw


def test_web_says_on_the_terminal_when_its_server_is_ready_and_stopped(echo_repo: Path) -> None:
    web = [*CONSOLE, "web", "--model-repository", str(echo_repo), "--port", str(free_port())]
    lines, code = run_until(web, "started here (pid")
    assert any(line.startswith("tritonserver ") and "started here (pid" in line for line in lines), lines
    assert any(line.startswith("tritonserver stopped") for line in lines), lines
    assert not [line for line in lines if "Traceback" in line or line.startswith("error:")], lines
    # SIGTERM is a clean stop: said calmly (not Gradio's "Keyboard interruption in main thread...", nor the advice to
    # start it again that the page gives after its Stop button)
    assert code == 0 and lines[-1] == "tritonserver stopped", lines
    assert not [line for line in lines if "interruption" in line or "expired" in line], lines
