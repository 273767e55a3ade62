"""The Python backend stubs of a tritonserver started here: which model instance each serves, and which died.

Triton keeps calling a model READY after its stub process died; the stub's command line names the instance it
serves (``<model>_<group>_<index>``), so the stubs of the server's process group tell which models lost theirs.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection

from .locate import STUB_NAME
from .procs import cmdline, group_members

_INSTANCE = re.compile(r"^(?P<model>.+)_\d+_\d+$")  # a model instance's name: <model>_<group>_<index>
INSTANCE_ARG = 8  # the stub's arguments: model.py, shm region, sizes, parent pid, ..., the instance name


def stub_instances(pgid: int) -> dict[str, int]:
    """``{model instance name: pid}`` of the model instances' stubs alive in the process group ``pgid`` (a
    stub named after the model itself comes and goes while the model loads: it is not an instance)."""
    found = {}
    for pid in group_members(pgid):
        args = cmdline(pid)
        if args and args[0].endswith(STUB_NAME) and len(args) > INSTANCE_ARG and _INSTANCE.match(args[INSTANCE_ARG]):
            found[args[INSTANCE_ARG]] = pid
    return found


class StubWatch:
    """Follows the stubs of one server: :meth:`dead` names the READY models whose stub went away since last seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}  # instance -> stub pid, as last seen

    def dead(self, alive: dict[str, int], ready: Collection[str], skip: Collection[str] = ()) -> dict[str, int]:
        """``{model: pid of its dead stub}`` for the READY models (not in ``skip``) one of whose stubs, seen
        before, is no longer among ``alive``. A stub that went is forgotten either way (a new one is seen afresh)."""
        with self._lock:
            gone = {i: pid for i, pid in self._seen.items() if i not in alive}
            self._seen = dict(alive)
        dead: dict[str, int] = {}
        for instance, pid in gone.items():
            model = _INSTANCE.match(instance)["model"]  # type: ignore[index]
            if model in ready and model not in skip:
                dead.setdefault(model, pid)
        return dead
