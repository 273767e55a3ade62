"""A prompt's images as its prefill feeds them: the vision encoder's output, fed as QEfficient feeds its language
QPC (``vision_embeds`` beside each prefill chunk, ``image_idx`` the first of them the chunk's placeholders take).

Prefix reuse compares a prompt's key, not its tokens: each image placeholder token carries the digest of the
prompt's images, so two prompts that differ only in their images never share a cached chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Media:
    """``embeds``: the vision encoder's output for the prompt's images, in their order ([images, tokens, hidden],
    or [1, tokens, hidden]); ``token_id``: the placeholder a prompt holds once per embedding row; ``digest``: of
    the images' bytes, in order."""

    embeds: np.ndarray
    token_id: int
    digest: str

    def key(self, prompt_ids: list[int]) -> list[Any]:
        """The prompt's tokens, each placeholder paired with the images' digest (the prefix key)."""
        return [(t, self.digest) if t == self.token_id else t for t in prompt_ids]

    def inputs(self, prompt_ids: list[int], start: int) -> dict:
        """The vision inputs of a prefill chunk that starts at ``start``: the embeddings, and the index of the first
        one its placeholders take (the placeholders before it)."""
        before = sum(1 for t in prompt_ids[:start] if t == self.token_id)
        return {"vision_embeds": self.embeds, "image_idx": np.array([[before]], dtype=np.int64)}
