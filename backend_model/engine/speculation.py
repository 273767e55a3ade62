"""Prompt-lookup speculative decoding: draft tokens found earlier in a sequence's own context, no draft model.

A decode step normally feeds each sequence one token. A sequence whose context ends with a run of tokens seen
before (code being edited, a summary quoting its source, a repeated phrase) likely goes on as it did then: the
proposer drafts the tokens that followed that earlier occurrence, and the step feeds them too, each as a row of
its own at the next positions of the same slot. One forward pass then gives the logits after every drafted
token; the engine keeps its own choice at each position and stops at the first that differs from the draft, so
the tokens are exactly those of one-token steps (greedy requests only). The cache entries a rejected draft wrote
lie past the sequence's position: never attended, and overwritten as it goes on.

Standard library and numpy only; Python 3.8.
"""

from __future__ import annotations

import numpy as np

MAX_NGRAM, MIN_NGRAM = 3, 1  # the context's last n tokens looked up, longest first (vLLM's ngram defaults: 4..1)


def propose(context: list[int], limit: int, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> list[int]:
    """Up to ``limit`` tokens that followed an earlier occurrence of the context's last n tokens (the longest n
    that occurs): the latest occurrence with ``limit`` tokens after it, else the earliest (the most after it)."""
    if limit < 1 or len(context) < min_ngram + 1:
        return []
    tokens = np.asarray(context, dtype=np.int64)
    for n in range(min(max_ngram, len(tokens) - 1), min_ngram - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)  # every earlier n-gram
        hits = np.flatnonzero((windows == tokens[-n:]).all(axis=1))
        if len(hits):
            full = hits[hits + n + limit <= len(tokens)]
            start = int(full[-1] if len(full) else hits[0]) + n
            return tokens[start : start + limit].tolist()
    return []
