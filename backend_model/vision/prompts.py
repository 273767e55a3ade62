"""A request with images -> the prompt's tokens (images expanded by the model's processor) and its Media.

The prompt comes as chat ``messages`` (an image part ``{"type": "image"}`` takes the next image, in order) rendered
by the processor's chat template, or as plain text, the images placed before it as the processor's image token.
The processor then expands each image token into the placeholders its embeddings fill, and preprocesses the
images; the encoder (:mod:`.encoders`) turns them into embeddings.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Dict

import numpy as np

from ..contract.errors import BadRequest
from ..engine.media import Media
from .images import decode

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")
Encoder = Callable[[Dict[str, Any]], np.ndarray]


def image_parts(chat: list[dict[str, Any]]) -> int:
    """The image parts of a conversation's messages."""
    return sum(1 for m in chat if isinstance(m["content"], list) for p in m["content"] if p.get("type") == "image")


class ImagePrompts:
    """The model's processor and vision encoder, and how many images a request may bring."""

    def __init__(self, processor: Any, encoder: Encoder, token_id: int, max_images: int) -> None:
        self.processor = processor
        self.encoder = encoder
        self.token_id = token_id
        self.max_images = max_images

    def render(self, prompt: str | None, chat: list[dict[str, Any]] | None, count: int) -> str:
        """The prompt's text before the processor expands its image tokens."""
        if chat is None:
            return str(getattr(self.processor, "image_token", "<image>")) * count + (prompt or "")
        parts = image_parts(chat)
        if parts != count:
            raise BadRequest(f"the messages have {parts} image part{'s' if parts != 1 else ''} but images holds "
                             f"{count}: each image part takes the next image")
        try:
            return self.processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # the template's own refusal
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise BadRequest(f"the chat template refuses the messages: {reason}") from None

    def prepare(self, prompt: str | None, chat: list[dict[str, Any]] | None, images: list[bytes]
                ) -> tuple[str, list[int], Media]:
        """(the prompt's text, its tokens with the images' placeholders, its Media); BadRequest naming the input."""
        decoded, digests = decode(images, self.max_images)
        text = self.render(prompt, chat, len(decoded))
        try:
            out = self.processor(text=[text], images=decoded, return_tensors="pt")
        except Exception as exc:  # e.g. an image the processor cannot size
            raise BadRequest(f"the model's processor refuses the images: {str(exc)[:200]}") from None
        ids = out["input_ids"][0].tolist()
        embeds = self.encoder({k: v for k, v in out.items() if k not in TEXT_INPUTS})
        placeholders = sum(1 for t in ids if t == self.token_id)
        rows = int(np.prod(embeds.shape[:-1]))
        if placeholders != rows:
            raise ValueError(f"the prompt holds {placeholders} image placeholders but the encoder gave {rows} "
                             "embeddings")
        digest = hashlib.sha256("".join(digests).encode()).hexdigest()
        return text, ids, Media(embeds, self.token_id, digest)
