"""``kept`` (tests/helpers.py): what outlives a run in the console's cache is made once a key, and a failed make
leaves nothing that a later run would read."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import computed_key, kept


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(tmp_path))
    return tmp_path


def write(calls: list[Path], text: str = "weights"):
    def make(folder: Path) -> None:
        calls.append(folder)
        (folder / "adapter").write_text(text)

    return make


def test_the_same_key_reads_what_the_first_made_and_another_key_makes_its_own(cache: Path) -> None:
    calls: list[Path] = []
    first = kept("thing", "k1", write(calls))
    assert kept("thing", "k1", write(calls, "other")) == first and len(calls) == 1
    assert (first / "adapter").read_text() == "weights" and first.is_relative_to(cache)
    assert (kept("thing", "k2", write(calls, "other")) / "adapter").read_text() == "other" and len(calls) == 2


def test_a_failed_make_leaves_nothing_and_is_made_again(cache: Path) -> None:
    def broken(folder: Path) -> None:
        (folder / "half").write_text("a half-written file")
        raise RuntimeError("the training failed")

    with pytest.raises(RuntimeError, match="the training failed"):
        kept("thing", "k", broken)
    assert not [p for p in (cache / "test-kept").iterdir() if p.is_dir()]
    calls: list[Path] = []
    assert sorted(p.name for p in kept("thing", "k", write(calls)).iterdir()) == ["adapter"] and len(calls) == 1


def test_the_key_names_its_parts() -> None:
    assert computed_key("weights-1", "code") == computed_key("weights-1", "code")
    assert computed_key("weights-1", "code") != computed_key("weights-2", "code")
    assert len(computed_key("a")) == 16
    assert computed_key("a") == computed_key("a", threads=torch.get_num_threads())  # by default, this process's
    assert computed_key("a", threads=1) != computed_key("a", threads=3)  # another process's, when it computes
