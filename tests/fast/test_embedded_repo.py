"""The embedded samples' repository in the console's cache is rewritten when the backend changes, in any room."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from console.server.embedded import embedded_repo
from repo_gen import writer


@pytest.fixture
def backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the bundled backend that the generator copies from, and a cache of this test's own."""
    copy = tmp_path / "backend_model"
    shutil.copytree(writer.bundled_backend_package(), copy, ignore=shutil.ignore_patterns(*writer.SKIPPED))
    monkeypatch.setattr(writer, "bundled_backend_package", lambda: copy)
    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(tmp_path / "cache"))
    return copy


def test_a_change_in_a_backend_sub_package_rewrites_the_repository(backend: Path) -> None:
    said: list[str] = []
    repo = embedded_repo(said.append)
    embedded_repo(said.append)
    assert len(said) == 1  # written once, then found fresh
    loop = backend / "engine" / "loop.py"
    loop.write_text(loop.read_text() + "# changed\n")
    embedded_repo(said.append)
    assert len(said) == 2
    assert all((model / "1" / "backend_model" / "engine" / "loop.py").read_text().endswith("# changed\n")
               for model in repo.iterdir() if (model / "config.pbtxt").is_file())
