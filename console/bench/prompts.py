"""Benchmark inputs: synthetic prompts of sampled lengths, or a JSONL file.

Synthetic input lengths are drawn from a normal distribution (mean, stddev) and made of plain
English words; with a tokenizer (``--tokenizer``, or the embedded model's own) the text is cut to
exactly that many tokens, without one a word stands for a token. A shared prefix (``--shared-prefix-tokens``,
AIPerf's shared system prompt) starts every prompt with the same text of that many tokens. Output lengths are
drawn the same way and enforced with ``max_tokens`` (a model may still stop earlier at its end-of-sequence token;
the server's ``output_tokens`` is what gets counted).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend_model.models import embedded_prepared
from console.clients import UsageError
from console.core.attachments import read_images

_CORPUS = (
    "the of and to in is was for on that with as by at from his her they this are be had have not but "
    "one all were when there can an which their said if do will each about how up out them then she "
    "many some so these would other into has more two like him see time could no make than first been "
    "its who now people my made over did down only way find use may water long little very after words "
    "called just where most know get through back much before go good new write our used me man too any "
    "day same right look think also around another came come work three word must because does part even "
    "place well such here take why things help put years different away again off went old number great "
    "tell men say small every found still between name should home big give air line set own under read "
    "last never us left end along while might next sound below saw something thought both few those always "
    "looked show large often together asked house world going want school important until form food keep "
    "children feet land side without boy once animals life enough took sometimes four head above kind began "
    "almost live page got earth need far hand high year mother light parts country father let night following "
    "picture being study second eyes soon times story boys since white days ever paper hard near sentence "
    "better best across during today others however sure means knew its try told young miles sun ways thing "
    "whole hear example heard several change answer room sea against top turned learn point city play toward "
    "five using himself usually money seen car morning mountains river snow valley forest bells maroon"
)
WORDS = tuple(_CORPUS.split())


@dataclass(frozen=True)
class BenchRequest:
    """One request of a run: its prompt, the output length asked for (None: the model's default) and its images
    (each file's bytes); an embeddings request's texts (empty: its prompt alone)."""

    prompt: str
    max_tokens: int | None
    images: tuple[bytes, ...] = ()
    texts: tuple[str, ...] = ()


def _length(rng: random.Random, mean: float, stddev: float, low: int = 1) -> int:
    return max(low, round(rng.gauss(mean, stddev) if stddev > 0 else mean))


def load_tokenizer(path: str | None, embedded: bool) -> Any | None:
    """A local tokenizer to cut synthetic prompts: ``path``, else the embedded model's, else None."""
    if path:
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise UsageError(f"--tokenizer {path}: not a folder")
    elif embedded:

        prepared = embedded_prepared()
        if prepared is None:
            return None
        folder = prepared
    else:
        return None
    import transformers  # transformers takes seconds to load: only when a tokenizer is asked for
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot load a tokenizer from {folder}: {str(exc).splitlines()[0][:200]}") from None


class SyntheticPrompts:
    """Endless synthetic requests; deterministic for a given seed."""

    def __init__(self, input_mean: float, input_stddev: float, output_mean: float | None,
                 output_stddev: float = 0.0, seed: int = 0, tokenizer: Any | None = None,
                 shared_prefix: int = 0) -> None:
        if input_mean < 1:
            raise UsageError(f"--input-tokens-mean must be >= 1, got {input_mean:g}")
        if output_mean is not None and output_mean < 1:
            raise UsageError(f"--output-tokens-mean must be >= 1, got {output_mean:g}")
        if input_stddev < 0 or output_stddev < 0:
            raise UsageError("token length standard deviations must be >= 0")
        self.input_mean, self.input_stddev = input_mean, input_stddev
        self.output_mean, self.output_stddev = output_mean, output_stddev
        if shared_prefix < 0:
            raise UsageError(f"--shared-prefix-tokens must be >= 0, got {shared_prefix}")
        self.rng = random.Random(seed)
        self.tokenizer = tokenizer
        self.prefix = self._text(shared_prefix) + " " if shared_prefix else ""  # every prompt's first words

    def _text(self, tokens: int) -> str:
        words = [self.rng.choice(WORDS) for _ in range(tokens + 8)]
        text = " ".join(words).capitalize()
        if self.tokenizer is None:
            return " ".join(text.split()[:tokens])
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][:tokens]
        return self.tokenizer.decode(ids).strip() or words[0]

    def __iter__(self) -> Iterator[BenchRequest]:
        while True:
            prompt = self.prefix + self._text(_length(self.rng, self.input_mean, self.input_stddev))
            out = None if self.output_mean is None else _length(self.rng, self.output_mean, self.output_stddev)
            yield BenchRequest(prompt, out)


def _images(item: dict[str, Any], folder: Path, where: str) -> tuple[bytes, ...]:
    """The image files a line's ``images`` lists (paths relative to the file's folder), read."""
    paths = item.get("images", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise UsageError(f"{where}: images must be a list of image file paths, got {paths!r}")
    try:
        return read_images([folder / Path(p).expanduser() for p in paths])
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


def read_jsonl(path: str | Path, default_max_tokens: int | None = None) -> list[BenchRequest]:
    """Requests from a JSONL file: one object a line with ``text`` (or ``prompt`` / ``text_input``)
    and optionally ``max_tokens`` (or ``output_tokens``) and ``images`` (image files, relative to the file's
    folder); blank lines are skipped."""
    requests = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise UsageError(f"{path}:{number}: not JSON ({exc})") from None
        if isinstance(item, str):
            item = {"text": item}
        text = next((item[k] for k in ("text", "prompt", "text_input") if isinstance(item, dict) and k in item), None)
        if not isinstance(text, str) or not text:
            raise UsageError(f"{path}:{number}: needs a non-empty \"text\" (or \"prompt\") string")
        limit = item.get("max_tokens", item.get("output_tokens", default_max_tokens))
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise UsageError(f"{path}:{number}: max_tokens must be a positive integer, got {limit!r}")
        requests.append(BenchRequest(text, limit, _images(item, Path(path).parent, f"{path}:{number}")))
    if not requests:
        raise UsageError(f"{path}: no prompts")
    return requests
