"""A prompt's own tokens scored (``echo`` with ``logprobs``) by the bundled backend's scoring of a given continuation:
no second scorer.

The backend takes a prompt as text and scores the ``continuation`` it is given, as token ids, after it: each token's
log-probability after every token before it (teacher forcing), with ``logprobs`` alternatives. So a prompt's tokens
are scored as the continuation of its head, the fewest first tokens whose text the model's tokenizer reads back as
exactly them (its first token, for most tokenizers): the numbers are the model's own for those positions, as a
prefill would give them. The head's tokens get none (null), as vLLM gives a prompt's first token none.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from console.clients import GenerationParams, ModelInfo

from .errors import APIError, bad_request
from .protocol import Upstream
from .upstream import Generation

MAX_HEAD = 8  # tokens tried as the head before a prompt is said to be unscorable


def head(tokenizer: Any, ids: list[int], which: str) -> tuple[int, str]:
    """The fewest first tokens of ``ids`` whose text the tokenizer reads back (as the backend reads a prompt: special
    tokens added) as exactly them, and that text; APIError 400 naming ``which`` prompt when none of the first
    :data:`MAX_HEAD` do."""
    for k in range(1, min(len(ids), MAX_HEAD) + 1):
        for skip in (False, True):
            text = tokenizer.decode(ids[:k], skip_special_tokens=skip)
            if text.strip() and tokenizer(text, add_special_tokens=True)["input_ids"] == ids[:k]:
                return k, text
    raise bad_request(f"{which}: its first tokens do not read back from their text, so it cannot be sent to be "
                      "scored", "prompt")


def unscored(tokenizer: Any, ids: list[int]) -> list[dict[str, Any]]:
    """Entries for tokens that have no log-probability: each one's text (what it adds to the text before it)."""
    entries, before = [], ""
    for j in range(len(ids)):
        now = tokenizer.decode(ids[:j + 1])
        entries.append({"id": ids[j], "token": now[len(before):] if now.startswith(before) else now, "logprob": None,
                        "top": None})
        before = now
    return entries


async def score(upstream: Upstream, info: ModelInfo, tokenizer: Any, prompts: Sequence[list[int]], top: int,
                request_id: str, adapter: str | None = None) -> list[list[dict[str, Any]]]:
    """Each prompt's tokens' entries (``backend_model.engine.logprobs``' shape, ``top`` alternatives): its head's
    without a log-probability, then the backend's (of the LoRA ``adapter``, if one), all prompts in one request."""
    count = len(prompts)

    def split() -> list[tuple[int, str]]:
        return [head(tokenizer, ids, f"prompt {i + 1} of {count}" if count > 1 else "the prompt")
                for i, ids in enumerate(prompts)]

    heads = await asyncio.to_thread(split)
    entries = [unscored(tokenizer, ids[:k]) for ids, (k, _) in zip(prompts, heads)]
    scored = [i for i, (k, _) in enumerate(heads) if k < len(prompts[i])]
    if not scored:
        return entries
    params = GenerationParams(logprobs=top, lora_name=adapter, request_id=request_id,
                              continuations=tuple(prompts[i][heads[i][0]:] for i in scored))
    generation = Generation(upstream, info, [heads[i][1] for i in scored], params, info.default_timeout)
    async with contextlib.aclosing(generation.deltas()) as responses:
        async for _ in responses:
            pass
    got = generation.collected.logprobs
    if got is None:
        raise APIError(502, f"model {info.name} sent no log-probabilities for the prompt's tokens")
    for position, i in enumerate(scored):
        entries[i] += got[position]
    return entries
