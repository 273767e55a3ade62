"""The completions stream when its feed runs ahead of the reader: each chunk keeps its own response's entries."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from console.clients import GenerationParams, TextDelta
from console.front.completions import Completion, Slot
from console.front.mapping import Job
from console.front.replies import Shape

RESPONSES = [("The", ["The"]), (" cap", [" c", "ap"]), ("ital", ["ital"])]  # each response: its text, its tokens


class Burst:
    """A generation (the front's upstream request) whose responses came before the stream read any."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.taken = 0

    async def deltas(self):
        for text, tokens in RESPONSES:
            self.entries += [{"token": t, "logprob": -1.0, "top": [{"token": t, "logprob": -1.0}]} for t in tokens]
            yield [TextDelta(0, text, 0.0)]

    def tokens(self, i: int = 0) -> list[dict[str, Any]]:
        new, self.taken = self.entries[self.taken:], len(self.entries)
        return new

    def value(self, name: str, i: int = 0) -> Any:
        return "length"


def test_a_chunk_carries_the_entries_of_its_own_text_when_the_reader_lags() -> None:
    job = Job(model="m", chat=False, stream=True, logprobs=1)
    completion = Completion(None, job, None, GenerationParams())
    generation = Burst()
    completion.slots = [Slot(Shape(job), 0, generation)]  # type: ignore[arg-type]

    async def stream() -> list[dict[str, Any]]:
        queue: asyncio.Queue = asyncio.Queue()
        await Completion._feed(generation, queue)  # type: ignore[arg-type]  # every response is in before a read
        events = [e async for e in completion._answers(await queue.get(), queue, 1)]
        return [json.loads(e[len(b"data: "):])["choices"][0] for e in events]

    chunks = asyncio.run(stream())
    assert [c["text"] for c in chunks] == ["The", " cap", "ital", ""]
    assert [c["logprobs"]["tokens"] for c in chunks] == [["The"], [" c", "ap"], ["ital"], []]
    assert [o for c in chunks for o in c["logprobs"]["text_offset"]] == [0, 3, 5, 7]
