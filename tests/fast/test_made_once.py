"""``made_once`` (tests/helpers.py): what the workers of a run share is made once, and remade when a make failed."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import made_once


def write(calls: list[Path]):
    def make(folder: Path) -> None:
        calls.append(folder)
        folder.mkdir()
        (folder / "graph").write_text("weights")

    return make


def test_the_second_ask_reads_what_the_first_made(tmp_path_factory: pytest.TempPathFactory) -> None:
    calls: list[Path] = []
    first = made_once(tmp_path_factory, "thing", write(calls))
    second = made_once(tmp_path_factory, "thing", write(calls))
    assert first == second and len(calls) == 1
    assert (second / "graph").read_text() == "weights"


def test_a_failed_make_is_made_again_from_an_empty_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    def broken(folder: Path) -> None:
        folder.mkdir()
        (folder / "half").write_text("a half-written file")
        raise RuntimeError("the export failed")

    with pytest.raises(RuntimeError, match="the export failed"):
        made_once(tmp_path_factory, "other", broken)
    calls: list[Path] = []
    folder = made_once(tmp_path_factory, "other", write(calls))
    assert len(calls) == 1 and sorted(p.name for p in folder.iterdir()) == ["graph"]
