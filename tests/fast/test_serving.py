"""The serving loop behind the Triton glue (engine thread + response thread), without a server.

A recording responder stands in for Triton's response senders and a zero-cost session for the model
(optionally gated, so the test lets the engine take one step at a time). What the glue promises:
exactly one final response per request (cancellation and errors included), streamed texts that
join to the engine's, cancellation reaching the engine within a step or so, requests sharing the
slots, and a slow client losing nothing (the steps it lags behind arrive joined).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
from transformers import AutoTokenizer

from backend_model.engine.logprobs import TokenLogprob
from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.models import prepare_embedded
from backend_model.sessions.protocol import Dims
from backend_model.triton.serving import Request, Serving
from console.bench.engine import ZeroCostSession, digit_tokens, digits_after

WAIT = 60.0  # generous: only a broken loop ever waits this long


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))


class Sender:
    """A response sender's cancellation flag, as the response thread sees it (``checks``: how often)."""

    def __init__(self, cond: threading.Condition) -> None:
        self.cancelled = False
        self.checks = 0
        self._cond = cond

    def is_cancelled(self) -> bool:
        with self._cond:
            self.checks += 1
            self._cond.notify_all()
        return self.cancelled


class Responder:
    """Records every response; sends of requests in ``gone`` raise after recording (the client left)."""

    def __init__(self, gone: tuple[str, ...] = ()) -> None:
        self.sent: list[tuple[str, list[str], bool]] = []
        self.logprobs: list[tuple[str, list[str], list[list[TokenLogprob]]]] = []  # (request, texts, entries)
        self.gone = gone
        self.hold: threading.Event | None = None  # when set up, a partial send waits for it
        self._cond = threading.Condition()  # shared with the session, so a wait sees both move

    def send(self, req: Request, texts: list[str], final: bool, logprobs: list[list[TokenLogprob]]) -> None:
        if self.hold is not None and not final:
            assert self.hold.wait(WAIT)
        with self._cond:
            self.sent.append((req.request_id, list(texts), final))
            self.logprobs.append((req.request_id, list(texts), logprobs))
            self._cond.notify_all()
        if req.request_id in self.gone:
            raise RuntimeError("the client went away")

    def wait(self, done: Callable[[], bool]) -> None:
        with self._cond:
            assert self._cond.wait_for(done, WAIT)

    def of(self, request_id: str) -> list[tuple[list[str], bool]]:
        return [(texts, final) for rid, texts, final in self.sent if rid == request_id]

    def finished(self, *request_ids: str) -> bool:
        return all(any(final for _, final in self.of(r)) for r in request_ids)


class Session(ZeroCostSession):
    """Zero cost; ``gate`` makes every run wait for a permit; ``fail_at`` makes that run raise."""

    def __init__(self, dims: Dims, pattern: list[int], cond: threading.Condition, gate: bool = False,
                 fail_at: int = 0) -> None:
        super().__init__(dims, pattern)
        self.gate = threading.Semaphore(0) if gate else None
        self.fail_at = fail_at
        self.runs = 0  # runs started (a gated one may still wait)
        self.widest = 0  # most rows of one decode run that fed a new token (idle rows repeat their last)
        self._fed = np.zeros((dims.slots, 2), dtype=np.int64)  # what the engine starts idle rows on
        self._cond = cond

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._cond:
            self.runs += 1
            self._cond.notify_all()
            run = self.runs
        if self.gate is not None:
            assert self.gate.acquire(timeout=WAIT)
        if run == self.fail_at:
            raise RuntimeError("device lost")
        if inputs["position_ids"].shape[1] == 1:
            fed = np.concatenate([inputs["input_ids"], inputs["position_ids"]], axis=1)
            self.widest = max(self.widest, int((fed != self._fed).any(axis=1).sum()))
            self._fed = fed
        return super().run(inputs)

    def wait(self, done: Callable[[], bool]) -> None:
        """Until ``done()`` holds, checked as each run starts."""
        with self._cond:
            assert self._cond.wait_for(done, WAIT)

    def step(self, until: Callable[[], bool], sender: Sender) -> None:
        """Let one run (here: one engine step) through; wait until ``until()`` holds, or the engine starts
        the next run and the response thread has looked at ``sender`` since (as when a step takes longer
        than a round of responses)."""
        with self._cond:
            started, checks = self.runs, sender.checks
        self.gate.release()
        with self._cond:
            assert self._cond.wait_for(lambda: until() or (self.runs > started and sender.checks > checks), WAIT)


def serving(tokenizer, responder: Responder | None = None, slots: int = 8, **session):
    dims = Dims(1, 32, 2048, len(tokenizer), slots)
    responder = responder or Responder()
    engine = Engine(Session(dims, digit_tokens(tokenizer), responder._cond, **session), tokenizer)
    logs: list[tuple[str, str]] = []
    return Serving(engine, responder, lambda level, m: logs.append((level, m)), "test"), logs


