"""A request's ``images`` input: encoded bytes, each decoded by PIL into an RGB image, with its digest.

Every refusal is a BadRequest naming the input's element (``images[1]``). Pillow's own decompression-bomb guard
stays on: an image past its pixel limit is refused, not decoded.
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

from ..contract.errors import BadRequest

MAX_IMAGE_BYTES = 20 * 1024 * 1024  # one encoded image; the front refuses smaller ones first


def decode(items: list[bytes], max_images: int) -> tuple[list[Any], list[str]]:
    """(RGB PIL images, SHA-256 hex digests of their bytes) of the ``images`` input's elements."""
    from PIL import Image

    if len(items) > max_images:
        raise BadRequest(f"images takes at most {max_images} image{'s' if max_images > 1 else ''} per request "
                         f"(this model's max_images), got {len(items)}")
    images, digests = [], []
    for i, data in enumerate(items):
        if not isinstance(data, bytes):
            raise BadRequest(f"images[{i}] must be the encoded bytes of an image")
        if len(data) > MAX_IMAGE_BYTES:
            raise BadRequest(f"images[{i}] is {len(data)} bytes, over the {MAX_IMAGE_BYTES} this model reads")
        try:
            with Image.open(io.BytesIO(data)) as opened:
                images.append(opened.convert("RGB"))
        except Exception as exc:  # PIL raises many kinds (UnidentifiedImageError, DecompressionBombError, OSError)
            raise BadRequest(f"images[{i}] is not an image this model can open ({type(exc).__name__})") from None
        digests.append(hashlib.sha256(data).hexdigest())
    return images, digests
