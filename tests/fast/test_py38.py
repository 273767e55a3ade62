"""The Python 3.8 promise: the backend, the generator the release artifacts ship, the generated model.py and the
sample clients run on Python 3.8 (Qualcomm's /opt/qeff-env, the 22.12 SDK container)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import python38
from py38_runtime import findings

from repo_gen.artifacts import GENERATOR_MODULES, RELEASE

ROOT = Path(__file__).resolve().parents[2]
STANDARD_LIBRARY_ONLY = ("backend_model.contract.errors", "backend_model.contract.parameters",
                         "backend_model.contract.controls", "backend_model.contract.compile_config",
                         "backend_model.contract.cpu_support", "backend_model.contract.qpc",
                         "backend_model.engine.metrics", "repo_gen.writer", "repo_gen.samples", "repo_gen.staging",
                         "repo_gen.memory", "repo_gen.spec", "repo_gen.command")


def py38_files() -> list[Path]:
    """Every file that carries the promise (docs/container.md lists the same)."""
    return sorted([*(ROOT / "backend_model").glob("*.py"), *(ROOT / "repo_gen" / m for m in GENERATOR_MODULES),
                   ROOT / "repo_gen" / "templates" / "model.py", *RELEASE.rglob("*.py")])


def test_vermin_finds_nothing_newer_than_3_8() -> None:
    cmd = [sys.executable, "-c", "import sys; from vermin import main; sys.exit(main())", "-t=3.8-", "--no-tips",
           "--violations", *map(str, py38_files())]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_nothing_3_8_cannot_run_at_run_time() -> None:
    assert [f for path in py38_files() for f in findings(path)] == []


def test_the_run_time_check_catches_what_vermin_misses(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent('''\
        from collections.abc import Callable
        import collections.abc

        Progress = Callable[[str], None]
        Rows = list[tuple[str, int]]
        Maybe = int | None
        Iter = collections.abc.Iterator[int]

        def f(x: dict[str, int]) -> None:
            return "v1".removeprefix("v") if isinstance(x, int | str) else zip(x, x, strict=True)
        '''))
    found = "\n".join(findings(bad))
    for line, needle in ((4, "Callable[...]"), (5, "list[...]"), (6, "int | None"),
                         (7, "collections.abc.Iterator[...]"), (9, "dict[...]"), (10, ".removeprefix()"),
                         (10, "int | str"), (10, "zip(strict=...)")):
        assert f"bad.py:{line}: {needle}" in found, found
    lazy = tmp_path / "lazy.py"
    lazy.write_text("from __future__ import annotations\nfrom collections.abc import Callable\n\n"
                    "def f(x: list[int] | None, g: Callable[[str], None]) -> dict[str, int]: ...\n"
                    "y: tuple[int, ...] = (1,)\nflags = 1 | 2\n")
    assert list(findings(lazy)) == []


def test_the_shared_modules_import_under_a_real_python_3_8_without_site_packages() -> None:
    python = python38()
    if python is None:
        pytest.skip("no Python 3.8 interpreter here (the static checks above still ran)")
    compile_all = "import sys; [compile(open(f).read(), f, 'exec') for f in sys.argv[1:]]"  # no .pyc written
    compiled = subprocess.run([python, "-c", compile_all, *map(str, py38_files())], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    imports = "; ".join(f"import {m}" for m in STANDARD_LIBRARY_ONLY)
    done = subprocess.run([python, "-E", "-s", "-S", "-c", imports], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
