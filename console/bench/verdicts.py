"""What every section of the performance report (:mod:`.report`) shares: the stream counts it measures at, the
ratio of two figures, a measurement's best run and the rounding of a figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

STREAMS = (1, 8)


class Rated(Protocol):
    @property
    def tokens_per_s(self) -> float: ...


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``; None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def best_rate(runs: Sequence[Rated]) -> float:
    """The fastest run's tokens/s."""
    return max(r.tokens_per_s for r in runs)


def rounded(value: float | None) -> float | None:
    """A figure as the report shows it: 4 decimals below 10, 1 above."""
    return None if value is None else round(value, 4 if abs(value) < 10 else 1)
