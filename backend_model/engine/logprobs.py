"""Per-token log-probabilities: the chosen token's and the most likely alternatives, from the raw logits.

They are the model's own distribution, a log-softmax of the logits before anything the request changes
(repetition penalty, temperature, top-k/top-p, a grammar's mask), as OpenAI and vLLM report them by default;
a forced continuation's tokens are scored the same way. Each row is computed alone (batch invariant).

On the wire (the ``logprobs`` output): one JSON array per prompt, an entry per generated token in order,
``{"id": 9, "token": " Paris", "logprob": -0.12, "top": [{"id": 9, "token": " Paris", "logprob": -0.12}, ...]}``;
``token`` is the text the token adds (a special token: its name; part of a character: U+FFFD, and then
``"bytes"`` gives its UTF-8 bytes). ``top`` holds the asked number of alternatives, most likely first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its id and log-probability, and the ``top`` alternatives as (id, logprob)."""

    id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


class Scores:
    """One logits row's distribution: what its log-softmax gives any token, and its ``k`` most likely tokens."""

    def __init__(self, logits: np.ndarray, k: int) -> None:
        row = logits.astype(np.float64)
        peak = row.max()
        self._row = row
        self._lse = peak + np.log(np.exp(row - peak).sum())
        best = np.argpartition(-row, k - 1)[:k] if 0 < k < len(row) else np.arange(len(row) if k else 0)
        best = best[np.argsort(-row[best], kind="stable")]
        self.top = tuple((int(i), float(row[i] - self._lse)) for i in best)

    def of(self, token: int) -> TokenLogprob:
        return TokenLogprob(token, float(self._row[token] - self._lse), self.top)


class TokenTexts:
    """Each token id's text as the ``logprobs`` output names it (``bytes``: the table of ``detok``)."""

    def __init__(self, tokenizer, table: list[bytes] | None) -> None:
        self._tokenizer = tokenizer
        self._table = table
        self._special = set(tokenizer.all_special_ids)

    def describe(self, token: int, logprob: float) -> dict[str, Any]:
        entry: dict[str, Any] = {"id": token, "token": "", "logprob": logprob}
        if token in self._special or self._table is None or token >= len(self._table):
            entry["token"] = self._tokenizer.convert_ids_to_tokens(token) if token in self._special else \
                self._tokenizer.decode([token])
            return entry
        piece = self._table[token]
        try:
            entry["token"] = piece.decode("utf-8")
        except UnicodeDecodeError:
            entry["token"] = piece.decode("utf-8", errors="replace")
            entry["bytes"] = list(piece)
        return entry

    def json(self, entries: list[TokenLogprob]) -> str:
        """The wire form of one prompt's entries."""
        return json.dumps([{**self.describe(e.id, e.logprob), "top": [self.describe(i, lp) for i, lp in e.top]}
                           for e in entries], ensure_ascii=False, separators=(",", ":"))
