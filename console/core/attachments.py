"""Image files a user attaches to a prompt: read once, as they are (the server decodes them), within a size limit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from console.clients import UsageError

MAX_BYTES = 20 * 1024 * 1024  # an image file larger than this is not sent (servers refuse far smaller ones)
SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp")  # what a folder of images holds


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


def image_files(folder: str | Path, option: str = "--images") -> list[Path]:
    """The image files of ``folder`` (by suffix), in name order; UsageError naming ``option`` when there are none."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise UsageError(f"{option} {folder}: not a folder")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in SUFFIXES and p.is_file())
    if not files:
        raise UsageError(f"{option} {folder}: no image files ({', '.join(SUFFIXES)})")
    return files
