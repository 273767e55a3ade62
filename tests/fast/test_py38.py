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

from backend_model import shared_files
from repo_gen.artifacts import GENERATOR_MODULES, RELEASE, export

ROOT = Path(__file__).resolve().parents[2]
ALSO_STANDARD_LIBRARY_ONLY = ("backend_model.engine.metrics",)  # beside what the generator ships: the engine's meter


def py38_files() -> list[Path]:
    """Every file that carries the promise (docs/container.md lists the same)."""
    return sorted([*(ROOT / "backend_model").rglob("*.py"), *(ROOT / "repo_gen" / m for m in GENERATOR_MODULES),
                   ROOT / "repo_gen" / "templates" / "model.py",
                   ROOT / "repo_gen" / "templates" / "embedding_model.py", *RELEASE.rglob("*.py")])


def shipped_modules(llm: Path) -> list[str]:
    """The modules of the generator the release artifacts ship in ``llm`` (their llm-models/ folder)."""
    files = [*(llm / "backend_model").rglob("*.py"), *(llm / "repo_gen").glob("*.py")]
    return [".".join(f.relative_to(llm).with_suffix("").parts).removesuffix(".__init__") for f in sorted(files)]


def test_the_promise_reads_every_sub_package_of_the_backend() -> None:
    checked = {path.parent.name for path in py38_files() if path.parent.parent.name == "backend_model"}
    assert checked == {"contract", "embedding", "engine", "sessions", "triton", "twin", "vision"}
    assert ROOT / "backend_model" / "engine" / "loop.py" in py38_files()


def test_the_generator_ships_the_backend_files_the_package_declares(tmp_path: Path) -> None:
    llm = export(tmp_path)[0]
    shipped = sorted(str(f.relative_to(llm / "backend_model")) for f in (llm / "backend_model").rglob("*.py"))
    assert shipped == sorted(shared_files()) and "contract/devices.py" in shipped


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


def test_the_shared_modules_import_under_a_real_python_3_8_without_site_packages(tmp_path: Path) -> None:
    python = python38()
    if python is None:
        pytest.skip("no Python 3.8 interpreter here (the static checks above still ran)")
    compile_all = "import sys; [compile(open(f).read(), f, 'exec') for f in sys.argv[1:]]"  # no .pyc written
    compiled = subprocess.run([python, "-c", compile_all, *map(str, py38_files())], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    llm = export(tmp_path)[0]
    for folder, modules in ((llm, shipped_modules(llm)), (ROOT, ALSO_STANDARD_LIBRARY_ONLY)):
        imports = "; ".join(f"import {m}" for m in modules)
        done = subprocess.run([python, "-E", "-s", "-S", "-c", imports], cwd=folder, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
