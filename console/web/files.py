"""The web console's own folder: the transcripts it exports and Gradio's copies of them (Gradio's temp dir).

Private (0700, in the system's temp dir, named by the console's pid) and removed when the UI exits; the next
console removes the folder of one that was killed (SIGKILL). Without it Gradio copies every file a page offers
into ``/tmp/gradio/<hash>/``, readable by anyone, and keeps it. No Gradio import here: the command sets the
folder up before Gradio is imported (some of its modules read ``GRADIO_TEMP_DIR`` on import).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from repo_gen.staging import process_gone

GRADIO_TEMP = "GRADIO_TEMP_DIR"
PREFIX = "qaic-web-"
_FOLDER_RE = re.compile(re.escape(PREFIX) + r"(\d+)-[a-z0-9_]{8}")  # the pid, then mkdtemp's 8 characters


def private_folder() -> Path:
    """A new folder only this user can enter (0700), Gradio's temp dir inside it."""
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    gradio_into(folder)
    return folder


def sweep() -> list[Path]:
    """Remove this user's folders of web consoles that are gone (killed before they could); the ones removed."""
    removed = []
    for folder in sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}*")):
        match = _FOLDER_RE.fullmatch(folder.name)
        if (match and not folder.is_symlink() and folder.is_dir() and folder.stat().st_uid == os.getuid()
                and process_gone(int(match.group(1)))):
            remove(folder)
            removed.append(folder)
    return removed


def gradio_into(folder: Path) -> None:
    """Gradio keeps its copies in ``folder`` from now on (the components read it when they are made)."""
    os.environ[GRADIO_TEMP] = str(folder / "gradio")


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
