"""The web console's own folder: the transcripts it exports and Gradio's copies of them (Gradio's temp dir).

Private (0700, in the system's temp dir) and removed when the UI exits; without it Gradio copies every file a
page offers into ``/tmp/gradio/<hash>/``, readable by anyone, and keeps it. No Gradio import here: the command
sets the folder up before Gradio is imported (some of its modules read ``GRADIO_TEMP_DIR`` on import).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

GRADIO_TEMP = "GRADIO_TEMP_DIR"


def private_folder() -> Path:
    """A new folder only this user can enter (0700), Gradio's temp dir inside it."""
    folder = Path(tempfile.mkdtemp(prefix="qaic-web-"))
    gradio_into(folder)
    return folder


def gradio_into(folder: Path) -> None:
    """Gradio keeps its copies in ``folder`` from now on (the components read it when they are made)."""
    os.environ[GRADIO_TEMP] = str(folder / "gradio")


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
