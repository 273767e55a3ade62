"""Waiting for a tritonserver that was just launched: it answers once the models it loads at start have loaded or
failed (its endpoints start after them). A model that failed is named; the start fails only when none loaded."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence

from . import logparse
from .errors import PortTaken, ServerError
from .health import FAILED, ServerHandle
from .serverlog import LOG_KEEP, ServerLog


def wait_started(proc: subprocess.Popen[str], handle: ServerHandle, log: ServerLog, models: Sequence[str],
                 timeout: float) -> None:
    """Until tritonserver answers with at least one of ``models`` (empty: any) loaded; ServerError saying why not."""
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is not None:
            log.join(timeout=2)
            failed = log.first_failure()  # an --exit-on-error=true given by hand: the first failure says why
            if failed:
                raise ServerError(f"model '{failed[0]}' failed to load: {failed[1]}", log.tail(40))
            lines = log.tail(LOG_KEEP)
            error = PortTaken if logparse.port_taken(lines) else ServerError
            raise error(f"tritonserver exited with code {code}: {logparse.exit_reason(lines)}", log.tail(40))
        if handle.is_live():
            _check_loaded(handle, log, models)
            return
        if time.monotonic() >= deadline:
            raise ServerError(f"tritonserver not ready after {timeout:g} s (models still loading? raise the timeout)",
                              log.tail(40))
        time.sleep(0.1)


def _check_loaded(handle: ServerHandle, log: ServerLog, models: Sequence[str]) -> None:
    states = handle.model_states()
    wanted = tuple(models) or tuple(states)
    failed = {n: r.splitlines()[0] if r else FAILED for n, (s, r) in states.items() if s == FAILED and n in wanted}
    if not failed:
        return
    if not any(states.get(n, ("", ""))[0] == "READY" for n in wanted):
        raise ServerError("; ".join(f"model '{n}' failed to load: {r}" for n, r in failed.items()), log.tail(40))
    for name, reason in failed.items():
        log.record(f"qaic-console: model '{name}' failed to load (the others serve): {reason}")
