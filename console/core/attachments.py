"""Image files a user attaches to a prompt: read once, as they are (the server decodes them), within a size limit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from console.clients import UsageError

MAX_BYTES = 20 * 1024 * 1024  # an image file larger than this is not sent (servers refuse far smaller ones)


def read_images(paths: Sequence[str | Path]) -> tuple[bytes, ...]:
    """Each file's bytes; UsageError naming a file that cannot be read, is empty or is over :data:`MAX_BYTES`."""
    images = []
    for given in paths:
        path = Path(given).expanduser()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"image {given}: {exc.strerror or exc}") from None
        if not data or len(data) > MAX_BYTES:
            raise UsageError(f"image {given} is {len(data)} bytes: attach an image of 1 byte to {MAX_BYTES}")
        images.append(data)
    return tuple(images)
