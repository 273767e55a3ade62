"""Greedy agreement: one candidate's answer against the reference's, per prompt and over the set.

Tokens are compared where both paths give them; otherwise both texts are tokenized with the eval's tokenizer (the
same text gives the same tokens), or compared character by character when there is none. The unit says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .paths import Answer

CONTEXT = {"token": 6, "retokenized": 6, "char": 24}  # units shown before a divergence, and of each side after it


@dataclass(frozen=True)
class Comparison:
    """One prompt: exact or not, the first differing position (None: exact), the longest common prefix, and the text
    around the divergence (the common tail, then each side's next units)."""

    unit: str  # token | retokenized | char
    exact: bool
    first: int | None
    common: int
    reference_length: int
    candidate_length: int
    before: str = ""
    reference_next: str = ""
    candidate_next: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def units(reference: Answer, candidate: Answer, tokenizer: Any) -> tuple[str, Sequence[Any], Sequence[Any]]:
    """(unit, reference units, candidate units) the two answers are compared in."""
    if reference.tokens is not None and candidate.tokens is not None:
        return "token", reference.tokens, candidate.tokens
    if tokenizer is not None:
        encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        return "retokenized", encode(reference.text), encode(candidate.text)
    return "char", reference.text, candidate.text


def compare(reference: Answer, candidate: Answer, tokenizer: Any = None) -> Comparison:
    unit, want, got = units(reference, candidate, tokenizer)
    common = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    exact = common == len(want) == len(got)
    if exact:
        return Comparison(unit, True, None, common, len(want), len(got))
    show, n = _shower(unit, tokenizer), CONTEXT[unit]
    return Comparison(unit, False, common, common, len(want), len(got), show(want[max(0, common - n):common]),
                      show(want[common:common + n]), show(got[common:common + n]))


def _shower(unit: str, tokenizer: Any):
    if unit == "char":
        return lambda part: "".join(part)
    return lambda part: tokenizer.decode(list(part)) if tokenizer is not None else " ".join(map(str, part))


def bins(limit: int) -> list[tuple[int, int]]:
    """First-divergence bins up to ``limit``: [0, 0], [1, 1], [2, 3], [4, 7], ... (powers of two)."""
    edges, low = [(0, 0)], 1
    while low < limit:
        high = min(2 * low - 1, limit - 1)
        edges.append((low, high))
        low = 2 * low
    return edges


def histogram(comparisons: Sequence[Comparison], limit: int) -> list[dict[str, Any]]:
    """How many prompts first diverge in each bin (positions past ``limit`` count in the last)."""
    edges = bins(max(limit, 1))
    counts = [0] * len(edges)
    for c in comparisons:
        if c.first is not None:
            counts[next((i for i, (_, high) in enumerate(edges) if c.first <= high), len(edges) - 1)] += 1
    return [{"from": low, "to": high, "prompts": n} for (low, high), n in zip(edges, counts)]


def summary(comparisons: Sequence[Comparison], limit: int) -> dict[str, Any]:
    """Over the set: the exact-match rate, the mean common prefix and first divergence, the histogram."""
    n = len(comparisons) or 1
    firsts = [c.first for c in comparisons if c.first is not None]
    return {
        "exact": sum(c.exact for c in comparisons),
        "prompts": len(comparisons),
        "exact_rate": round(sum(c.exact for c in comparisons) / n, 4),
        "mean_common_prefix": round(sum(c.common for c in comparisons) / n, 2),
        "median_first_divergence": sorted(firsts)[len(firsts) // 2] if firsts else None,
        "units": sorted({c.unit for c in comparisons}),
        "histogram": histogram(comparisons, limit),
    }
