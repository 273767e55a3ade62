"""``/v1/completions``: one prompt or several (texts or token ids), ``n`` answers to each, and with ``echo`` and
``logprobs`` the prompt's own tokens scored.

The prompts of a request go to the model together, in one Triton request (a request each for a model that takes one
prompt), once for each of the ``n`` answers, with ``seed + i`` when a seed is given. A token-id prompt goes as its
text, by the model's tokenizer on the front. Choice ``p * n + i`` is prompt ``p``'s answer ``i``, as vLLM numbers them;
``usage`` counts each prompt once and every answer.

A prompt is scored by the bundled backend's scoring of a given continuation (:mod:`.scoring`). With ``max_tokens`` 0
and ``echo`` nothing is generated: the choice is the prompt, scored when ``logprobs`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from console.clients import ClientError, GenerationParams, ModelInfo, interface_of

from .errors import APIError, bad_request
from .mapping import Job, token_ids
from .protocol import ChatCompletionResponse, CompletionResponse, UsageInfo
from .replies import DONE, Shape, finish_reason, sse, usage
from .scoring import score
from .upstream import Generation
from .wire import EventStream, unless_gone

ECHO_ONLY_FINISH = "length"  # max_tokens 0: the answer stopped at its limit (vLLM's reason)


@dataclass
class Slot:
    """One choice: prompt ``prompt``'s answer, the ``position``-th prompt of ``generation`` (None: echo only)."""

    shape: Shape
    prompt: int
    generation: Generation | None
    position: int = 0


