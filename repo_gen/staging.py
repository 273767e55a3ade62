"""Writing a model folder into a repository in one rename, and what a killed write leaves behind.

A write is staged in a hidden holder inside the repository, ``.qaic-writing-<pid>-<model>-<random>`` (the same
file system, so the final rename is atomic), then renamed into place. A writer killed midway (SIGKILL) leaves
its holder. Triton takes every folder of a repository for a model, so ``serve`` loads only the visible ones
(:func:`model_names`) and, like ``repo list``, names the hidden ones (:func:`leftovers`); the next write into
the repository sweeps the holders of writers that are gone (:func:`sweep`), first putting back a model a
killed ``--force`` had moved aside. A writer is known by its pid on this machine.

Standard library only, and Python 3.8 (the release artifacts' generator imports it).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

HOLDER = ".qaic-writing"
STAGED, OLD = "model", "old"  # a holder's staged model, and the model a --force moved aside
_HOLDER_RE = re.compile(r"^" + re.escape(HOLDER) + r"-(\d+)-(.+)-[a-z0-9_]{8}$")  # mkdtemp's 8 random characters
Note = Callable[[str], None]


def holder(repository: Path, model: str) -> Path:
    """A new private (0700) holder for a write of ``model`` into ``repository``."""
    return Path(tempfile.mkdtemp(prefix=f"{HOLDER}-{os.getpid()}-{model}-", dir=repository))


def process_gone(pid: int) -> bool:
    """No process ``pid`` runs on this machine (another user's live one counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def _abandoned(folder: Path) -> str | None:
    """The model of a holder whose writer is gone, else None (a live write, or not a holder)."""
    match = _HOLDER_RE.match(folder.name)
    if match is None or not folder.is_dir() or not process_gone(int(match.group(1))):
        return None
    return match.group(2)


def sweep(repository: Path, note: Note) -> None:
    """Remove the holders of killed writes in ``repository``; a model one had moved aside goes back first."""
    if not repository.is_dir():
        return
    for folder in sorted(repository.iterdir()):
        model = _abandoned(folder)
        if model is None:
            continue
        old, target = folder / OLD, repository / model
        if old.is_dir() and not target.exists():
            os.replace(old, target)
            note(f"note: put back {target}, which a killed --force had moved aside into {folder.name}")
        shutil.rmtree(folder, ignore_errors=True)
        note(f"note: removed {folder.name}, left in {repository} by a generator run that was killed")


def leftovers(repository: Path) -> list[str]:
    """One line per hidden folder of ``repository``: Triton would take it for a model, the console skips it."""
    lines = []
    for folder in sorted(p for p in repository.iterdir() if p.name.startswith(".") and p.is_dir()):
        model = _abandoned(folder)
        if model is None:
            lines.append(f"{folder.name}: a hidden folder, not loaded (not a model)")
        elif (folder / OLD).is_dir() and not (repository / model).exists():
            lines.append(f"{folder.name}: left by a killed generator run; it holds {model}, moved aside by "
                         "--force: the next generator run into this repository puts it back")
        else:
            lines.append(f"{folder.name}: left by a killed generator run, not loaded (the next generator run "
                         "into this repository removes it)")
    return lines


def model_names(repository: Path) -> list[str]:
    """The models a repository holds: its visible folders (hidden ones are leftovers, see :func:`leftovers`)."""
    return sorted(p.name for p in repository.iterdir() if p.is_dir() and not p.name.startswith("."))
