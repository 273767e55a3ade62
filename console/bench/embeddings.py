"""``bench --endpoint embeddings``: each request asks a server's embedding model for the vectors of ``--batch-size``
texts (AIPerf's embeddings endpoint, its ``--batch-size-text``): no stream, so a request has a latency and its inputs,
and a level its requests/s and its inputs/s.

The request goes through the server's adapter (:meth:`~console.core.adapters.Adapter.embed`: a Triton embedding model
over HTTP, or any OpenAI-compatible ``/v1/embeddings``), its model read once for the run. The runner, the summaries,
the tables, the exports and the page are the chat bench's: :class:`EmbeddingCall` is a call as the runner drives one,
:func:`summarize` adds the embeddings figures to the chat summary's (and drops its output-token ones).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from console.clients import ClientError, Failure, ModelInfo, Reply, ReplyStats, ServerFault, UsageError
from console.core.adapters import Adapter

from . import results
from .load import LevelResult, Target
from .prompts import BenchRequest
from .workloads import Slo

ENDPOINTS = ("generate", "embeddings")
DROPPED = ("output_token_throughput", "output_sequence_length", "output_token_throughput_per_request")
FINISH = "stop"


class EmbeddingCall:
    """One embeddings request as the runner drives a call: iterate it for its one Reply (no text; its stats: the
    request latency and, where the server counts them, the inputs' tokens) or Failure. It is bounded by its timeout:
    :meth:`cancel` cannot cut it short."""

    def __init__(self, server: Adapter, info: ModelInfo, texts: Sequence[str], timeout: float | None) -> None:
        self.server, self.info, self.texts, self.timeout = server, info, list(texts), timeout

    def cancel(self) -> None:
        """Nothing to cut: the request ends within its timeout."""

    def __iter__(self) -> Iterator[Reply | Failure]:
        started = time.perf_counter()
        try:
            vectors, tokens = self.server.embed(self.info.name, self.texts, self.timeout, self.info)
        except ClientError as exc:
            yield Failure.of(exc, time.perf_counter() - started)
            return
        latency = time.perf_counter() - started
        if len(vectors) != len(self.texts):
            yield Failure.of(ServerFault(f"{len(vectors)} vectors for {len(self.texts)} inputs"), latency)
            return
        stats = ReplyStats(None, None, None, latency, None, sum(tokens) if tokens else None, None)
        yield Reply(0, self.texts[0], "", FINISH, stats)


@dataclass(frozen=True)
class EmbeddingTarget(Target):
    """The load of an embeddings run: ``batch`` texts a request (each request's :attr:`BenchRequest.texts`)."""

    batch: int = 1

    def call(self, index: int, request: BenchRequest) -> EmbeddingCall:  # type: ignore[override]
        return EmbeddingCall(self.servers[index % len(self.servers)], self.info, request.texts or (request.prompt,),
                             self.info.network_timeout(self.settings.timeout))


def check(endpoint: str, batch_size: int, turns: int, adapters: str | None) -> None:
    """UsageError for what an embeddings run cannot do (and a batch size without one)."""
    if batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
    if endpoint != "embeddings":
        if batch_size != 1:
            raise UsageError("--batch-size is the texts of an embeddings request: add --endpoint embeddings")
        return
    if turns > 1:
        raise UsageError("--turns holds a chat: an embeddings request has no conversation")
    if adapters is not None:
        raise UsageError("--adapters spreads chat requests over LoRA adapters, not embeddings requests")


def in_batches(requests: Iterable[BenchRequest], size: int) -> Iterator[BenchRequest]:
    """``requests``' prompts ``size`` at a time, each group one request's texts (a list is drawn from in a cycle)."""
    source = itertools.cycle(requests) if isinstance(requests, list) else iter(requests)
    while True:
        texts = tuple(request.prompt for request in itertools.islice(source, size))
        if not texts:
            return
        yield BenchRequest(texts[0], None, texts=texts)


def summarize(level: LevelResult, batch: int, slo: Slo | None = None) -> dict[str, Any]:
    """The chat summary of an embeddings level without its output figures, with AIPerf's embeddings ones: the inputs
    a request and the inputs/s over the level's wall time (``input_sequence_length``: a request's tokens, all its
    inputs', where the server counts them); with service-level goals (a latency), the goodput."""
    out = {k: v for k, v in results.summarize(level, "batch", slo).items() if k not in DROPPED}
    seconds = level.duration
    out["inputs_per_request"] = batch
    out["input_throughput"] = {"unit": results.INPUTS_PER_S,
                               "avg": round(out["request_count"] * batch / seconds, 4) if seconds > 0 else 0.0}
    return out
