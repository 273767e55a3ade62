"""An eval's image prompts: the n-th prompt takes the n-th image file of a folder (in name order, in turn).

The report and the golden file keep each prompt's images as their files and digests; ``eval compare`` reads the
recorded files again and refuses one whose bytes changed since, so a later run asks exactly what was recorded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console.clients import UsageError
from console.core.attachments import image_files, read_images

PROMPTS = Path(__file__).resolve().parents[2] / "assets" / "eval" / "image_prompts.txt"


@dataclass(frozen=True)
class Image:
    """One image of a prompt: the file it was read from and its bytes."""

    file: str
    data: bytes

    def to_json(self) -> dict[str, str]:
        return {"file": self.file, "sha256": self.sha256}

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


PromptImages = tuple[Image, ...]


def from_folder(folder: str | Path, prompts: int) -> list[PromptImages]:
    """Each of ``prompts`` prompts' image: the folder's files in name order, in turn."""
    files = image_files(folder)
    data = read_images(files)
    return [(Image(str(files[i % len(files)].resolve()), data[i % len(files)]),) for i in range(prompts)]


def from_record(entries: Sequence[Sequence[dict[str, Any]]]) -> list[PromptImages]:
    """The images a recording names, read again; UsageError naming a file that is gone or whose bytes changed."""
    prompts = []
    for entry in entries:
        images = []
        for item in entry:
            if not isinstance(item, dict) or not isinstance(item.get("file"), str) or "sha256" not in item:
                raise UsageError(f"a recorded image is {{\"file\": ..., \"sha256\": ...}}, got {item!r}")
            file, digest = item["file"], str(item["sha256"])
            image = Image(file, read_images([file])[0])
            if image.sha256 != digest:
                raise UsageError(f"image {file} changed since it was recorded (its sha256 differs): the recording "
                                 "asked another image")
            images.append(image)
        prompts.append(tuple(images))
    return prompts


def payloads(images: Sequence[PromptImages]) -> list[tuple[bytes, ...]]:
    """What each prompt sends: its images' bytes."""
    return [tuple(image.data for image in prompt) for prompt in images]
