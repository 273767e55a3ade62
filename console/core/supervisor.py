"""``serve``'s supervision: the tritonserver it started keeps serving until the console stops it.

A tritonserver that dies (any signal, any exit code), is stopped (SIGSTOP) or does not answer for
:data:`UNRESPONSIVE` seconds is said in one line with the cause, taken down with what it left (stubs, their
shared memory), and started again on the same repository, models, options and ports, after a pause that
doubles at each try (:func:`pauses`). After :data:`RETRIES` restarts in a row that did not stay up
:data:`STEADY` seconds, it gives up and says why. The models' own troubles (a stub that died or stopped, a
model unloaded behind the console's back) are the controller's (:mod:`.keeper`): the server keeps running.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from console.server import TritonServer

from .controller import BUSY, ServerController, Snapshot

POLL = 2.0  # s between looks at the server
RETRIES = 5  # restarts in a row before giving up
FIRST_PAUSE = 1.0  # s before the first restart; doubled at each next one
STEADY = 300.0  # s a restarted server must stay up for the next failure to count as a first one again
UNRESPONSIVE = 30.0  # s without an answer from a running tritonserver before it is restarted
SETTLE = 0.1  # s between looks at a start under way


def pauses(retries: int = RETRIES, first: float = FIRST_PAUSE) -> list[float]:
    """The pause before each restart of a series: 1, 2, 4, 8, 16 s."""
    return [first * 2**n for n in range(retries)]


class Supervisor:
    """Keeps the tritonserver of one :class:`ServerController` serving; ``say`` hears one line per event."""

    def __init__(self, controller: ServerController, say: Callable[[str], None]) -> None:
        self._controller = controller
        self._say = say

    def start(self, repository: Any, models: tuple[str, ...], timeout: float, **options: Any) -> Snapshot:
        """Start the server (see :meth:`ServerController.start`); the snapshot once it is ready or failed."""
        self._controller.start(repository, models, timeout, **options)
        return self._settled()

    def run(self) -> str:
        """Follow the server until it cannot be kept serving: why (one line)."""
        restarts, up_since, quiet_since = 0, time.monotonic(), None
        while True:
            time.sleep(POLL)
            server = self._controller.server
            trouble = self._stopped(server)
            if not trouble:
                snap = self._controller.poll()
                quiet_since = (quiet_since or time.monotonic()) if snap.phase == "unreachable" else None
                trouble = self._trouble(server, snap, quiet_since)
            if not trouble:
                if time.monotonic() - up_since > STEADY:
                    restarts = 0
                continue
            if restarts == RETRIES:
                return f"{trouble}; gave up after {RETRIES} restarts in a row"
            pause = pauses()[restarts]
            restarts += 1
            self._say(f"{trouble}: restarting it in {pause:g} s on the same models and ports ({restarts} of "
                      f"{RETRIES})")
            self._controller.stop(grace=0)  # what is left of it: stubs, shared memory (a dead one: nothing)
            time.sleep(pause)
            snap = self.restart()
            up_since, quiet_since = time.monotonic(), None
            if snap.phase == "ready":
                self._say(f"tritonserver restarted: {snap.message}")

    def restart(self) -> Snapshot:
        """Start the last server again (same models and ports); the snapshot once it is ready or failed."""
        self._controller.restart()
        return self._settled()

    def _settled(self) -> Snapshot:
        while (snap := self._controller.snapshot).phase in BUSY:
            time.sleep(SETTLE)
        return snap

    @staticmethod
    def _stopped(server: TritonServer | None) -> str:
        if server is not None and server.stopped:
            return f"tritonserver (pid {server.pid}) is stopped (SIGSTOP): it answers nothing"
        return ""

    @staticmethod
    def _trouble(server: TritonServer | None, snap: Snapshot, quiet_since: float | None) -> str:
        """What is wrong with the server after a poll ('' when nothing)."""
        if snap.phase == "failed":  # it died (server: the one that ran), or a restart failed
            if server is None:
                return f"tritonserver did not start again: {snap.message}"
            return f"tritonserver (pid {server.pid}) {server.exit_cause()}"
        if server is not None and quiet_since is not None and time.monotonic() - quiet_since >= UNRESPONSIVE:
            return f"tritonserver (pid {server.pid}) has not answered for {UNRESPONSIVE:g} s ({snap.message})"
        return ""
