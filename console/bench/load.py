"""Load generation against running servers with the console clients: one level of a sweep at a time.

A level is a fixed concurrency (that many clients, each sending its next request when the last one
finished) or a request rate (requests sent on a schedule, constant or Poisson, whatever is in
flight), for a request count or a duration (in-flight requests then finish and count). Requests go
round-robin over the given URLs (servers of one kind). Every request ends in
exactly one :class:`RequestRecord`. At a concurrency each client may hold a conversation of several turns
(:mod:`.workloads`): its next turn, the history included, goes when the last one is answered.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from console.clients import BadRequest, Call, ClientError, Failure, ModelInfo, Reply, ReplyStats, ServerFault
from console.core.adapters import Adapter
from console.core.request import Settings, prepare

from .prompts import BenchRequest
from .workloads import Conversation

MODES = ("stream", "batch")
DISTRIBUTIONS = ("constant", "poisson")
MAX_IN_FLIGHT = 256  # request-rate mode: worker threads at most


@dataclass(frozen=True)
class Target:
    """What to load: the model (its config read once), its servers (round-robin, one kind) and the settings."""

    settings: Settings
    info: ModelInfo
    servers: tuple[Adapter, ...]
    picks: tuple[ModelInfo, ...] = ()  # the LoRA adapters (or the model itself) the requests go to in turn

    @property
    def model(self) -> str:
        return self.settings.model

    @property
    def mode(self) -> str:
        return self.settings.mode

    def url(self, index: int) -> str:
        return self.servers[index % len(self.servers)].url(self.mode, self.settings.protocol)[0]

    def pick(self, index: int) -> ModelInfo:
        """What request ``index`` asks: the next of :attr:`picks` in turn, else the model."""
        return self.picks[index % len(self.picks)] if self.picks else self.info

    def call(self, index: int, request: BenchRequest) -> Call:
        """The request through the console's one pipeline (raw prompt, new text only, its images)."""
        settings = replace(self.settings, params=self.settings.params.replace(max_tokens=request.max_tokens),
                           images=request.images)
        return prepare(self.servers[index % len(self.servers)], settings, [request.prompt], info=self.pick(index)).call


@dataclass
class RequestRecord:
    """One request's outcome; times in seconds, ``start`` since the level began."""

    index: int
    url: str
    start: float
    end: float = 0.0
    stats: ReplyStats | None = None
    finish_reason: str | None = None
    error: str | None = None
    error_kind: str | None = None
    turn: int = 1  # the turn of its conversation (1: a first turn, or a single request)
    adapter: str = ""  # the LoRA adapter (or the model) it was sent to, when the run spreads over adapters
    text: str = ""  # the answer (kept for the conversation's next turn, not exported)

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict[str, object]:
        """Flat, genai-perf names (times in ms)."""
        out: dict[str, object] = {"index": self.index, "url": self.url, "start_ms": round(self.start * 1000, 3),
                                  "end_ms": round(self.end * 1000, 3)}
        stats = self.stats.as_dict() if self.stats else {}
        for key in ("time_to_first_token_ms", "inter_token_latency_ms", "request_latency_ms",
                    "input_tokens", "output_tokens", "output_tokens_source"):
            out[key] = stats.get(key)
        out.update(finish_reason=self.finish_reason, error=self.error, error_kind=self.error_kind, turn=self.turn)
        out.update({"adapter": self.adapter} if self.adapter else {})
        return out


@dataclass
class LevelResult:
    """The records of one level and its wall time (first send to last answer)."""

    concurrency: int | None
    request_rate: float | None
    records: list[RequestRecord]
    duration: float


Done = Callable[[RequestRecord], None]


def send(target: Target, index: int, request: BenchRequest, t0: float,
         live: set[Call] | None = None, lock: threading.Lock | None = None) -> RequestRecord:
    """Send one request and wait for its one outcome."""
    start = time.perf_counter() - t0
    url, adapter = target.url(index), target.pick(index).choice if target.picks else ""
    try:
        call = target.call(index, request)
    except ClientError as exc:
        return RequestRecord(index, url, start, start, error=str(exc), error_kind=exc.kind, adapter=adapter)
    if live is not None and lock is not None:
        with lock:
            live.add(call)
    record = RequestRecord(index, url, start, adapter=adapter)
    try:
        for event in call:
            if isinstance(event, Reply):
                record.stats, record.finish_reason, record.text = event.stats, event.finish_reason, event.text
                if not event.ok:
                    record.error, record.error_kind = f"finished with {event.finish_reason}", event.finish_reason
            elif isinstance(event, Failure):
                record.error, record.error_kind = event.message, event.kind
    finally:
        if live is not None and lock is not None:
            with lock:
                live.discard(call)
    record.end = time.perf_counter() - t0
    if record.stats is None and record.error is None:
        record.error, record.error_kind = "no reply", ServerFault.kind
    return record


