"""The web console's private folder: 0700, named by its pid; the next console removes a killed one's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from console.web import files


def test_the_folders_of_gone_consoles_are_swept_and_no_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(files.GRADIO_TEMP, raising=False)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = tmp_path / f"{files.PREFIX}{gone.stdout.strip()}-abcd_123"
    (dead / "transcripts").mkdir(parents=True)
    (dead / "transcripts" / "t.json").write_text("{}")
    mine = files.private_folder()  # a live console's: this process
    assert mine.name.startswith(f"{files.PREFIX}{os.getpid()}-") and mine.stat().st_mode & 0o777 == 0o700
    assert os.environ[files.GRADIO_TEMP] == str(mine / "gradio")
    other = tmp_path / f"{files.PREFIX}not-a-console"  # not named as a console's: not ours to remove
    other.mkdir()
    link = tmp_path / f"{files.PREFIX}{gone.stdout.strip()}-link_123"
    link.symlink_to(other)
    assert files.sweep() == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other.name, link.name])
