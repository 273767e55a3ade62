"""Tokens/s through a server: concurrent streamed calls, and a tritonserver serving the embedded model alone."""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from console.clients import Failure, GenerationParams, Reply, Timeouts, openai_call, stream
from console.server import TritonServer
from repo_gen.samples import EMBEDDED_KV
from repo_gen.writer import ModelSpec, write_model

from .capacity import run_together
from .engine import BENCH_PROMPTS, Timed


def timed_streams(open_call: Callable[[str], Iterable[Any]], concurrency: int, timeout: float = 600.0,
                  texts: list[str] | None = None) -> Timed:
    """``concurrency`` streamed calls at once (``open_call(prompt)``, the bench prompts in turn): the output
    tokens of their replies over the wall time from their common start (``texts``: filled with the replies)."""
    prompts = bench_prompts(concurrency)
    counts = [0] * concurrency
    answers = [""] * concurrency
    errors: list[str] = []
    barrier = threading.Barrier(concurrency + 1)

    def one(i: int) -> None:
        call = open_call(prompts[i])
        barrier.wait(timeout)
        for event in call:
            if isinstance(event, Reply):
                counts[i], answers[i] = event.stats.output_tokens or 0, event.text
            elif isinstance(event, Failure):
                errors.append(f"stream {i}: {event.kind}: {event.message}")
        if not counts[i] and not errors:
            errors.append(f"stream {i} got no reply")

    seconds, _ = run_together(one, concurrency, barrier, timeout)
    if errors:
        raise RuntimeError("; ".join(errors))
    if texts is not None:
        texts[:] = answers
    return Timed(sum(counts), seconds)


def bench_prompts(count: int) -> list[str]:
    """The bench prompts in turn, ``count`` of them."""
    return (BENCH_PROMPTS * (count // len(BENCH_PROMPTS) + 1))[:count]


def triton_streams(url: str, concurrency: int, tokens: int, model: str, timeout: float = 600.0,
                   texts: list[str] | None = None, min_tokens: int | None = None) -> Timed:
    """``concurrency`` concurrent console gRPC streams of ``tokens`` tokens each (``texts``: their replies;
    ``min_tokens``: none ends sooner)."""
    params, timeouts = GenerationParams(max_tokens=tokens, min_tokens=min_tokens), Timeouts(network=timeout)
    return timed_streams(lambda prompt: stream(url, model, [prompt], params, timeouts), concurrency, timeout, texts)


def openai_streams(base_url: str, concurrency: int, tokens: int, model: str, timeout: float = 600.0) -> Timed:
    """``concurrency`` concurrent streamed completions of ``tokens`` tokens from an OpenAI-compatible server
    (one that answers one request at a time keeps the others waiting: no idle timeout short of ``timeout``)."""
    params, timeouts = GenerationParams(max_tokens=tokens), Timeouts(network=timeout, idle=timeout)
    return timed_streams(lambda prompt: openai_call(base_url, model, [prompt], params, timeouts), concurrency, timeout)


def served_model(precision: str) -> str:
    return f"smollm2_{precision}_stream"


@contextlib.contextmanager
def served_precision(precision: str, timeout: float = 600.0) -> Iterator[Any]:
    """A tritonserver serving only the embedded model, decoupled, at ``precision`` (settings as in-process)."""

    name = served_model(precision)
    with tempfile.TemporaryDirectory(prefix="qaic-report-") as tmp:
        write_model(ModelSpec(name, "kv_cache", True, hf_model_name="embedded", compile=EMBEDDED_KV,
                              precision=precision), tmp)
        server = TritonServer(Path(tmp), models=(name,))
        server.start(timeout=timeout)
        try:
            yield server
        finally:
            server.stop()