async def together(*works: Awaitable[Any]) -> None:
    """Run ``works`` at once; the first failure cancels the others and is raised."""
    tasks = [asyncio.ensure_future(w) for w in works]
    try:
        for task in asyncio.as_completed(tasks):
            await task
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Completion:
    """One ``/v1/completions`` request's answer: :meth:`whole`, or :meth:`stream`."""

    def __init__(self, front: Any, job: Job, info: ModelInfo, params: GenerationParams) -> None:
        self.front, self.job, self.info, self.params = front, job, info, params
        self.shape = Shape(job)
        self.texts: list[str] = []  # each prompt's text
        self.ids: list[list[int] | None] = []  # each prompt's tokens, where known
        self.scored: list[list[dict[str, Any]]] | None = None  # each prompt's entries (echo with logprobs)
        self.tokenizer: Any = None  # the model's, when token ids are read or written
        self.generations: list[Generation] = []
        self.slots: list[Slot] = []

    @property
    def scoring(self) -> bool:
        return self.job.echo and self.job.logprobs is not None

    @property
    def generating(self) -> bool:
        return not (self.job.echo and self.params.get("max_tokens") == 0)

    async def _prepare(self) -> None:
        """The prompts' texts (and tokens where needed), and the requests that answer them (not yet sent)."""
        prompts, job = self.job.prompts, self.job
        if self.scoring and self.info.input("continuation") is None:
            raise bad_request(f"model {self.info.name} cannot score a prompt's tokens (it has no continuation input): "
                              "echo with logprobs needs the bundled backend", "echo")
        if self.scoring or not all(isinstance(p, str) for p in prompts):
            try:
                self.tokenizer = await self.front.tokenizers.load(self.info)
            except ClientError as exc:
                raise bad_request(f"{exc}: token-id prompts and prompt scoring need the model's tokenizer "
                                  f"(qaic-console openai --tokenizer {self.info.name}=FOLDER)", "prompt") from None
        tokenizer = self.tokenizer
        for prompt in prompts:
            if isinstance(prompt, str):
                text, ids = prompt, None
                if self.scoring:
                    ids = (await asyncio.to_thread(tokenizer, prompt, add_special_tokens=True))["input_ids"]
            else:
                ids = token_ids(prompt, len(tokenizer), "prompt")
                text = await asyncio.to_thread(tokenizer.decode, ids)
            self.texts.append(text)
            self.ids.append(ids)
        shapes = [Shape(job, i, self.shape) for i in range(len(prompts) * job.n)]
        if not self.generating:
            self.slots = [Slot(shapes[c], c // job.n, None) for c in range(len(shapes))]
            return
        groups = [list(range(len(prompts)))] if interface_of(self.info).batches_prompts else \
            [[p] for p in range(len(prompts))]
        seed, rid = self.params.get("seed"), self.params.request_id
        by_index: dict[int, Slot] = {}
        for i in range(job.n):
            try:
                params = self.params if seed is None or i == 0 else self.params.replace(seed=seed + i)
            except ClientError as exc:  # seed + i past the control's range
                raise bad_request(f"{exc} (answer {i + 1} of n {job.n} is sampled with seed + {i})", "seed") from None
            for group in groups:
                k = len(self.generations)
                generation = Generation(self.front.upstream, self.info, [self.texts[p] for p in group], params.replace(
                    request_id=f"{rid}-{k}" if k else rid), self.info.default_timeout, self.front.metrics.waiting)
                self.generations.append(generation)
                for position, p in enumerate(group):
                    by_index[p * job.n + i] = Slot(shapes[p * job.n + i], p, generation, position)
        self.slots = [by_index[c] for c in sorted(by_index)]

    async def _score(self) -> None:
        top = self.job.logprobs
        if self.scoring and top is not None:
            prompts = [ids for ids in self.ids if ids is not None]  # all of them: _prepare tokenised each to score
            self.scored = await score(self.front.upstream, self.info, self.tokenizer, prompts, top,
                                      f"{self.params.request_id}-scored", self.params.get("lora_name"))

    def _text(self, slot: Slot) -> str:
        echo = self.texts[slot.prompt] if self.job.echo else ""
        return echo + (slot.generation.collected.texts[slot.position] if slot.generation else "")

    def _finish(self, slot: Slot) -> str:
        if slot.generation is None:
            return ECHO_ONLY_FINISH
        return finish_reason(slot.generation.value("finish_reason", slot.position))

    async def counts(self) -> UsageInfo:
        """``usage``: each prompt once, every answer; the model's counts, else the front's tokenizer's."""
        prompt: int | None = 0
        completion: int | None = 0
        firsts = {slot.prompt: slot for slot in reversed(self.slots)}
        for p, slot in sorted(firsts.items()):
            sent = slot.generation.value("input_tokens", slot.position) if slot.generation else None
            if sent is None:
                ids = self.ids[p]
                sent = len(ids) if ids is not None else await self.front.tokenizers.count(self.info, self.texts[p])
            prompt = None if prompt is None or sent is None else prompt + sent
        for slot in self.slots:
            if slot.generation is None:
                continue
            made = slot.generation.value("output_tokens", slot.position)
            if made is None:
                made = await self.front.tokenizers.count(self.info, slot.generation.collected.texts[slot.position])
            completion = None if completion is None or made is None else completion + made
        return usage(prompt, completion)

    def _tokens(self, slot: Slot) -> list[dict[str, Any]] | None:
        """The choice's log-probability entries: its prompt's (scored) and its answer's."""
        made = slot.generation.tokens(slot.position) if slot.generation else []
        if self.scored is None:
            return made
        return self.scored[slot.prompt] + (made or [])

    async def whole(self) -> ChatCompletionResponse | CompletionResponse:
        await self._prepare()
        await together(self._score(), *(self._drain(g) for g in self.generations))
        choices = [slot.shape.choice(self._text(slot), self._finish(slot), self._tokens(slot)) for slot in self.slots]
        return self.shape.answer(choices, await self.counts())

    @staticmethod
    async def _drain(generation: Generation) -> None:
        async with contextlib.aclosing(generation.deltas()) as deltas:
            async for _ in deltas:
                pass

    async def stream(self, request: Request, headers: dict[str, str]) -> Response:
        """Server-sent events, once the model answered first (a refusal keeps its status)."""
        events = self.events()
        try:
            first = await unless_gone(request, anext(events))
        except BaseException:
            await events.aclose()
            raise
        return EventStream(self._then(first, events), headers=headers)

    @staticmethod
    async def _then(first: bytes, rest: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
        try:
            yield first
            async for event in rest:
                yield event
        finally:
            await rest.aclose()

    async def events(self) -> AsyncGenerator[bytes, None]:
        """The echoed prompts, then each answer's text as it comes, each choice's end, the usage and ``[DONE]``. Nothing
        is yielded before the scoring and a first response (their errors are raised); later errors end the stream."""
        await self._prepare()
        queue: asyncio.Queue[tuple[Generation, Any]] = asyncio.Queue()
        feeds = [asyncio.ensure_future(self._feed(g, queue)) for g in self.generations]
        started = False
        try:
            await self._score()
            first = await queue.get() if feeds else None
            if first is not None and isinstance(first[1], APIError):
                raise first[1]
            started = True
            for slot in self.slots:
                if self.job.echo:
                    yield slot.shape.chunk(self.texts[slot.prompt], tokens=self.scored[slot.prompt]
                                           if self.scored is not None else None)
                if slot.generation is None:
                    yield slot.shape.chunk("", finish=ECHO_ONLY_FINISH, tokens=[])
            async for event in self._answers(first, queue, len(feeds)):
                yield event
            if self.job.include_usage:
                yield self.shape.usage_chunk(await self.counts())
        except APIError as exc:
            if not started:
                raise
            yield sse(exc.body())
        finally:
            for feed in feeds:
                feed.cancel()
            await asyncio.gather(*feeds, return_exceptions=True)
        yield DONE

    async def _answers(self, item: tuple[Generation, Any] | None, queue: asyncio.Queue, feeds: int
                       ) -> AsyncIterator[bytes]:
        """Each generation's responses from ``queue`` (``item`` first) as chunks, until all ``feeds`` ended."""
        slots = {(id(s.generation), s.position): s for s in self.slots}
        while item is not None:
            generation, new = item
            if isinstance(new, APIError):
                raise new
            if new is None:
                feeds -= 1
                for slot in self.slots:
                    if slot.generation is generation:
                        yield slot.shape.chunk("", finish=self._finish(slot), tokens=generation.tokens(slot.position))
            else:
                for delta, tokens in new:
                    yield slots[(id(generation), delta.index)].shape.chunk(delta.text, tokens=tokens)
            item = await queue.get() if feeds else None

    @staticmethod
    async def _feed(generation: Generation, queue: asyncio.Queue) -> None:
        """``generation``'s responses into ``queue``, each delta with the log-probability entries that came with it
        (taken now: the feed runs ahead of the stream, and a later response's entries must not go with this text),
        then None (or its APIError)."""
        try:
            async with contextlib.aclosing(generation.deltas()) as deltas:
                async for new in deltas:
                    await queue.put((generation, [(delta, generation.tokens(delta.index)) for delta in new]))
        except APIError as exc:
            await queue.put((generation, exc))
            return
        await queue.put((generation, None))

