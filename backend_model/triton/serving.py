"""The serving loop behind the Triton glue: an engine thread and a response thread.

The engine thread only steps the engine and posts each step's updates. The response thread
answers them through a ``Responder`` (the Triton glue's response senders), so the engine never waits
for a response or a cancellation check to cross to the server process: a round of responses
carries everything posted since the previous round (texts of steps it has not caught up with are
joined; log-probability entries go with the next response that carries text), then the live requests
are checked for cancellation once. Every request gets exactly one final response: errors and
cancellations included.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ..engine.logprobs import TokenLogprob
from ..engine.loop import Engine, Sequence, Update
from ..engine.media import Media
from ..engine.sampling import SamplingParams

Log = Callable[[str, str], None]  # (level, message); typing names: evaluated at run time, so 3.8-safe


@dataclass
class Request:
    """One client request: its prompts' sequences and where to answer (``sender``)."""

    sender: Any  # is_cancelled() -> bool; what the Responder answers through
    request_id: str
    prompts: list[str]
    input_tokens: list[int]
    include_prompt: bool = False
    streaming: bool = True  # a response per step, else one at the end
    key: str = ""  # the transport's own id (Triton's request id), for ``Serving.find``
    status_key: str = ""  # what a status question about this request must bring (its client's secret)
    seqs: list[Sequence] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    ended: int = 0  # sequences whose final update has been answered
    cancelled: bool = False
    unsent: dict[int, list[TokenLogprob]] = field(default_factory=dict)  # entries awaiting their text's response

    @property
    def finished(self) -> bool:
        return self.ended == len(self.seqs)


class Responder(Protocol):
    """How responses leave; ``send`` raises when the client is gone."""

    def send(self, req: Request, texts: list[str], final: bool, logprobs: list[list[TokenLogprob]]) -> None: ...


@dataclass
class _Posted:
    """What the engine posted for one request since the response thread last looked."""

    req: Request
    texts: dict[int, str] = field(default_factory=dict)
    logprobs: dict[int, list[TokenLogprob]] = field(default_factory=dict)
    ended: int = 0


class Serving:
    """Runs ``engine`` for ``responder``: ``submit`` requests, ``stop`` at the end."""

    def __init__(self, engine: Engine, responder: Responder, log: Log, name: str = "model") -> None:
        self.engine = engine
        self.responder = responder
        self.log = log
        self.name = name
        self.live: dict[int, Request] = {}  # the response thread's own (submit adds under the lock)
        self._posted: dict[int, _Posted] = {}
        self._stepped = False
        self._stopping = False
        self._cond = threading.Condition()
        self._threads = [
            threading.Thread(target=self._engine_loop, name=f"{name}-engine", daemon=True),
            threading.Thread(target=self._response_loop, name=f"{name}-responses", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, req: Request, prompt_ids: list[list[int]], params: SamplingParams,
               forced: list[list[int]] | None = None, media: list[Media] | None = None) -> None:
        """Queue ``req``'s prompts (``forced``: each one's continuation to score; ``media``: each one's images);
        BadRequest before anything is queued when the engine refuses one (``Engine.prepare``)."""
        req.seqs = [self.engine.prepare(ids, params, (req, i), forced[i] if forced else None,
                                        media[i] if media else None)
                    for i, ids in enumerate(prompt_ids)]
        with self._cond:
            self.live[id(req)] = req
        self.engine.enqueue(req.seqs)

    def wait_admitted(self, req: Request) -> None:
        """Return once every sequence of ``req`` has a slot or has ended. A model of several instances holds
        Triton's ``execute`` until then: an instance whose execute returned at once would look idle to Triton and
        take every request (measured: 13 of 16 streams on one of two instances), so each takes what it can start."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopping or all(s.slot >= 0 or s.finished for s in req.seqs))

    def find(self, key: str) -> Request | None:
        """The live request with this transport id, if any."""
        with self._cond:
            return next((r for r in self.live.values() if key and r.key == key), None)

    def stop(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.engine.wake()
        for thread in self._threads:
            thread.join(timeout=timeout)

    # -- the engine thread --------------------------------------------------------------------
    def _engine_loop(self) -> None:
        while not self._stopping:
            if not self.engine.wait_for_work(timeout=0.2):
                continue
            try:
                updates = self.engine.step()
            except Exception as exc:  # never let one bad step stop the server
                self.log("error", f"{self.name}: engine step failed: {type(exc).__name__}: {exc}")
                updates = []
            self._post(updates)

    def _post(self, updates: list[Update]) -> None:
        with self._cond:
            for up in updates:
                req, index = up.seq.tag
                posted = self._posted.get(id(req))
                if posted is None:
                    posted = self._posted[id(req)] = _Posted(req)
                posted.texts[index] = posted.texts.get(index, "") + up.text
                posted.ended += up.finished
                if up.logprobs:
                    posted.logprobs.setdefault(index, []).extend(up.logprobs)
            self._stepped = True
            self._cond.notify_all()  # the response thread, and an execute waiting for its request's slots

    # -- the response thread ------------------------------------------------------------------
    def _response_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stepped or self._stopping)
                if self._stopping:
                    return
                rounds, self._posted, self._stepped = list(self._posted.values()), {}, False
                live = list(self.live.values())
            for posted in rounds:
                self._answer(posted)
            self._check_cancelled(live)

    def _answer(self, posted: _Posted) -> None:
        req = posted.req
        req.ended += posted.ended
        texts = [posted.texts.get(i, "") for i in range(len(req.seqs))]
        for i, entries in posted.logprobs.items():
            req.unsent.setdefault(i, []).extend(entries)
        if req.finished:
            with self._cond:
                self.live.pop(id(req), None)
            self._log_request(req)
            self._send(req, texts, True)
        elif req.streaming and any(texts):
            self._send(req, texts, False)

    def _send(self, req: Request, texts: list[str], final: bool) -> None:
        logprobs = [req.unsent.pop(i, []) for i in range(len(req.seqs))]  # the entries so far go with this text
        try:
            self.responder.send(req, texts, final, logprobs)
        except Exception as exc:  # the client went away; the request is over for us
            self.log("verbose", f"{self.name}: request {req.request_id}: response not delivered: {exc}")

    def _check_cancelled(self, live: list[Request]) -> None:
        for req in live:
            if req.cancelled or req.finished:
                continue
            try:
                cancelled = req.sender.is_cancelled()
            except Exception:  # the sender is closed: nothing left to cancel
                cancelled = False
            if cancelled:
                req.cancelled = True
                for seq in req.seqs:
                    self.engine.cancel(seq)

    def _log_request(self, req: Request) -> None:
        reasons = [s.finish_reason or "-" for s in req.seqs]
        self.log(
            "info",
            f"{self.name}: request {req.request_id} prompts={len(req.seqs)} input_tokens={sum(req.input_tokens)} "
            f"output_tokens={sum(len(s.tokens) for s in req.seqs)} finish={','.join(reasons)} "
            f"time={time.perf_counter() - req.started:.3f}s{_controls(req)}",
        )


def _controls(req: Request) -> str:
    """`` controls=max_tokens=8,seed=0,stop=[2]``: the sampling values away from the defaults, as the request's
    sampler got them (strings counted and JSON objects named by their keys, never shown)."""
    changed = req.seqs[0].params.changed() if req.seqs else {}
    shown = [f"{k}=[{len(v)}]" if isinstance(v, tuple) else f"{k}=[{','.join(v)}]" if isinstance(v, dict)
             else f"{k}={v}" for k, v in changed.items()]
    return f" controls={','.join(shown)}" if shown else ""
