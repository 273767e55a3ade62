"""A request in flight: iterate it once for its events; :meth:`Call.cancel` may come from any thread.

A model that takes one prompt per request (every interface but the bundled backend's) gets one
request per prompt of an ``a|b`` call, sent together; :func:`fan_out` merges their events by
prompt index, so every front end sees the same event stream whatever the model.
"""

from __future__ import annotations

import copy
import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .errors import CANCEL_NOTE, CANCELLED, IDLE_TIMEOUT, TIMEOUT, ClientError
from .events import Event, Failure, ModelInfo, Reply, TextDelta, Timeouts, new_request_id
from .interfaces import Interface, interface_of
from .params import GenerationParams
from .status import PROBE_AFTER, PROBE_EVERY, lost_request, request_status
from .wire import model_info, normalize_url


class Call:
    """One request to ``model`` (a name, or its :class:`ModelInfo` when already read) at ``url``."""

    protocol = "grpc"
    cancel_note = CANCEL_NOTE  # what a cancel or a timeout did to the request

    def __init__(self, url: str, model: str | ModelInfo, prompts: Sequence[str], params: GenerationParams,
                 timeouts: Timeouts) -> None:
        if not prompts:
            raise ClientError("no prompt given")
        self.url = normalize_url(url)
        self.info = model if isinstance(model, ModelInfo) else None
        self.model = model.name if isinstance(model, ModelInfo) else model
        self.prompts = list(prompts)
        self.params = params
        self.request_id = params.request_id or new_request_id()
        self.timeouts = timeouts
        self._interface: Interface | None = None
        self._fresh()

    def _fresh(self) -> None:
        """A call's own state: not cancelled, nothing queued, not iterated, no parts."""
        self._cancel = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._used = False
        self._parts: list[Call] = []

    def model_info(self) -> ModelInfo:
        """The model's config (read once, over this call's protocol)."""
        if self.info is None:
            limit = min(self.timeouts.network or 10.0, 10.0)
            self.info = model_info(self.url, self.model, self.protocol, timeout=limit)
        return self.info

    def interface(self) -> Interface:
        """The model's interface (read once)."""
        if self._interface is None:
            self._interface = interface_of(self.model_info())
        return self._interface

    def part(self, index: int) -> Call:
        """This call for prompt ``index`` alone, with its own request id."""
        clone = copy.copy(self)
        clone._fresh()
        clone.prompts = [self.prompts[index]]
        clone.request_id = f"{self.request_id}-{index}"
        clone.params = self.params.replace(request_id=clone.request_id)
        return clone

    def cancel(self) -> None:
        """Stop waiting and cancel the request (on the server too, where the protocol can)."""
        self._cancel.set()
        self._queue.put(None)
        for part in list(self._parts):
            part.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def __iter__(self) -> Iterator[Event]:
        if self._used:
            raise RuntimeError("a Call can be iterated once")
        self._used = True
        return self._events()

    def _events(self) -> Iterator[Event]:
        t0 = time.perf_counter()
        if self._cancel.is_set():  # cancelled before it was sent: send nothing
            yield Failure("cancelled before it was sent", CANCELLED, 0.0)
            return
        try:
            interface = self.interface()
        except ClientError as exc:
            yield Failure(str(exc), exc.kind, time.perf_counter() - t0)
            return
        if len(self.prompts) > 1 and not interface.batches_prompts:
            yield from fan_out(self)
        else:
            yield from self._request()

    def _request(self) -> Iterator[Event]:
        """The events of one request carrying all of this call's prompts."""
        raise NotImplementedError

    # ---- waiting for what a request's reader queues (a stream's responses, chunks)

    def _await(self, t0: float, last: float,
               on_quiet: Callable[[], None] | None = None) -> tuple[Any, Failure | None]:
        """(the next queued item, None), or (None, the Failure that ends the wait): a cancel, the network
        timeout (from ``t0``) or the idle timeout (from ``last``, the latest response). ``on_quiet`` is
        called when nothing came for PROBE_AFTER s (again every PROBE_EVERY s); it may raise ClientError."""
        asked = t0
        while True:
            wait, deadline, which = self._wait_limit(t0, last)
            if on_quiet is not None:
                quiet = max(max(last + PROBE_AFTER, asked + PROBE_EVERY) - time.perf_counter(), 0.0)
                wait = quiet if wait is None else min(wait, quiet)
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                item = None
            now = time.perf_counter()
            if item is not None:
                return item, None
            if self._cancel.is_set():
                return None, Failure(f"cancelled after {now - t0:.1f} s; {self.cancel_note}", CANCELLED, now - t0)
            if which and now >= deadline:
                return None, self._timed_out(which, now - t0)
            if on_quiet is not None and now - last >= PROBE_AFTER and now - asked >= PROBE_EVERY:
                asked = now
                try:
                    on_quiet()
                except ClientError:
                    crossed = self._crossed()  # the answer may have crossed the question
                    if crossed is None:
                        raise
                    return crossed, None

    def _crossed(self, grace: float = 0.5) -> Any:
        """An item that arrives within ``grace`` s (a request that ended as it was asked about), or None."""
        try:
            return self._queue.get(timeout=grace)
        except queue.Empty:
            return None

    def _ask_status(self) -> None:
        """Nothing came for a while: ask the bundled backend whether it still runs the request (ClientError if not)."""
        if request_status(self.url, self.model, self.request_id, protocol=self.protocol) == "unknown":
            raise lost_request(self.model)

    def _wait_limit(self, t0: float, last: float) -> tuple[float | None, float, str]:
        """(seconds to wait, deadline, which timeout) for the nearer of the two timeouts."""
        limits = []
        if self.timeouts.network is not None:
            limits.append((t0 + self.timeouts.network, TIMEOUT))
        if self.timeouts.idle is not None:
            limits.append((last + self.timeouts.idle, IDLE_TIMEOUT))
        if not limits:
            return None, 0.0, ""
        deadline, kind = min(limits)
        return max(deadline - time.perf_counter(), 0.0), deadline, kind

    def _timed_out(self, kind: str, elapsed: float) -> Failure:
        if kind == IDLE_TIMEOUT:
            message = f"stream idle timeout: no response from {self.model} for {self.timeouts.idle:g} s"
        else:
            message = f"network timeout: {self.model} did not finish within {self.timeouts.network:g} s"
        return Failure(f"{message}; {self.cancel_note}", kind, elapsed)

    def replies(self) -> list[Reply]:
        """Run to the end; the replies in prompt order, or ClientError on failure."""
        replies = []
        for event in self:
            if isinstance(event, Failure):
                raise ClientError(event.message, event.kind)
            if isinstance(event, Reply):
                replies.append(event)
        return replies


