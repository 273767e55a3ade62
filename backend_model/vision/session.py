"""The CPU session of a vision-language model: its language model as transformers runs it, fed the vision
encoder's embeddings where the prompt holds image placeholders, as the model's own forward merges them.

It takes a language QPC's inputs (:mod:`..engine.media`): a prefill chunk brings ``vision_embeds`` and
``image_idx`` (the first embedding its placeholders take); a decode step brings neither, and a placeholder token
there is embedded as the token it is, as ``generate`` does once the images are in the cache.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..sessions.hf import TransformersKVSession
from ..sessions.protocol import Dims


def placeholder_id(config: Any) -> int:
    """The image placeholder token of a vision-language model's config."""
    for name in ("image_token_id", "image_token_index"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    raise ValueError(f"{type(config).__name__} names no image token (image_token_id)")


class VisionKVSession(TransformersKVSession):
    """A KV-cache session over a vision-language model (``AutoModelForImageTextToText``): a cache per slot."""

    def __init__(self, model, dims: Dims, precision: str = "fp32") -> None:
        super().__init__(model, dims, precision)
        self.token_id = placeholder_id(model.config)
        self.embed = model.get_input_embeddings()
        self._vision: tuple[np.ndarray, int] | None = None  # this call's embeddings, and the next one's index

    def run(self, inputs: dict) -> dict:
        embeds = inputs.get("vision_embeds")
        if embeds is not None:  # a prompt with images prefills alone (Engine)
            if len(inputs["input_ids"]) != 1:
                raise ValueError("vision_embeds come with a prefill chunk of one row")
            flat = np.asarray(embeds, dtype=np.float32)
            self._vision = flat.reshape(-1, flat.shape[-1]), int(np.asarray(inputs["image_idx"]).reshape(-1)[0])
        try:
            return super().run(inputs)
        finally:
            self._vision = None

    def _logits(self, ids, positions: np.ndarray, **kwargs) -> np.ndarray:
        tokens = torch.as_tensor(np.asarray(ids, dtype=np.int64)).view(1, -1)
        embeds = self.embed(tokens)
        if self._vision is not None:
            table, first = self._vision
            where = tokens[0] == self.token_id
            count = int(where.sum())
            if first + count > len(table):
                raise ValueError(f"the chunk's {count} image placeholders from index {first} go past the "
                                 f"{len(table)} image embeddings")
            if count:
                embeds = embeds.clone()
                embeds[0, where] = torch.from_numpy(table[first : first + count]).to(embeds.dtype)
        out = self.model(inputs_embeds=embeds, position_ids=torch.from_numpy(positions).view(1, -1),
                         logits_to_keep=1, **kwargs)
        return out.logits[0, -1].float().numpy()
