"""The Python backend stubs of a tritonserver started here: which model instance each serves, and which were lost.

Triton keeps calling a model READY after its stub process died; the stub's command line names the instance it
serves (``<model>_<group>_<index>``) and its shared-memory region, so the stubs of the server's process group tell
which models lost theirs. A stub stopped by a signal (SIGSTOP) is lost too: its requests fail within a second
("not healthy"), and continuing it later makes tritonserver abort (``boost::interprocess::lock_exception``), so it
is replaced rather than continued.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from .locate import STUB_NAME
from .procs import SHM_PREFIX, STOPPED, cmdline, group_members, process_state

_INSTANCE = re.compile(r"^(?P<model>.+)_\d+_\d+$")  # a model instance's name: <model>_<group>_<index>
SHM = Path(SHM_PREFIX).parent
_REGION = re.compile(rf"^{Path(SHM_PREFIX).name}[\w-]+$")  # a region's name (no path)
REGION_ARG = 2  # the stub's arguments: model.py, shm region, sizes, parent pid, ..., the instance name
INSTANCE_ARG = 8


@dataclass(frozen=True)
class Stubs:
    """The stubs alive in a process group: ``instances`` ``{model instance name: pid}`` (a stub named after the
    model itself comes and goes while the model loads: it is not an instance), and the shared-memory regions of
    all of them (``/dev/shm`` paths, which a killed stub leaves behind)."""

    instances: dict[str, int]
    regions: frozenset[Path]

    @classmethod
    def of(cls, pgid: int) -> Stubs:
        found = [(pid, args) for pid in group_members(pgid) if _is_stub(args := cmdline(pid))]
        return cls({args[INSTANCE_ARG]: pid for pid, args in found if _INSTANCE.match(args[INSTANCE_ARG])},
                   frozenset(SHM / args[REGION_ARG] for _, args in found if _REGION.match(args[REGION_ARG])))


def _is_stub(args: list[str]) -> bool:
    return bool(args) and args[0].endswith(STUB_NAME) and len(args) > INSTANCE_ARG


@dataclass(frozen=True)
class LostStub:
    """A READY model's stub that died, or stopped answering (``stopped``)."""

    pid: int
    stopped: bool

    def says(self) -> str:
        return f"its Python backend stub (pid {self.pid}) " + ("is stopped (SIGSTOP) and does not answer"
                                                                if self.stopped else "died")


class StubWatch:
    """Follows the stubs of one server: :meth:`lost` names the READY models whose stub went away or stopped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}  # instance -> stub pid, as last seen running

    def lost(self, alive: dict[str, int], ready: Collection[str], skip: Collection[str] = ()) -> dict[str, LostStub]:
        """``{model: its lost stub}`` for the READY models (not in ``skip``) one of whose stubs, seen before, is no
        longer among ``alive``, or is stopped. Either is forgotten then (a new one is seen afresh)."""
        stopped = {i: pid for i, pid in alive.items() if process_state(pid) == STOPPED}
        with self._lock:
            gone = {i: LostStub(pid, False) for i, pid in self._seen.items() if i not in alive}
            gone.update((i, LostStub(pid, True)) for i, pid in stopped.items())
            self._seen = {i: pid for i, pid in alive.items() if i not in stopped}
        lost: dict[str, LostStub] = {}
        for instance, stub in gone.items():
            model = _INSTANCE.match(instance)["model"]  # type: ignore[index]
            if model in ready and model not in skip:
                lost.setdefault(model, stub)
        return lost
