"""The repository API keys of the tritonservers this user's consoles run, for this user's other consoles.

A console that starts a server keeps its key in a file only this user can read (``<cache>/server-keys/<HTTP port>``:
the folder 0700, the file 0600), removed when the server stops; another console of this user reaching that port on
a loopback address sends the key with its requests to the server's HTTP API (its model states, ``models --url``).
A key never goes to another host, and no file is trusted that is not this user's alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from backend_model.models import cache_root

from .ports import is_loopback

FRONT_KEY_ENV = "QAIC_CONSOLE_API_KEY"  # the OpenAI front's clients' key: `openai --api-key`, a pod's Secret

PRIVATE = 0o077  # permission bits others must not have on the folder and its files


def folder() -> Path:
    return cache_root() / "server-keys"


def _private(path: Path) -> bool:
    info = path.lstat()
    return info.st_uid == os.getuid() and not info.st_mode & PRIVATE and not stat.S_ISLNK(info.st_mode)


def remember(http_port: int, key: str, pid: int) -> None:
    """Keep ``key`` of the server ``pid`` (its process group) listening on ``http_port`` for this user's consoles;
    nothing when the folder cannot be made private (the key then stays in this process alone)."""
    where = folder()
    with contextlib.suppress(OSError):
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(where):
            return
        partial = where / f".{http_port}.{os.getpid()}"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"pid": pid, "key": key}, out)
        partial.replace(where / str(http_port))
        for path in where.iterdir():  # the keys of servers whose console was killed (they never forgot theirs)
            if path.name.isdigit() and not _alive(_entry(int(path.name)).get("pid")):
                path.unlink()


def forget(http_port: int, pid: int) -> None:
    """Remove the key of server ``pid`` on ``http_port`` (a newer server's on that port stays)."""
    if _entry(http_port).get("pid") == pid:
        with contextlib.suppress(OSError):
            (folder() / str(http_port)).unlink()


def key_for(http_url: str) -> str:
    """The key of the live server this user's console started at ``host:port`` on this machine ('' if none)."""
    host, _, port = http_url.rpartition(":")
    if not port.isdigit() or not is_loopback(host.strip("[]")):
        return ""
    entry = _entry(int(port))
    return str(entry.get("key") or "") if _alive(entry.get("pid")) else ""


def _alive(pid: object) -> bool:
    """Whether the process group ``pid`` (a server's) is alive: a gone server's key opens nothing."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.killpg(pid, 0)
    except OSError:
        return False
    return True


def _entry(http_port: int) -> dict:
    path = folder() / str(http_port)
    try:
        if not (_private(path.parent) and _private(path)):
            return {}
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return entry if isinstance(entry, dict) else {}
