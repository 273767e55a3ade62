"""Images in a conversation: where the consoles' attached images go (before the text of the last user message, as a
model's processor places an image before its prompt) and an image as a data URL (the OpenAI API's ``image_url``)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

# an image format's first bytes -> its media type (a data URL names it; the rest go as PNG: servers sniff the bytes)
SIGNATURES = {b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF87a": "image/gif",
              b"GIF89a": "image/gif", b"BM": "image/bmp", b"RIFF": "image/webp"}


def media_type(image: bytes) -> str:
    return next((kind for head, kind in SIGNATURES.items() if image.startswith(head)), "image/png")


def data_url(image: bytes) -> str:
    return f"data:{media_type(image)};base64,{base64.b64encode(image).decode('ascii')}"


def has_image_parts(messages: Sequence[dict[str, Any]]) -> bool:
    return any(isinstance(m.get("content"), list) and any(p.get("type") != "text" for p in m["content"])
               for m in messages)


def placed(messages: Sequence[dict[str, Any]], parts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with ``parts`` before the text of the last user message (a conversation that already has image
    parts is left as it is: its images stand where its sender put them)."""
    out = [dict(m) for m in messages]
    if not parts or has_image_parts(out):
        return out
    last = max((i for i, m in enumerate(out) if m.get("role") == "user"), default=None)
    if last is None:
        out.append({"role": "user", "content": list(parts)})
        return out
    text = out[last].get("content") or ""
    out[last]["content"] = [*parts, {"type": "text", "text": text}] if isinstance(text, str) else [*parts, *text]
    return out