def submit(serve: Serving, request_id: str, prompts: list[str], max_tokens: int, streaming: bool = True) -> Request:
    ids = [serve.engine.encode(p) for p in prompts]
    req = Request(Sender(serve.responder._cond), request_id, prompts, [len(i) for i in ids], streaming=streaming,
                  key=f"triton-{request_id}")
    serve.submit(req, ids, SamplingParams(max_tokens=max_tokens))
    return req


def joined(responses: list[tuple[list[str], bool]], index: int = 0) -> str:
    return "".join(texts[index] for texts, _ in responses)


def test_every_request_ends_with_one_final_and_its_streamed_texts_join(tokenizer) -> None:
    serve, logs = serving(tokenizer)
    try:
        reqs = [submit(serve, "a", ["My name is"], 40), submit(serve, "b", ["1, 2, 3", "Hello there"], 25),
                submit(serve, "c", ["x"], 1)]
        serve.responder.wait(lambda: serve.responder.finished("a", "b", "c"))
    finally:
        serve.stop()
    for req in reqs:
        responses = serve.responder.of(req.request_id)
        assert [final for _, final in responses] == [False] * (len(responses) - 1) + [True]
        for i, seq in enumerate(req.seqs):
            assert joined(responses, i) == seq.text == digits_after(len(seq.prompt_ids), len(seq.tokens))
            assert seq.finish_reason == "length"
    assert [len(s.tokens) for s in reqs[1].seqs] == [25, 25] and not serve.live
    lines = [m for level, m in logs if level == "info"]
    assert len(lines) == 3 and all("finish=length" in m for m in lines)


def test_batch_mode_answers_once_at_the_end(tokenizer) -> None:
    serve, _ = serving(tokenizer)
    try:
        req = submit(serve, "batch", ["My name is", "x"], 30, streaming=False)
        serve.responder.wait(lambda: serve.responder.finished("batch"))
    finally:
        serve.stop()
    assert len(serve.responder.of("batch")) == 1 and serve.responder.of("batch")[0][1]
    assert all(len(s.tokens) == 30 for s in req.seqs)


def test_requests_share_the_slots(tokenizer) -> None:
    serve, _ = serving(tokenizer, slots=4)
    try:
        for name in "pqrst":  # five requests, four slots: one waits for a free slot
            submit(serve, name, [f"prompt {name}"], 200)
        serve.responder.wait(lambda: serve.responder.finished(*"pqrst"))
    finally:
        serve.stop()
    assert serve.engine.session.widest == 4


def test_cancellation_reaches_the_engine_within_a_step_or_so(tokenizer) -> None:
    serve, logs = serving(tokenizer, gate=True)
    session = serve.engine.session
    try:
        req = submit(serve, "long", ["Count:"], 1000)
        assert serve.find("triton-long") is req and serve.find("triton-other") is None
        while len(serve.responder.of("long")) < 3:  # the request streams: a response per step
            session.step(lambda: len(serve.responder.of("long")) >= 3, req.sender)
        req.sender.cancelled = True
        steps = 0
        while not serve.responder.finished("long"):
            steps += 1
            session.step(lambda: serve.responder.finished("long"), req.sender)
        assert steps <= 2
    finally:
        serve.stop()
    (seq,) = req.seqs
    assert seq.finish_reason == "cancelled" and len(seq.tokens) < 1000 and serve.find("triton-long") is None
    assert [final for _, final in serve.responder.of("long")].count(True) == 1
    assert any("request long" in m and "finish=cancelled" in m for _, m in logs)


def test_a_failing_session_ends_its_requests_once_and_serving_goes_on(tokenizer) -> None:
    serve, logs = serving(tokenizer, fail_at=5)
    try:
        broken = submit(serve, "broken", ["My name is"], 50)
        serve.responder.wait(lambda: serve.responder.finished("broken"))
        after = submit(serve, "after", ["My name is"], 5)
        serve.responder.wait(lambda: serve.responder.finished("after"))
    finally:
        serve.stop()
    assert broken.seqs[0].finish_reason == "error" and "device lost" in broken.seqs[0].error
    assert [final for _, final in serve.responder.of("broken")].count(True) == 1
    assert after.seqs[0].finish_reason == "length" and joined(serve.responder.of("after"))


def test_a_client_that_went_away_does_not_hold_up_the_others(tokenizer) -> None:
    serve, logs = serving(tokenizer, responder=Responder(gone=("gone",)))
    try:
        submit(serve, "gone", ["My name is"], 30)
        stays = submit(serve, "stays", ["Hello"], 30)
        serve.responder.wait(lambda: serve.responder.finished("gone", "stays"))
    finally:
        serve.stop()
    assert [final for _, final in serve.responder.of("gone")].count(True) == 1
    assert joined(serve.responder.of("stays")) == stays.seqs[0].text and len(stays.seqs[0].tokens) == 30
    assert any(level == "verbose" and "not delivered" in m for level, m in logs)


