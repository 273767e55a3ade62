"""Keeping the models of a tritonserver started here served while the server runs.

A model whose Python backend stub died (Triton itself keeps calling it READY), or stopped answering (a stub
stopped by a signal: it is killed, since continuing it makes tritonserver abort), is reloaded; a model unloaded
behind the console's back (only a request carrying the console's key can unload one) is loaded again. Each is
said once in the log and shown FAILED with what happened until it serves again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

from console.server import States, TritonServer
from console.server.health import UNLOADED
from console.server.stubs import StubWatch


class ModelKeeper:
    """Follows one server started here; :meth:`follow` is called with the models' states at every poll."""

    def __init__(self, server: TritonServer, note: Callable[[str], None], recovered: Callable[[], object]) -> None:
        self._server = server
        self._note = note
        self._recovered = recovered  # called once a model serves again (the controller polls)
        self._lock = threading.Lock()
        self._stubs = StubWatch()
        self._loaded: set[str] = set()  # models that were READY here: the console loaded them
        self._recovering: dict[str, str] = {}  # model -> what happened to it

    def follow(self, states: States) -> dict[str, str]:
        """Notice what happened since the last call and start bringing the models back; ``{model: what happened}``
        of those not serving again yet."""
        ready = {name for name, (state, _) in states.items() if state == "READY"}
        unloaded = {name for name, (_, reason) in states.items() if reason == UNLOADED}
        with self._lock:
            lost = self._stubs.lost(self._server.stub_instances(), ready, skip=set(self._recovering))
            gone = (self._loaded & unloaded) - set(self._recovering)
            self._loaded = (self._loaded | ready) - gone
            for model, stub in lost.items():
                self._recovering[model] = f"{stub.says()}: reloading it ..."
            for model in gone:
                self._recovering[model] = "unloaded, not by this console: loading it again ..."
            recovering = dict(self._recovering)
        for model, stub in lost.items():
            if stub.stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(stub.pid, signal.SIGKILL)
            self._note(f"model {model}: {stub.says()}; requests to it fail until it is reloaded: "
                       f"{'replacing it' if stub.stopped else 'reloading it'} now")
            self._in_thread(model, self._server.handle.reload_model)
        for model in sorted(gone):
            self._note(f"model {model}: unloaded, not by this console: loading it again")
            self._in_thread(model, self._server.handle.load_model)
        return recovering

    def _in_thread(self, model: str, load: Callable[[str], None]) -> None:
        threading.Thread(target=self._bring_back, args=(model, load), name="qc-reload", daemon=True).start()

    def _bring_back(self, model: str, load: Callable[[str], None]) -> None:
        try:
            load(model)
        except (OSError, ValueError) as exc:
            if not self._server.running:  # the server itself went down: its restart (or its failure) is said
                return
            with self._lock:
                self._recovering[model] = f"loading it again failed: {' '.join(str(exc).split())}"
            self._note(f"model {model}: loading it again failed: {exc}")
            return
        with self._lock:
            self._recovering.pop(model, None)
        self._note(f"model {model}: reloaded; it serves again")
        self._recovered()
