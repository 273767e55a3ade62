"""A request in flight: iterate it once for its events; :meth:`Call.cancel` may come from any thread.

A request's reader (a transport callback or thread) hands what it receives to the call as typed
arrivals (:class:`Arrived`, :class:`Broke`, :class:`Ended`); the iterating thread waits for the next one
with :meth:`Call._next`, which also applies the timeouts and, when the request goes quiet, the call's
``probe`` (the check a server kind supplies for a backend that died).

A model that takes one prompt per request (every interface but the bundled backend's) gets one
request per prompt of an ``a|b`` call, sent together; :func:`fan_out` merges their events by
prompt index, so every front end sees the same event stream whatever the model.
"""

from __future__ import annotations

import copy
import dataclasses
import queue
import secrets
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import CANCEL_NOTE, BadRequest, Cancelled, ClientError
from .events import Event, Failure, ModelInfo, Reply, TextDelta, Timeouts, new_request_id
from .interface_registry import interface_of
from .interfaces import Interface
from .params import GenerationParams
from .wire import model_info, normalize_url

PROBE_AFTER = 3.0  # s of silence before a quiet request's probe asks
PROBE_EVERY = 3.0  # s between two questions
Probe = Callable[["Call"], None]  # asks whether a quiet request still runs; ClientError when it is lost


@dataclass(frozen=True)
class Arrived:
    """What the request's reader received: a response, a chunk or the one answer."""

    data: Any
    at: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True)
class Broke:
    """The transport's error: the request cannot go on."""

    error: BaseException
    at: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True)
class Ended:
    """The reader came to the end of a stream that carries no final flag of its own."""

    at: float = field(default_factory=time.perf_counter)


Arrival = Arrived | Broke | Ended


class _Woken:
    """Put by :meth:`Call.cancel` to wake the waiting thread; not an arrival."""


WOKEN = _Woken()


class Call:
    """One request to ``model`` (a name, or its :class:`ModelInfo` when already read) at ``url``."""

    protocol = "grpc"
    cancel_note = CANCEL_NOTE  # what a cancel or a timeout did to the request

    def __init__(self, url: str, model: str | ModelInfo, prompts: Sequence[str], params: GenerationParams,
                 timeouts: Timeouts, probe: Probe | None = None) -> None:
        if not prompts:
            raise BadRequest("no prompt given")
        self.url = normalize_url(url)
        self.info = model if isinstance(model, ModelInfo) else None
        self.model = model.name if isinstance(model, ModelInfo) else model
        self.prompts = list(prompts)
        self.params = params if params.status_key else params.replace(status_key=secrets.token_hex(16))
        self.request_id = params.request_id or new_request_id()
        self.timeouts = timeouts
        self.probe = probe
        self._interface: Interface | None = None
        self._fresh()

    def _fresh(self) -> None:
        """A call's own state: not cancelled, nothing arrived, not iterated, no parts."""
        self._cancel = threading.Event()
        self._queue: queue.Queue[Arrival | _Woken] = queue.Queue()
        self._used = False
        self._parts: list[Call] = []

    def _arrive(self, arrival: Arrival) -> None:
        """Hand what the reader received to the waiting thread (from any thread)."""
        self._queue.put(arrival)

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
        clone.params = self.params.replace(request_id=clone.request_id, status_key=secrets.token_hex(16))
        return clone

    def cancel(self) -> None:
        """Stop waiting and cancel the request (on the server too, where the protocol can)."""
        self._cancel.set()
        self._queue.put(WOKEN)
        for part in list(self._parts):
            part.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def __iter__(self) -> Generator[Event, None, None]:
        if self._used:
            raise RuntimeError("a Call can be iterated once")
        self._used = True
        return self._events()

    def _events(self) -> Generator[Event, None, None]:
        t0 = time.perf_counter()
        if self._cancel.is_set():  # cancelled before it was sent: send nothing
            yield Failure("cancelled before it was sent", Cancelled, 0.0)
            return
        try:
            interface = self.interface()
        except ClientError as exc:
            yield Failure.of(exc, time.perf_counter() - t0)
            return
        if len(self.prompts) > 1 and (not interface.batches_prompts or self.params.images):  # images: a prompt each
            yield from fan_out(self)
        else:
            yield from self._request()

    def _request(self) -> Iterator[Event]:
        """The events of one request carrying all of this call's prompts."""
        raise NotImplementedError

    # ---- waiting for what the request's reader hands over

    def _next(self, t0: float, last: float) -> Arrival | Failure:
        """The next arrival, or the Failure that ends the wait: a cancel, the network timeout (from ``t0``), the
        idle timeout (from ``last``, the latest response), or the probe saying the request is lost. The probe
        asks after PROBE_AFTER s of silence, then every PROBE_EVERY s."""
        asked = t0
        while True:
            nearest = self.timeouts.nearest(t0, last)
            waits = [] if nearest is None else [nearest[0]]
            if self.probe is not None:
                waits.append(max(last + PROBE_AFTER, asked + PROBE_EVERY))
            try:
                item = self._queue.get(timeout=max(min(waits) - time.perf_counter(), 0.0) if waits else None)
            except queue.Empty:
                item = WOKEN
            now = time.perf_counter()
            if not isinstance(item, _Woken):
                return item
            if self._cancel.is_set():
                return Failure(f"cancelled after {now - t0:.1f} s; {self.cancel_note}", Cancelled, now - t0)
            if nearest is not None and now >= nearest[0]:
                return Failure(f"{self.timeouts.message(nearest[1], self.model)}; {self.cancel_note}", nearest[1],
                               now - t0)
            if self.probe is not None and now - last >= PROBE_AFTER and now - asked >= PROBE_EVERY:
                asked = now
                try:
                    self.probe(self)
                except ClientError as exc:
                    return self._crossed() or Failure.of(exc, time.perf_counter() - t0)

    def _crossed(self, grace: float = 0.5) -> Arrival | None:
        """An arrival within ``grace`` s (an answer that crossed the probe's question), or None."""
        try:
            item = self._queue.get(timeout=grace)
        except queue.Empty:
            return None
        return None if isinstance(item, _Woken) else item

    def replies(self) -> list[Reply]:
        """Run to the end; the replies in prompt order, or ClientError on failure."""
        replies = []
        for event in self:
            if isinstance(event, Failure):
                raise event.exception()
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