class Runner:
    """Runs levels against one target; :meth:`stop` (any thread) cancels what is in flight."""

    def __init__(self, target: Target, requests: Iterable[BenchRequest], turns: int = 1) -> None:
        self.target = target
        self.turns = turns  # > 1: each client of a concurrency level holds a conversation of that many turns
        self._requests: Iterator[BenchRequest] = itertools.cycle(requests) if isinstance(requests, list) \
            else iter(requests)
        self._lock = threading.Lock()
        self._live: set[Call] = set()
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            calls = list(self._live)
        for call in calls:
            call.cancel()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _next(self) -> BenchRequest:
        with self._lock:
            return next(self._requests)

    def run(self, concurrency: int | None = None, request_rate: float | None = None, count: int | None = None,
            duration: float | None = None, on_done: Done | None = None, distribution: str = "constant",
            seed: int = 0) -> LevelResult:
        """One level: ``count`` requests (or for ``duration`` s) at a concurrency or a request rate."""
        if (concurrency is None) == (request_rate is None):
            raise BadRequest("give a concurrency or a request rate")
        if count is None and duration is None:
            raise BadRequest("give a request count or a duration")
        if concurrency is not None and concurrency < 1:
            raise BadRequest(f"concurrency must be >= 1, got {concurrency}")
        if request_rate is not None and request_rate <= 0:
            raise BadRequest(f"request rate must be > 0, got {request_rate:g}")
        t0 = time.perf_counter()
        deadline = None if duration is None else t0 + duration
        if concurrency is not None:
            records = self._closed_loop(concurrency, count, deadline, t0, on_done)
        else:
            assert request_rate is not None
            records = self._open_loop(request_rate, count, deadline, t0, on_done, distribution, seed)
        records.sort(key=lambda r: r.index)
        first = min((r.start for r in records), default=0.0)
        return LevelResult(concurrency, request_rate, records, max((r.end for r in records), default=0.0) - first)

    def _record(self, records: list[RequestRecord], record: RequestRecord, on_done: Done | None) -> None:
        with self._lock:
            records.append(record)
        if on_done is not None:
            on_done(record)

    def _closed_loop(self, concurrency: int, count: int | None, deadline: float | None, t0: float,
                     on_done: Done | None) -> list[RequestRecord]:
        records: list[RequestRecord] = []
        counter = itertools.count()

        def client() -> None:
            chat = Conversation(self.turns, self._next) if self.turns > 1 else None
            while not self.stopped:
                with self._lock:
                    index = next(counter)
                if (count is not None and index >= count) or (deadline is not None and time.perf_counter() >= deadline):
                    return
                request, turn = chat.next() if chat else (self._next(), 1)
                record = send(self.target, index, request, t0, self._live, self._lock)
                record.turn = turn
                if chat and record.ok:
                    chat.answered(request, record.text)
                elif chat:  # a failed turn ends its conversation
                    chat.turn = chat.turns
                self._record(records, record, on_done)

        threads = [threading.Thread(target=client, name=f"bench-client-{i}", daemon=True) for i in range(concurrency)]
        for thread in threads:
            thread.start()
        self._join(threads)
        return records

    def _open_loop(self, rate: float, count: int | None, deadline: float | None, t0: float, on_done: Done | None,
                   distribution: str, seed: int) -> list[RequestRecord]:
        if distribution not in DISTRIBUTIONS:
            raise BadRequest(f"request distribution must be one of {', '.join(DISTRIBUTIONS)}")
        records: list[RequestRecord] = []
        rng = random.Random(seed)
        due = t0

        def one(index: int, request: BenchRequest) -> None:
            self._record(records, send(self.target, index, request, t0, self._live, self._lock), on_done)

        with ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="bench-rate") as pool:
            try:
                for index in itertools.count():
                    if (count is not None and index >= count) or (deadline is not None and due >= deadline):
                        break
                    if self._stopped.wait(max(due - time.perf_counter(), 0.0)):  # the schedule, or stop()
                        break
                    pool.submit(one, index, self._next())
                    due += rng.expovariate(rate) if distribution == "poisson" else 1.0 / rate
            except KeyboardInterrupt:
                self.stop()
                raise
        return records

    def _join(self, threads: list[threading.Thread]) -> None:
        """Wait for the clients; Ctrl-C cancels what is in flight (each call is bounded by its timeouts)."""
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except KeyboardInterrupt:
            self.stop()
            for thread in threads:
                thread.join(30)
            raise
