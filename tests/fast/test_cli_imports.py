"""What loading the ``qaic-console`` command costs: not torch (the agreement check imports it when a check runs), so
every ``qaic-console`` process, and every test that starts one, starts in seconds."""

from __future__ import annotations

import subprocess
import sys


def test_the_command_line_loads_without_torch() -> None:
    code = "import sys; from console.cli import main; print(sorted(m for m in ('torch',) if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
