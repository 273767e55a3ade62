"""``scripts/setup.sh`` (what ``make run`` and ``make test`` run first) and the project metadata it installs."""

from __future__ import annotations

import re
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
    *said, timed = done.stderr.splitlines()
    assert said == [
        f"[setup] failed: creating {venv} (exit code 3); the end of {log}:",
        f"  | === creating {venv}: {python} -m venv {venv}",
        "  | looking for ensurepip",
        "  | Error: no ensurepip here",
    ]
    assert re.fullmatch(rf"  \| === creating {re.escape(str(venv))}: exit code 3 after [01] s", timed)
    assert "Error: no ensurepip here" in log.read_text()


def run_setup(venv: Path, *args: str) -> subprocess.CompletedProcess:
    """``scripts/setup.sh args`` on ``venv`` (a folder with a stand-in python), from a bare PATH."""
    return subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/usr/sbin:/bin", "QAIC_VENV": str(venv)}, timeout=60)


def stamped_venv(tmp_path: Path, level: str) -> Path:
    """A venv folder whose stamp says setup ran at ``level`` ('', '--tools', '--test') for today's files."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")
    (venv / "bin" / "python").chmod(0o755)
    names = ("pyproject.toml", "scripts/setup.sh", "scripts/setup-lib.sh")  # what the stamp's digest covers
    files = b"".join((ROOT / name).read_bytes() for name in names)
    digest = subprocess.run(["sha256sum"], input=files, capture_output=True, check=True).stdout.decode()[:16]
    (venv / ".qaic-setup").write_text(f"{digest}{level}\n")
    return venv


def test_a_test_setup_covers_the_tools_and_the_plain_setup(tmp_path: Path) -> None:
    """``make test-fast`` and ``make docs`` after ``make test`` install nothing (and build no llama.cpp)."""
    venv = stamped_venv(tmp_path, "--test")
    for level in ((), ("--tools",), ("--test",)):
        done = run_setup(venv, *level)
        assert (done.returncode, done.stdout) == (0, f"[setup] ready: {venv}\n"), done.stderr


def test_the_tools_level_does_not_cover_the_llama_build(tmp_path: Path) -> None:
    """``make test`` after ``make test-fast`` installs (the llama.cpp peer is what it adds)."""
    venv = stamped_venv(tmp_path, "--tools")
    assert run_setup(venv, "--tools").stdout == f"[setup] ready: {venv}\n"
    done = run_setup(venv, "--test")
    assert done.stdout.startswith(f"[setup] installing into {venv}")
    assert done.returncode == 1  # the stand-in venv has no pip: the first install step fails, as it should


def test_an_unknown_level_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = run_setup(tmp_path / "venv", "--tset")
    assert (done.returncode, done.stderr) == (2, "usage: scripts/setup.sh [--tools|--test]\n")
    assert not (tmp_path / "venv").exists()


def test_the_installer_is_given_pips_sources(tmp_path: Path) -> None:
    """uv reads no pip config: the find-links that hold the CPU torch on disk, the extra indexes and the
    constraints are passed on, from pip's config files and its PIP_* variables alike; other settings are not."""
    pip = tmp_path / "pip"
    pip.write_text("#!/bin/sh\n[ \"$*\" = 'config list' ] || exit 9\ncat <<'END'\n"
                   "global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
                   "global.constraint='/etc/xdg/pip/constraints.txt'\n"
                   "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'\n"
                   "install.index-url='https://mirror.example/simple'\n"
                   ":env:.find-links='/opt/wheels'\nEND\n")
    pip.chmod(0o755)
    done = subprocess.run(["bash", "-c", f". {ROOT / 'scripts' / 'setup-lib.sh'} && pip_sources {pip}"],
                          capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.splitlines() == [
        "--constraint", "/etc/xdg/pip/constraints.txt",
        "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
        "--index-url", "https://mirror.example/simple", "--find-links", "/opt/wheels",
    ]