def fan_out(call: Call) -> Iterator[Event]:
    """One request per prompt of ``call``, sent together; their events merged by prompt index.

    Text arrives as it comes; the replies follow in prompt order once every request is done. The
    first failure cancels the other requests and is the call's one Failure.
    """
    parts = [call.part(i) for i in range(len(call.prompts))]
    call._parts = parts
    merged: queue.Queue[tuple[int, Event | None]] = queue.Queue()

    def run(index: int, part: Call) -> None:
        try:
            for event in part:
                merged.put((index, event))
        finally:
            merged.put((index, None))

    if call.cancelled:
        for part in parts:
            part.cancel()
    threads = [threading.Thread(target=run, args=(i, p), name=f"qc-prompt-{i}", daemon=True)
               for i, p in enumerate(parts)]
    for thread in threads:
        thread.start()
    replies: dict[int, Reply] = {}
    failure: Failure | None = None
    try:
        left = len(parts)
        while left:
            index, event = merged.get()
            if event is None:
                left -= 1
            elif isinstance(event, Failure):
                if failure is None:
                    failure = event
                    for part in parts:
                        part.cancel()
            elif failure is None and isinstance(event, TextDelta):
                yield dataclasses.replace(event, index=index)
            elif isinstance(event, Reply):
                replies[index] = dataclasses.replace(event, index=index)
        if failure is not None:
            yield failure
        else:
            yield from (replies[i] for i in sorted(replies))
    finally:
        for part in parts:
            part.cancel()  # an abandoned iteration cancels what is still running
        for thread in threads:
            thread.join(timeout=10)