def test_a_slow_client_gets_every_token_with_the_steps_it_missed_joined(tokenizer) -> None:
    responder = Responder()
    responder.hold = threading.Event()
    serve, _ = serving(tokenizer, responder=responder)
    try:
        req = submit(serve, "slow", ["My name is"], 300)
        seq = req.seqs[0]
        serve.engine.session.wait(lambda: len(seq.tokens) >= 100)  # the engine steps on while a send is held
        responder.hold.set()
        responder.wait(lambda: responder.finished("slow"))
    finally:
        responder.hold.set()
        serve.stop()
    responses = responder.of("slow")
    assert joined(responses) == seq.text == digits_after(len(seq.prompt_ids), 300)
    first, second = (texts[0] for texts, _ in responses[:2])
    # everything the engine posted while the first send was held (>= 100 tokens in all) came in the next one
    assert len(first) + len(second) >= 100, (len(first), len(second))


def test_logprob_entries_travel_with_the_text_of_their_tokens(tokenizer) -> None:
    serve, _ = serving(tokenizer)
    ids = [serve.engine.encode("My name is")]
    streamed = Request(Sender(serve.responder._cond), "lp", ["My name is"], [len(ids[0])], key="triton-lp")
    once = Request(Sender(serve.responder._cond), "lp-once", ["My name is"], [len(ids[0])], streaming=False)
    try:  # "5x" holds a 5 back until the next digit shows it is no stop: its entry waits with it
        serve.submit(streamed, ids, SamplingParams(max_tokens=30, logprobs=2, stop=("5x",)))
        serve.submit(once, ids, SamplingParams(max_tokens=30, logprobs=0))
        serve.responder.wait(lambda: serve.responder.finished("lp", "lp-once"))
    finally:
        serve.stop()
    sent = [(texts[0], entries[0]) for rid, texts, entries in serve.responder.logprobs if rid == "lp"]
    assert all(len(entries) == len(text) for text, entries in sent)  # one digit, one token, one entry
    assert any(text.startswith("5") and len(text) == 2 for text, _ in sent)  # the held 5 came with the next digit
    seq = streamed.seqs[0]
    assert [e.id for _, entries in sent for e in entries] == seq.tokens and seq.logprobs == [e for _, es in sent
                                                                                              for e in es]
    assert all(len(e.top) == 2 and e.top[0][0] == e.id for e in seq.logprobs)
    (texts, entries), = [(t, e) for rid, t, e in serve.responder.logprobs if rid == "lp-once"]
    assert len(entries[0]) == 30 and [e.id for e in entries[0]] == once.seqs[0].tokens
    assert all(e.top == () for e in entries[0])  # 0: the chosen token's only


class Counting:
    """A session that counts the rows of every run it is given (prefill chunks and decode steps)."""

    def __init__(self, session) -> None:
        self.session, self.dims, self.runs = session, session.dims, []

    def run(self, inputs):
        self.runs.append(inputs["input_ids"].shape)
        return self.session.run(inputs)


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "regular"])
def test_a_first_token_leaves_when_its_own_prompt_is_prefilled(continuous: bool) -> None:
    """Not after its neighbours' prefill: with continuous batching each phase prefills one prompt; in a regular
    batch a phase runs chunks until a row's prompt ends, and that row's first token leaves then."""
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    dims = Dims(batch_size=1 if continuous else 3, prefill_seq_len=4, ctx_len=64, vocab=len(tokenizer),
                full_batch_size=3 if continuous else 0)
    session = Counting(ZeroCostSession(dims, digit_tokens(tokenizer)))
    engine = Engine(session, tokenizer)
    lengths = (9, 2, 5)  # 3 chunks, 1, 2
    seqs = [engine.submit(list(range(100, 100 + n)), SamplingParams(max_tokens=2, ignore_eos=True)) for n in lengths]
    firsts = []
    while not all(s.tokens for s in seqs):
        ran = len(session.runs)
        firsts.append(([seqs.index(u.seq) for u in engine.step()], len(session.runs) - ran))
    if continuous:  # prompt by prompt, each with all its chunks
        assert firsts == [([0], 3), ([1], 1), ([2], 2)]
    else:  # one batch, a chunk at a time: the short prompt's token leaves after the first chunk
        assert firsts == [([1], 1), ([2], 1), ([0], 1)]
    assert all(len(s.tokens) == 1 for s in seqs), "nothing decodes before every prompt is in the cache"
    while not all(s.finished for s in seqs):
        engine.step()
    assert [len(s.tokens) for s in seqs] == [2, 2, 2]
