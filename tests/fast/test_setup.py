"""``scripts/setup.sh`` (what ``make run`` and ``make test`` run first) and the project metadata it installs."""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_project_metadata_applies_without_a_deprecation_warning() -> None:
    """What the build backend does with pyproject.toml; a license given as a TOML table printed a page of warning
    in every install."""
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [str(w.message).splitlines()[0] for w in caught] == []
    assert dist.metadata.license_expression == "Apache-2.0"
    assert 'requires = ["setuptools>=77"]' in (ROOT / "pyproject.toml").read_text()  # the first that reads SPDX


def test_a_failing_step_names_its_log_and_shows_its_end(tmp_path: Path) -> None:
    python = tmp_path / "python"  # a Python that cannot make the virtual environment
    python.write_text("#!/bin/sh\necho 'looking for ensurepip'\necho 'Error: no ensurepip here' >&2\nexit 3\n")
    python.chmod(0o755)
    venv = tmp_path / "venv"
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], env={"PATH": "/usr/bin:/bin",
                          "PYTHON": str(python), "QAIC_VENV": str(venv)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == f"[setup] creating {venv}\n"  # the step, not what the tool printed
    log = venv / "setup.log"
    assert done.stderr.splitlines() == [
        f"[setup] failed: creating {venv} (exit code 3); the end of {log}:",
        f"  | === creating {venv}: {python} -m venv {venv}",
        "  | looking for ensurepip",
        "  | Error: no ensurepip here",
    ]
    assert "Error: no ensurepip here" in log.read_text()
