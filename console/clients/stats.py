"""Speed figures: per reply (:func:`reply_stats`), live while streaming, and over many replies (:func:`aggregate`).

Token counts come from the server's ``output_tokens``; arrival times place the first token and each
prompt's own end (a decode step may carry text for one token, or none while the detokenizer waits
for a whole character).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from .events import ReplyStats

METRICS = (
    "time_to_first_token",
    "inter_token_latency",
    "request_latency",
    "output_token_throughput",
    "output_tokens",
)
STATISTICS = ("avg", "min", "max", "p50", "p90", "p99")


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method); ``q`` in 0..100."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def reply_stats(
    arrivals: Sequence[float],
    latency: float,
    output_tokens: int | None,
    input_tokens: int | None = None,
    streamed: bool = True,
    source: str = "server",
) -> ReplyStats:
    """Figures of one reply from the times its text arrived and the time of the request's last response.

    ``arrivals``: seconds since the request was sent at which non-empty text came (streaming). A
    streamed prompt's latency ends at its own last text, not at the request's end: in an ``a|b``
    request one prompt may finish many steps before the other. A batch reply (``streamed=False``)
    has the request latency only. ``source`` says who counted ``output_tokens`` (without a count, a
    stream's text arrivals stand for its tokens: ``chunks``).
    """
    tokens = output_tokens if output_tokens is not None else (len(arrivals) if streamed else None)
    source = source if output_tokens is not None else ("chunks" if streamed else "")
    if not streamed:
        throughput = tokens / latency if tokens is not None and latency > 0 else None
        return ReplyStats(None, None, None, latency, throughput, input_tokens, tokens, source)
    end = arrivals[-1] if arrivals else latency
    ttft = arrivals[0] if arrivals else None
    itl = p90 = None
    if ttft is not None and tokens is not None and tokens > 1:
        itl = max(end - ttft, 0.0) / (tokens - 1)
        gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
        p90 = percentile(gaps, 90) if gaps else itl
    throughput = tokens / end if tokens is not None and end > 0 else None
    return ReplyStats(ttft, itl, p90, end, throughput, input_tokens, tokens, source)


def live_stats(arrivals: Sequence[float], now: float) -> ReplyStats:
    """Figures of a reply still streaming: text chunks so far stand for tokens, the clock runs to ``now``."""
    stats = reply_stats(arrivals, now, None)
    if not arrivals or now <= 0:
        return stats
    return ReplyStats(stats.time_to_first_token, stats.inter_token_latency, stats.inter_token_latency_p90, now,
                      len(arrivals) / now, stats.input_tokens, stats.output_tokens)


def aggregate(stats: Iterable[ReplyStats]) -> dict[str, dict[str, float]]:
    """``{metric: {avg, min, max, p50, p90, p99}}`` over the replies that have the metric."""
    stats = list(stats)
    out: dict[str, dict[str, float]] = {}
    for metric in METRICS:
        values = [float(v) for s in stats if (v := getattr(s, metric)) is not None]
        if values:
            out[metric] = {
                "avg": sum(values) / len(values),
                "min": min(values),
                "max": max(values),
                **{f"p{q}": percentile(values, q) for q in (50, 90, 99)},
            }
    return out


def format_stats(stats: ReplyStats) -> str:
    """One short line: ``16 tokens · ttft 240 ms · itl 101 ms (p90 110) · 9.1 tok/s · 1.75 s``.

    A batch reply reads ``16 tokens · one response · 9.1 tok/s · latency 1.75 s``.
    """
    parts = []
    if stats.output_tokens is not None:
        counted = " (counted as text chunks)" if stats.output_tokens_source == "chunks" else ""
        parts.append(f"{stats.output_tokens} tokens{counted}")
    if stats.time_to_first_token is not None:
        parts.append(f"ttft {stats.time_to_first_token * 1000:.0f} ms")
    else:
        parts.append("one response")
    if stats.inter_token_latency is not None:
        p90 = stats.inter_token_latency_p90
        extra = f" (p90 {p90 * 1000:.0f})" if p90 is not None else ""
        parts.append(f"itl {stats.inter_token_latency * 1000:.0f} ms{extra}")
    if stats.output_token_throughput is not None:
        parts.append(f"{stats.output_token_throughput:.1f} tok/s")
    parts.append(f"{stats.request_latency:.2f} s" if stats.streamed else f"latency {stats.request_latency:.2f} s")
    return " · ".join(parts)
