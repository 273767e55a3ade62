"""Client capacity: how many streamed tokens/s the console's stream client takes in, nothing lost.

The server side costs nothing: a tiny decoupled Python-backend model (written into a temporary
repository, with the same config and I/O as the bundled backend) answers each request with
``max_tokens`` one-token responses as fast as it can: ``text_output`` per step, the last step flagged
final with ``finish_reason``/``input_tokens``/``output_tokens``. Step ``i`` of a prompt carries the
text ``"<i> "``, so the client side can check that every token arrived, once and in order.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from console.clients import Failure, GenerationParams, Reply, TextDelta, Timeouts, stream

MODEL = "zero_cost_stream"

MODEL_PY = '''\
"""Zero-cost decoupled model: max_tokens one-token responses per request, no model compute."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _response(**outputs):
    tensors = []
    for name, values in outputs.items():
        dtype = np.object_ if name in ("text_output", "finish_reason") else np.int32
        tensors.append(pb_utils.Tensor(name, np.array(values, dtype=dtype)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


class TritonPythonModel:
    def initialize(self, args):
        self.active = []
        self.cond = threading.Condition()
        self.stopping = False
        self.worker = threading.Thread(target=self._loop, daemon=True)
        self.worker.start()

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                prompts = pb_utils.get_input_tensor_by_name(request, "prompt").as_numpy().reshape(-1)
                limit = pb_utils.get_input_tensor_by_name(request, "max_tokens")
                n = int(limit.as_numpy().reshape(-1)[0]) if limit is not None else 16
                if n < 1:
                    raise ValueError(f"max_tokens must be >= 1, got {n}")
            except Exception as exc:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))), flags=FINAL)
                continue
            with self.cond:
                self.active.append({"sender": sender, "rows": len(prompts), "n": n, "sent": 0,
                                    "inputs": [len(p.split()) for p in prompts]})
                self.cond.notify()
        return None

    def _loop(self):
        while True:
            with self.cond:
                while not self.active and not self.stopping:
                    self.cond.wait()
                if self.stopping:
                    return
                live = list(self.active)
            for req in live:  # one step for every live request, as the engine does
                i, rows, sender = req["sent"], req["rows"], req["sender"]
                text = [f"{i} "] * rows
                done = i + 1 >= req["n"]
                if sender.is_cancelled():
                    done, reason, text = True, "cancelled", [""] * rows
                else:
                    reason = "length"
                req["sent"] = i + 1
                try:
                    if done:
                        sender.send(_response(text_output=text, finish_reason=[reason] * rows,
                                              input_tokens=req["inputs"], output_tokens=[req["sent"]] * rows),
                                    flags=FINAL)
                    else:
                        sender.send(_response(text_output=text))
                except Exception:
                    done = True
                if done:
                    with self.cond:
                        self.active.remove(req)

    def finalize(self):
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.worker.join(timeout=10)
'''


def write_zero_cost_repo(repo: Path) -> Path:
    """Write the zero-cost model into ``repo`` (config rendered like every generated model's)."""
    from repo_gen.writer import ModelSpec, render_config

    folder = repo / MODEL
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(render_config(ModelSpec(MODEL, "kv_cache", decoupled=True)))
    (folder / "1" / "model.py").write_text(MODEL_PY)
    return folder


@contextlib.contextmanager
def zero_cost_server(timeout: float = 120.0) -> Iterator[object]:
    """A TritonServer serving only the zero-cost model from a temporary repository."""
    from console.server import TritonServer

    with tempfile.TemporaryDirectory(prefix="qaic-bench-") as tmp:
        write_zero_cost_repo(Path(tmp))
        server = TritonServer(tmp)
        server.start(timeout=timeout)
        try:
            yield server
        finally:
            server.stop()


def expected_text(tokens: int) -> str:
    return "".join(f"{i} " for i in range(tokens))


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
    received: int
    seconds: float
    errors: list[str] = field(default_factory=list)
    complete: bool = False

    @property
    def expected(self) -> int:
        return self.streams * self.tokens_per_stream

    @property
    def tokens_per_s(self) -> float:
        return self.received / self.seconds if self.seconds > 0 else 0.0


def client_capacity(url: str, streams: int = 4, tokens: int = 2000, timeout: float = 120.0,
                    model: str = MODEL) -> Capacity:
    """``streams`` concurrent console stream calls of ``tokens`` tokens each against ``url``."""
    want = expected_text(tokens)
    counts = [0] * streams
    errors: list[str] = []
    ok = [False] * streams
    start = threading.Barrier(streams + 1)

    def one(k: int) -> None:
        call = stream(url, model, [f"stream {k}"], GenerationParams(max_tokens=tokens),
                      Timeouts(network=timeout, idle=min(timeout, 30.0)))
        start.wait(timeout)
        text = ""
        for event in call:
            if isinstance(event, TextDelta):
                counts[k] += 1
            elif isinstance(event, Reply):
                text = event.text
                ok[k] = event.stats.output_tokens == tokens and text == want and counts[k] == tokens
                if not ok[k]:
                    errors.append(f"stream {k}: {counts[k]} text events, output_tokens={event.stats.output_tokens},"
                                  f" text {'intact' if text == want else 'differs'}")
            elif isinstance(event, Failure):
                errors.append(f"stream {k}: {event.kind}: {event.message}")

    seconds, finished = run_together(one, streams, start, timeout)
    if not finished:
        errors.append("a stream did not finish in time")
    return Capacity(streams, tokens, sum(counts), seconds, errors, all(ok) and not errors)
