"""``bench --images``: each request with an image, beside the same prompts sent as text only, and the section that
puts the two side by side.

The images come from a folder (``--images DIR``: its image files in name order, the n-th request taking the n-th
in turn) or from the JSONL input file (an ``images`` list of paths per prompt, :func:`.prompts.read_jsonl`). Every
server of the run is loaded twice at each level: its requests with their images, then the same prompts without
them. The section reads, per server and level, the time to first token (or, in batch mode, the latency) of both and
their ratio, and how much of the first the server spent encoding the images (the backend's
``qaic_vision_encode_seconds``, on its metrics page: decoded, preprocessed and encoded as the request is read).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from console.core.attachments import image_files, read_images

from .prompts import BenchRequest
from .results import level_key, value, write_rows

IMAGES, TEXT = "images", "text only"  # what a side of an images run sends
HEADER = ("server", "level", "TTFT images ms", "images encoded ms", "TTFT text ms", "TTFT images / text",
          "latency images ms", "latency text ms", "latency images / text", "in tokens images", "in tokens text")
KEYS = ("server", "level", "ttft_images_ms", "vision_encode_ms", "ttft_text_ms", "ttft_ratio", "latency_images_ms",
        "latency_text_ms", "latency_ratio", "input_tokens_images", "input_tokens_text")


def read_folder(path: str | Path) -> tuple[bytes, ...]:
    """The image files of folder ``path`` (by suffix), in name order, read; UsageError when there are none."""
    return read_images(image_files(path))


def _attached(requests: Iterable[BenchRequest], images: Sequence[bytes]) -> Iterator[BenchRequest]:
    for index, request in enumerate(requests):
        yield request if request.images else replace(request, images=(images[index % len(images)],))


def with_images(requests: Iterable[BenchRequest], images: Sequence[bytes]) -> Iterable[BenchRequest]:
    """``requests`` (a list, or endless prompts), each without images of its own taking the next of ``images``."""
    if not images:
        return requests
    return list(_attached(requests, images)) if isinstance(requests, list) else _attached(requests, images)


def text_only(requests: Iterable[BenchRequest]) -> Iterable[BenchRequest]:
    """The same prompts without their images."""
    stripped = (replace(request, images=()) for request in requests)
    return list(stripped) if isinstance(requests, list) else stripped


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 3) if numerator is not None and denominator else None


def section(targets: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per server and level: its images run beside its text-only run (``targets``: a run's, each with ``server``,
    the server it loaded, and ``inputs``, what it sent)."""
    rows = []
    for shown in (t for t in targets if t.get("inputs") == IMAGES):
        text = next(t for t in targets if t.get("inputs") == TEXT and t["server"] == shown["server"])
        for level in shown["levels"]:
            other: dict[str, Any] = next((lv for lv in text["levels"] if level_key(lv) == level_key(level)), {})
            figures = {f"{metric}_{side}": value(lv, name)
                       for side, lv in (("images", level), ("text", other))
                       for metric, name in (("ttft", "time_to_first_token"), ("latency", "request_latency"),
                                            ("input_tokens", "input_sequence_length"))}
            rows.append({"server": shown["server"], "level": level_key(level),
                         "ttft_images_ms": figures["ttft_images"],
                         "vision_encode_ms": (level.get("server") or {}).get("vision_encode_ms"),
                         "ttft_text_ms": figures["ttft_text"],
                         "ttft_ratio": _ratio(figures["ttft_images"], figures["ttft_text"]),
                         "latency_images_ms": figures["latency_images"], "latency_text_ms": figures["latency_text"],
                         "latency_ratio": _ratio(figures["latency_images"], figures["latency_text"]),
                         "input_tokens_images": figures["input_tokens_images"],
                         "input_tokens_text": figures["input_tokens_text"]})
    return rows


def section_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """(header, rows) of :func:`section` for the console's and the page's table."""
    return list(HEADER), [[row[key] for key in KEYS] for row in rows]


NOTE = ("images encoded: the server's mean time to decode, preprocess and encode a request's images as it reads it "
        "(the bundled backend's qaic_vision_encode_seconds; '-' where the server does not report it), part of the "
        "TTFT with images")


def write_csv(rows: Sequence[dict[str, Any]], out_dir: Path) -> Path:
    """``bench_images.csv``: :func:`section`'s rows."""
    return write_rows(list(rows), out_dir / "bench_images.csv")
