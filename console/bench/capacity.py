"""Served zero-cost model: how many streamed tokens/s reach the console client, nothing lost.

The server runs the bundled backend's real glue and engine loop (``zero_cost_model.py``) on a
session that computes nothing, so what is measured is the host cost a card would see: the loop,
the response thread, the Python backend, the gRPC stream and the client. Each sequence generates a
fixed digit pattern (``engine.digits_after``), so the client checks that every token arrived,
once and in order.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from console.clients import Failure, GenerationParams, Reply, TextDelta, Timeouts
from console.core.adapters import Framed, adapter_for
from console.server import TritonServer
from repo_gen.writer import ModelSpec, render_config

from .engine import digits_after

MODEL = "zero_cost_stream"
COMPILE = {"prefill_seq_len": 32, "ctx_len": 8192, "full_batch_size": 16}
MODEL_FILE = Path(__file__).with_name("zero_cost_model.py")


def write_zero_cost_repo(repo: Path) -> Path:
    """Write the zero-cost model into ``repo``, its config rendered like every generated model's."""

    folder = repo / MODEL
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(render_config(ModelSpec(MODEL, "kv_cache", decoupled=True)))
    (folder / "compile_config.json").write_text(json.dumps(COMPILE) + "\n")
    shutil.copy2(MODEL_FILE, folder / "1" / "model.py")
    return folder


@contextlib.contextmanager
def zero_cost_server(timeout: float = 120.0) -> Iterator[TritonServer]:
    """A TritonServer serving only the zero-cost model from a temporary repository."""
    with tempfile.TemporaryDirectory(prefix="qaic-bench-") as tmp:
        write_zero_cost_repo(Path(tmp))
        server = TritonServer(tmp)
        server.start(timeout=timeout)
        try:
            yield server
        finally:
            server.stop()


def run_together(target: Callable[[int], None], count: int, barrier: threading.Barrier,
                 timeout: float) -> tuple[float, bool]:
    """Run ``target(i)`` in ``count`` threads that meet at ``barrier``; (seconds from there, all finished)."""
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait(timeout)
    start = time.perf_counter()
    for thread in threads:
        thread.join(timeout + 30)
    return time.perf_counter() - start, not any(t.is_alive() for t in threads)


@dataclass
class Capacity:
    """What the clients received: ``complete`` when every stream got every token, in order."""

    streams: int
    tokens_per_stream: int
    received: int  # tokens (one digit each) that arrived as streamed text
    responses: int  # the streamed responses they came in (steps a client lags behind arrive joined)
    seconds: float
    errors: list[str] = field(default_factory=list)
    complete: bool = False

    @property
    def expected(self) -> int:
        return self.streams * self.tokens_per_stream

    @property
    def tokens_per_s(self) -> float:
        return self.received / self.seconds if self.seconds > 0 else 0.0


def client_capacity(url: str, streams: int = 16, tokens: int = 1000, timeout: float = 120.0,
                    model: str = MODEL) -> Capacity:
    """``streams`` concurrent console stream calls of ``tokens`` tokens each against ``url`` (a gRPC endpoint, or
    a front's base URL)."""
    texts = [""] * streams
    responses = [0] * streams
    errors: list[str] = []
    ok = [False] * streams
    start = threading.Barrier(streams + 1)

    server = adapter_for(url)  # Triton's gRPC, or an OpenAI-compatible front before it (``http://host:port/v1``)
    info = server.model_info(model)

    def one(k: int) -> None:
        prompt = [f"stream {k}"]
        call = server.call("stream", "grpc", info, Framed(prompt, prompt), GenerationParams(max_tokens=tokens),
                           Timeouts(network=timeout, idle=min(timeout, 30.0)))
        start.wait(timeout)
        for event in call:
            if isinstance(event, TextDelta):
                texts[k] += event.text
                responses[k] += 1
            elif isinstance(event, Reply):
                want = digits_after(event.stats.input_tokens or 0, tokens)
                ok[k] = event.stats.output_tokens == tokens and event.text == texts[k] == want
                if not ok[k]:
                    errors.append(f"stream {k}: {len(texts[k])} of {tokens} tokens streamed, output_tokens="
                                  f"{event.stats.output_tokens}, text {'intact' if texts[k] == want else 'differs'}")
            elif isinstance(event, Failure):
                errors.append(f"stream {k}: {event.kind}: {event.message}")

    seconds, finished = run_together(one, streams, start, timeout)
    if not finished:
        errors.append("a stream did not finish in time")
    received = sum(len(t) for t in texts)
    return Capacity(streams, tokens, received, sum(responses), seconds, errors, all(ok) and not errors)
