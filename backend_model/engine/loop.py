"""The one generation loop: prefill, decode, stop, and the slot scheduler, for every session.

Continuous batching (``full_batch_size``): each free slot is prefilled with the next queued
prompt (``batch_index=[[slot]]``); all slots decode together; a slot is refilled the moment its
sequence ends. Regular mode: prompts run in batches of exactly ``batch_size`` (a short batch is
filled by repeating its prompts, as QEfficient does, but only real prompts report), and the next
batch starts when the whole batch is done. ``step()`` runs one phase and returns the new text of
every sequence it touched, with the log-probabilities of its new tokens when the request asks for them
(:mod:`.logprobs`). A phase is one decode step, or a prefill that runs until a prompt's last chunk is in
the cache: with continuous batching one prompt, in a regular batch the chunks up to the next row whose
prompt ends. So a prompt's first token leaves as soon as its own prefill ends, not after its neighbours'.

A sequence's token comes from its sampler, masked first by its grammar when the request constrains
the reply (:mod:`.grammar`), or, for a forced continuation, from the continuation itself: the engine
feeds the given tokens instead of sampling and reports how likely the model found each one.

Prefix reuse (``prefix_caching``, on sessions that keep a slot's cache after its sequence ends): a slot keeps
the whole prefill chunks of its last prompt, and a prompt that starts with the same tokens is admitted to
that slot and prefills only the rest, from the same chunk boundary. Only whole chunks of a prompt are
reused, never the tokens a decode step wrote, so every number is the one a prefill from token 0 computes:
answers are the same with reuse and without. A slot's cache is reused only by a prompt of the same adapter.

LoRA adapters (a session with ``adapters``, QEfficient's finite LoRAX): a request names one by ``lora_name``; each
row of a run carries its adapter's id in ``lora_ids`` [B, 1] (0: the base, then the adapters in order), so one
step mixes adapters. At most ``max_loras`` adapters share the slots: a prompt of another adapter waits its turn.

A decode step always sends every row. As in QEfficient, a row with nothing to decode (finished,
or a free slot) repeats the token and position it was last fed (zeros before its first use):
rewriting a cache entry with what produced it changes nothing. -1 marks prefill padding only.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..contract.adapters import unknown
from ..contract.errors import BadRequest
from ..sessions.protocol import Session
from .detok import Detokenizer, max_prompt_bytes, token_bytes_table
from .grammar import Grammars, Matcher
from .logprobs import Scores, TokenLogprob, TokenTexts
from .metrics import Meter
from .sampling import Sampler, SamplingParams
from .speculation import propose

_ids = itertools.count(1)


@dataclass
class Sequence:
    """One prompt's generation. ``tag`` is the caller's (e.g. the Triton request it belongs to)."""

    prompt_ids: list[int]
    params: SamplingParams
    sampler: Callable[[np.ndarray, list[int]], int]  # picks the next token from a logits row (given the tokens so far)
    detok: Detokenizer
    tag: Any = None
    id: int = field(default_factory=lambda: next(_ids))
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None  # eos | stop | length | ctx_len | cancelled | error
    error: str | None = None
    filler: bool = False  # a repeated prompt that only fills a regular-mode batch
    cancelled: bool = False
    slot: int = -1
    offered: bool = False  # queued with a free slot waiting for it (see Engine._offer_slots)
    reused: int = 0  # prompt tokens whose cache a slot kept from an earlier prompt (not prefilled again)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per token, when the request asks for them
    reported: int = 0  # entries an update has carried (the rest wait for their tokens' text)
    forced: list[int] | None = None  # a continuation fed instead of sampling (scored, not generated)
    lora: int = 0  # its adapter's id (0: the base model)
    # private state
    grammar: Matcher | None = None
    held: str = ""  # text held back while it may still be the start of a stop string

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def plain_greedy(self) -> bool:
        """Its next token is its logits' argmax: its own greedy sampler (not one a caller put in), not steered by a
        grammar or a forced continuation (a step may choose these tokens in one batched argmax)."""
        return self.grammar is None and self.forced is None and type(self.sampler) is Sampler and self.params.greedy

    @property
    def position(self) -> int:
        """Position of the last token, the one the next decode step feeds."""
        return len(self.prompt_ids) + len(self.tokens) - 1


@dataclass
class Prefill:
    """Sequences being prefilled together, a chunk at a time: their padded prompts and the next chunk to run."""

    group: list[Sequence]
    ids: np.ndarray  # [rows, chunks * prefill_seq_len]; a row's padding is 0
    pos: np.ndarray  # the same shape; -1 marks padding
    ends: list[int]  # each row's last chunk: the one holding its last prompt token
    next: int = 0  # the next chunk to run


@dataclass(frozen=True)
class Update:
    seq: Sequence
    text: str  # new text since the previous update
    finished: bool
    logprobs: tuple[TokenLogprob, ...] = ()  # the entries of the tokens whose text is out (the request asked)


class Engine:
    """Owns a session; thread-safe ``submit``/``cancel``; ``step`` from one worker thread; tells ``meter`` (see
    :mod:`.metrics`) what the loop does."""

    def __init__(self, session: Session, tokenizer, eos_ids: Iterable[int] = (), prefix_caching: bool = True) -> None:
        self.session = session
        self.dims = session.dims
        self.tokenizer = tokenizer
        eos = set(eos_ids)
        if tokenizer.eos_token_id is not None:
            eos.add(tokenizer.eos_token_id)
        self.eos_ids = frozenset(eos)
        self.table = token_bytes_table(tokenizer)
        self.token_texts = TokenTexts(tokenizer, self.table)  # what the logprobs output calls each token
        self.grammars = Grammars(tokenizer, self.dims.vocab, self.eos_ids)
        self.max_prompt_bytes = max_prompt_bytes(tokenizer, self.table, self.dims.ctx_len)  # None: no cheap check
        self.slots: list[Sequence | None] = [None] * self.dims.slots
        self.fed = np.zeros((self.dims.slots, 2), dtype=np.int64)  # each row's last (token, position)
        self._rows = np.arange(self.dims.slots, dtype=np.int64).reshape(-1, 1)  # a decode step's batch_index
        self.queue: deque[Sequence] = deque()
        self.prefilling: Prefill | None = None  # a prefill whose later chunks are still to run
        # prefix reuse: only where the session keeps a slot's cache between sequences
        self.prefix_caching = prefix_caching and bool(getattr(session, "keeps_prefix", False))
        # prompt-lookup speculation: up to this many drafted tokens a decode step, where the session takes several
        # positions of one slot in one step (speculation.py); 0: off
        self.speculative_tokens = 0
        self.held: list[list[int]] = [[] for _ in self.slots]  # each slot's cached prompt tokens, in whole chunks
        # LoRA: the adapters' ids by name (the session's, in order from 1), each slot's adapter, and how many mix
        self.adapters = {name: i + 1 for i, name in enumerate(getattr(session, "adapters", ()))}
        self.max_loras = len(self.adapters)
        self.lora = np.zeros((self.dims.slots, 1), dtype=np.int64)  # what each row was last fed with (its cache's)
        self.freed = [-1] * self.dims.slots  # when each slot was last freed (an engine tick; -1: never used)
        self._ticks = itertools.count()
        self._lock = threading.Condition()
        self.default_max_tokens: int | None = None  # a request without max_tokens gets this (None: to EOS/ctx_len)
        self.meter = Meter()  # told what the loop does (the Triton glue gives it one that publishes)

    # -- requests -------------------------------------------------------------------------
    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer(prompt, add_special_tokens=True)["input_ids"]

    def check_prompt(self, prompt_ids: list[int], what: str = "the prompt") -> None:
        """Raise BadRequest for a prompt the compile dimensions cannot serve (``what``: the prompt's name in it)."""
        if not prompt_ids:
            raise BadRequest(f"{what} is empty")
        if len(prompt_ids) >= self.dims.ctx_len:
            raise BadRequest(
                f"{what} is {len(prompt_ids)} tokens but ctx_len is {self.dims.ctx_len}: "
                "no room to generate (shorten the prompt or compile a longer ctx_len)"
            )

    def check_continuation(self, prompt_ids: list[int], forced: list[int], what: str = "the continuation") -> None:
        """Raise BadRequest for a forced continuation the model cannot score after ``prompt_ids``."""
        if not forced:
            raise BadRequest(f"{what} is empty")
        bad = next((t for t in forced if not 0 <= t < self.dims.vocab), None)
        if bad is not None:
            raise BadRequest(f"{what} has token id {bad}, outside the vocabulary (0 to {self.dims.vocab - 1})")
        if len(prompt_ids) + len(forced) > self.dims.ctx_len:
            raise BadRequest(f"{what} is {len(forced)} tokens after a {len(prompt_ids)}-token prompt, over ctx_len "
                             f"{self.dims.ctx_len}")

    def prepare(self, prompt_ids: list[int], params: SamplingParams, tag: Any = None,
                forced: list[int] | None = None) -> Sequence:
        """A checked sequence, not yet queued (so the caller can record it before it runs).

        ``forced``: score these tokens after the prompt instead of generating (its own log-probabilities
        at least; EOS, stop strings and max_tokens do not end it). A grammar compiles here (BadRequest).
        """
        self.check_prompt(prompt_ids)
        grammar = None
        if forced is not None:
            self.check_continuation(prompt_ids, forced)
            if params.structured_outputs is not None:
                raise BadRequest("a forced continuation is scored as given: it takes no structured_outputs")
            params = replace(params, max_tokens=len(forced), stop=(), min_tokens=0, ignore_eos=True,
                             logprobs=params.logprobs or 0)
        elif params.structured_outputs is not None:
            if params.min_tokens or params.ignore_eos:
                raise BadRequest("structured_outputs ends where its grammar does: it takes no min_tokens or "
                                 "ignore_eos")
            grammar = self.grammars.matcher(params.structured_outputs)
        seq = self._new(prompt_ids, params, tag)
        seq.forced, seq.grammar = forced, grammar
        return seq

    def enqueue(self, seqs: list[Sequence]) -> None:
        self.meter.queued(seqs)
        with self._lock:
            self.queue.extend(seqs)
            self._offer_slots()
            self._lock.notify_all()

    def submit(self, prompt_ids: list[int], params: SamplingParams, tag: Any = None) -> Sequence:
        seq = self.prepare(prompt_ids, params, tag)
        self.enqueue([seq])
        return seq

    def _new(self, prompt_ids: list[int], params: SamplingParams, tag: Any, filler: bool = False) -> Sequence:
        return Sequence(list(prompt_ids), params, Sampler(params), Detokenizer(self.tokenizer, self.table), tag,
                        filler=filler, lora=self.lora_id(params.lora_name))

    def lora_id(self, name: str | None) -> int:
        """The id of adapter ``name`` (None or '': the base, 0); BadRequest naming the served ones."""
        if not name:
            return 0
        if name not in self.adapters:
            raise unknown(name, list(self.adapters))
        return self.adapters[name]

    def _fits(self, seq: Sequence, batch: list[Sequence]) -> bool:
        """Whether ``seq`` may join the slots and ``batch`` without more than ``max_loras`` adapters in them."""
        mixed = {s.lora for s in itertools.chain(self.slots, batch) if s is not None and not s.finished}
        return seq.lora == 0 or seq.lora in mixed or len(mixed - {0}) < self.max_loras

    def cancel(self, seq: Sequence) -> None:
        """Ends ``seq`` at the next step and frees its slot."""
        seq.cancelled = True
        self.wake()

    def _offer_slots(self) -> None:
        """Tell the meter which queued sequences a free slot now waits for (the first in line, one a free slot):
        from then on they wait only for the engine's current step. Called under the lock."""
        if self.dims.continuous:
            free = sum(s is None for s in self.slots)
        else:
            free = self.dims.batch_size if all(s is None for s in self.slots) else 0
        new = [seq for seq in itertools.islice(self.queue, free) if not seq.offered]
        for seq in new:
            seq.offered = True
        if new:
            self.meter.slot_free(new)

    def has_work(self) -> bool:
        return bool(self.queue) or any(s is not None for s in self.slots)

    def wait_for_work(self, timeout: float | None = None) -> bool:
        with self._lock:
            return self._lock.wait_for(self.has_work, timeout)

    def wake(self) -> None:
        with self._lock:
            self._lock.notify_all()

    # -- the loop -------------------------------------------------------------------------
    def step(self) -> list[Update]:
        """One phase: retire cancelled sequences, else go on with a prefill or admit queued prompts and start
        theirs, else decode."""
        updates = self._retire_cancelled()
        if not updates:
            if self.prefilling is None:
                admitted = self._admit()
                if admitted:
                    self.prefilling = self._start_prefill(admitted)
            updates = self._prefill() if self.prefilling is not None else self._decode()
        return [u for u in updates if not u.seq.filler]

    def _retire_cancelled(self) -> list[Update]:
        updates = []
        with self._lock:
            for seq in [s for s in self.queue if s.cancelled]:
                self.queue.remove(seq)
                updates.append(self._finish(seq, "cancelled"))
        for held in self.slots:
            if held is not None and held.cancelled and not held.finished:
                updates.append(self._finish(held, "cancelled"))
        return updates

    def _admit(self) -> list[Sequence]:
        with self._lock:
            if not self.queue:
                return []
            if self.dims.continuous:  # one prompt a phase: its first token leaves when its own prefill ends
                free = [i for i, s in enumerate(self.slots) if s is None]
                batch = [self.queue.popleft()] if free and self._fits(self.queue[0], []) else []
            elif all(s is None for s in self.slots):
                free = list(range(self.dims.batch_size))
                batch = []
                while self.queue and len(batch) < len(free) and self._fits(self.queue[0], batch):
                    batch.append(self.queue.popleft())
                for i in range(len(batch), len(free)):  # fill the batch by repetition (unconstrained, unscored)
                    src = batch[i % len(batch)]
                    params = replace(src.params, logprobs=None, structured_outputs=None)
                    batch.append(self._new(src.prompt_ids, params, None, filler=True))
            else:
                return []
        for seq in batch:
            seq.slot = self._best_slot(free, seq)
            free.remove(seq.slot)
            self.slots[seq.slot] = seq
        self.meter.admitted(batch)
        return batch

    def _reusable(self, slot: int, seq: Sequence) -> int:
        """How many of the sequence's prompt tokens the slot's cache holds already: whole chunks of a common prefix
        computed with the same adapter, leaving at least one token to prefill (its logits give the first token)."""
        if not self.prefix_caching or self.lora[slot, 0] != seq.lora:
            return 0
        held, chunk, prompt_ids = self.held[slot], self.dims.prefill_seq_len, seq.prompt_ids
        common = next((i for i, (a, b) in enumerate(zip(held, prompt_ids)) if a != b), min(len(held), len(prompt_ids)))
        return min(common // chunk, (len(prompt_ids) - 1) // chunk) * chunk

    def _best_slot(self, free: list[int], seq: Sequence) -> int:
        """The free slot whose cache holds the most of the prompt; else the one unused longest (a never used slot
        first), so recent prompts stay for their next turn."""
        def rank(slot: int) -> tuple[int, bool, int]:
            return self._reusable(slot, seq), self.freed[slot] < 0, -self.freed[slot]

        return max(free, key=rank)

    def _start_prefill(self, group: list[Sequence]) -> Prefill:
        """The admitted sequences' prompts, padded to whole chunks, ready to prefill together."""
        chunk = self.dims.prefill_seq_len
        for seq in group:
            seq.reused = self._reusable(seq.slot, seq)
        chunks = -(-max(len(s.prompt_ids) - s.reused for s in group) // chunk)
        ids = np.zeros((len(group), chunks * chunk), dtype=np.int64)
        pos = np.full_like(ids, -1)
        for r, seq in enumerate(group):
            n, start = len(seq.prompt_ids), seq.reused
            ids[r, : n - start] = seq.prompt_ids[start:]
            pos[r, : n - start] = np.arange(start, n)
            self.fed[seq.slot] = (seq.prompt_ids[-1], n - 1)
            self.lora[seq.slot] = seq.lora
            # what the slot will hold: the prompt's whole chunks before the one with its last token (a row that
            # idles repeats that token, and a card computes it again)
            self.held[seq.slot] = seq.prompt_ids[: (n - 1) // chunk * chunk] if self.prefix_caching else []
        return Prefill(group, ids, pos, [(len(s.prompt_ids) - s.reused - 1) // chunk for s in group])

    def _prefill(self) -> list[Update]:
        """Run the prefill's chunks up to the first that ends a row's prompt; those rows' first tokens leave now
        (the other rows go on in the next phase). A session error ends the whole group; the engine serves on."""
        fill = self.prefilling
        assert fill is not None
        try:
            while True:
                logits = self._prefill_chunk(fill)
                ending = [r for r, end in enumerate(fill.ends) if end == fill.next - 1]
                if ending:
                    break
        except Exception as exc:  # the session failed: these sequences end, the engine serves on
            self.prefilling = None
            for seq in fill.group:
                self.held[seq.slot] = []  # what the cache holds is not known now
            return [self._finish(s, "error", f"{type(exc).__name__}: {exc}") for s in fill.group if not s.finished]
        if fill.next > max(fill.ends):
            self.prefilling = None
        rows = [r for r in ending if not fill.group[r].finished]  # a row cancelled meanwhile has ended
        ready = [fill.group[r] for r in rows]
        self.meter.prefilled(ready)  # their first tokens leave with this phase's updates
        return self._advance(ready, logits[:, -1], rows)

    def _prefill_chunk(self, fill: Prefill) -> np.ndarray:
        """Run the next chunk of ``fill`` on the session; its logits (each row's last valid position)."""
        chunk = self.dims.prefill_seq_len
        window = slice(fill.next * chunk, (fill.next + 1) * chunk)
        inputs = {"input_ids": fill.ids[:, window], "position_ids": fill.pos[:, window]}
        if self.dims.continuous:
            inputs["batch_index"] = np.array([[fill.group[0].slot]], dtype=np.int64)
        if self.adapters:
            inputs["lora_ids"] = np.array([[seq.lora] for seq in fill.group], dtype=np.int64)
        started = time.perf_counter()
        logits = self.session.run(inputs)["logits"]
        self.meter.prefill_chunk(time.perf_counter() - started)
        fill.next += 1
        return logits

    def _decode(self) -> list[Update]:
        active = [s for s in self.slots if s is not None and not s.finished]
        if not active:
            return []
        fed, slots = self.fed, [s.slot for s in active]
        fed[slots, 0] = [s.tokens[-1] for s in active]  # idle rows repeat what they were last fed
        fed[slots, 1] = [s.position for s in active]
        drafts = {seq.slot: self._draft(seq) for seq in active} if self.speculative_tokens else {}
        extra = [(slot, token, int(fed[slot, 1]) + 1 + i) for slot, draft in drafts.items()
                 for i, token in enumerate(draft)]  # a drafted token: a row of its own at its slot's next position
        inputs = {"input_ids": fed[:, :1].copy(), "position_ids": fed[:, 1:].copy()}
        if self.dims.continuous or extra:
            inputs["batch_index"] = self._rows
        if self.adapters:
            inputs["lora_ids"] = self.lora
        if extra:
            more = np.array(extra, dtype=np.int64)  # slot, token, position
            for name, column in (("batch_index", 0), ("input_ids", 1), ("position_ids", 2)):
                inputs[name] = np.concatenate([inputs[name], more[:, column : column + 1]])
            if self.adapters:
                inputs["lora_ids"] = np.concatenate([self.lora, self.lora[more[:, 0]]])
        started = time.perf_counter()
        try:
            logits = self.session.run(inputs)["logits"]
        except Exception as exc:
            return [self._finish(s, "error", f"{type(exc).__name__}: {exc}") for s in active]
        self.meter.decode_step(time.perf_counter() - started, active)
        rows = logits[:, -1]  # a view: a row is copied only where a grammar masks it
        if not extra:
            return self._advance(active, rows, slots)
        return self._verify(active, drafts, rows)

    def _draft(self, seq: Sequence) -> list[int]:
        """Tokens to feed after the sequence's last one (prompt lookup): for greedy requests that a grammar or a
        forced continuation does not steer, within its max_tokens and ctx_len."""
        p = seq.params
        if not p.greedy or seq.grammar is not None or seq.forced is not None:
            return []
        room = self.dims.ctx_len - 1 - len(seq.prompt_ids) - len(seq.tokens)
        if p.max_tokens is not None:
            room = min(room, p.max_tokens - len(seq.tokens) - 1)
        return propose(seq.prompt_ids + seq.tokens, min(self.speculative_tokens, room))

    def _verify(self, active: list[Sequence], drafts: dict[int, list[int]], logits: np.ndarray) -> list[Update]:
        """Take each sequence's tokens from its rows in order: its own choice after each fed token, up to the
        first choice that differs from the draft (the rows past it were fed a token it did not choose)."""
        updates, first, drafted, accepted = [], self.dims.slots, 0, 0
        for seq in active:
            draft = drafts.get(seq.slot, [])
            rows = [logits[seq.slot], *logits[first : first + len(draft)]]
            first += len(draft)
            drafted += len(draft)
            for i, row in enumerate(rows):
                update = self._take(seq, row)
                if update is not None:
                    updates.append(update)
                if seq.finished or i == len(draft) or seq.tokens[-1] != draft[i]:
                    break
                accepted += 1
        self.meter.speculated(drafted, accepted)
        return updates

    def _choose(self, seq: Sequence, row: np.ndarray, argmax: int) -> tuple[int, tuple[TokenLogprob, ...]]:
        """The sequence's next token from its logits row, and its entry when the request asks for log-probabilities
        (of the raw row: before the grammar and the sampler). ``argmax``: the row's, when the caller has it (-1)."""
        scores = None if seq.params.logprobs is None else Scores(row, seq.params.logprobs)
        if seq.forced is not None:
            token = seq.forced[len(seq.tokens)]
        elif argmax >= 0:
            token = argmax
        else:
            if seq.grammar is not None:
                row = row.copy()  # masked in place: the session's own array stays as it gave it
                seq.grammar.mask(row)
            token = seq.sampler(row, seq.prompt_ids + seq.tokens if seq.params.repetition_penalty != 1.0 else [])
            if seq.grammar is not None:
                seq.grammar.accept(token)
        return token, () if scores is None else (scores.of(token),)

    def _advance(self, seqs: list[Sequence], logits: np.ndarray, rows: list[int]) -> list[Update]:
        """Choose one token for each sequence from its row of ``logits`` [rows, vocab] (``rows[i]`` is ``seqs[i]``'s),
        detokenise it and apply the stop rules. The plain greedy ones take one argmax for the whole call when
        they are most of its rows (the same first maximum a row's own argmax finds)."""
        plain = [seq.plain_greedy for seq in seqs]
        if 2 * sum(plain) >= len(logits):
            best = logits.argmax(axis=1).tolist()
            argmax = [best[r] if p else -1 for r, p in zip(rows, plain)]
        else:
            argmax = [int(logits[r].argmax()) if p else -1 for r, p in zip(rows, plain)]
        updates = []
        for seq, r, choice in zip(seqs, rows, argmax):
            update = self._take(seq, logits[r], choice)
            if update is not None:
                updates.append(update)
        return updates

    def _take(self, seq: Sequence, row: np.ndarray, argmax: int = -1) -> Update | None:
        """Choose the sequence's next token from ``row`` (``argmax``: the row's, when known), detokenise it and apply
        the stop rules: the update it makes (None: no new text yet)."""
        try:
            token, entry = self._choose(seq, row, argmax)
        except RuntimeError as exc:  # the grammar refused: this sequence ends, the others go on
            return self._finish(seq, "error", str(exc))
        seq.tokens.append(token)
        seq.logprobs.extend(entry)
        if token in self.eos_ids and not seq.params.ignore_eos and len(seq.tokens) > seq.params.min_tokens:
            return self._finish(seq, "eos")
        text = self._emit(seq, seq.detok.add(token))
        if seq.finished:  # a stop string matched
            self._release(seq)
            return self._update(seq, text, True)
        limit = seq.params.max_tokens
        if seq.grammar is not None and seq.grammar.finished:  # nothing but the end can follow
            return self._finish(seq, "stop", prefix=text)
        if limit is not None and len(seq.tokens) >= limit:
            return self._finish(seq, "length", prefix=text)
        if len(seq.prompt_ids) + len(seq.tokens) >= self.dims.ctx_len:
            return self._finish(seq, "ctx_len", prefix=text)
        return self._update(seq, text, False) if text else None

    @staticmethod
    def _update(seq: Sequence, text: str, finished: bool) -> Update:
        """An update of ``text``; its log-probability entries are those of the tokens whose text is now out
        (none while a stop string's possible start is held back; all of them at the end)."""
        entries: tuple[TokenLogprob, ...] = ()
        if finished or (text and not seq.held):
            entries, seq.reported = tuple(seq.logprobs[seq.reported:]), len(seq.logprobs)
        return Update(seq, text, finished, entries)

    def _emit(self, seq: Sequence, new: str) -> str:
        """Append new text, holding back what may begin a stop string; sets finish on a match."""
        stops = seq.params.stop
        if not stops:
            seq.text += new
            return new
        pending = seq.held + new
        for stop in stops:
            at = pending.find(stop)
            if at >= 0:
                seq.held = ""
                seq.finish_reason = "stop"
                seq.text += pending[:at]
                return pending[:at]
        keep = max((k for stop in stops for k in range(1, len(stop)) if pending.endswith(stop[:k])), default=0)
        out, seq.held = pending[: len(pending) - keep], pending[len(pending) - keep :]
        seq.text += out
        return out

    def _finish(self, seq: Sequence, reason: str, error: str | None = None, prefix: str = "") -> Update:
        """End ``seq``: flush its text, record why, free its slot."""
        if seq.finish_reason is None:
            seq.finish_reason = reason
        seq.error = error
        tail = ""
        if reason != "error":
            tail = seq.held + seq.detok.flush()
            seq.held = ""
            seq.text += tail
        self._release(seq)
        return self._update(seq, prefix + tail, True)

    def _release(self, seq: Sequence) -> None:
        self.meter.finished(seq)
        if 0 <= seq.slot < len(self.slots) and self.slots[seq.slot] is seq:
            self.freed[seq.slot] = next(self._ticks)
            if self.dims.continuous:
                self.slots[seq.slot] = None
            elif all(s is None or s.finished or s.filler for s in self.slots):
                self.slots = [None] * len(self.slots)  # the regular batch is done
            with self._lock:
                self._offer_slots()

    # -- in-process use (tests, benchmarks) ------------------------------------------------
    def stream(self, prompts: list[str], params: SamplingParams | None = None,
               seqs: list[Sequence] | None = None) -> Iterator[Update]:
        """Generate for ``prompts`` in this thread, yielding every update (``seqs`` collects them)."""
        submitted = [self.submit(self.encode(p), params or SamplingParams()) for p in prompts]
        if seqs is not None:
            seqs.extend(submitted)
        while not all(s.finished for s in submitted):
            yield from self.step()

    def generate(self, prompts: list[str], params: SamplingParams | None = None) -> list[Sequence]:
        seqs: list[Sequence] = []
        for _ in self.stream(prompts, params, seqs):
            pass
        return seqs
