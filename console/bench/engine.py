"""Engine benchmarks in one process, side by side: CPU session tokens/s, HF generate, loop overhead."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from backend_model.contract import Dims
from backend_model.engine import Engine
from backend_model.sampling import SamplingParams

BENCH_PROMPTS = [
    "My name is", "Maroon bells are", "The capital of France is", "Once upon a time",
    "Water boils at", "The three primary colours are", "In 1969, the first humans", "def fibonacci(n):",
    "The best way to learn", "Mountains are formed when", "A good breakfast has", "The history of Rome",
    "Python is a language that", "The ocean is", "My favourite book is", "Every morning I",
]


class ZeroCostSession:
    """A session whose run costs nothing: fixed logits. Used only to time the loop itself."""

    kind = "zero-cost"

    def __init__(self, dims: Dims, token_id: int) -> None:
        self.dims = dims
        self._logits = {}
        self._token = token_id

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = len(inputs["input_ids"])
        out = self._logits.get(rows)
        if out is None:
            out = np.zeros((rows, 1, self.dims.vocab), dtype=np.float32)
            out[:, 0, self._token] = 1.0
            self._logits[rows] = out
        return {"logits": out}


@dataclass
class Timed:
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def run_engine(engine: Engine, concurrency: int, max_tokens: int) -> Timed:
    """``concurrency`` sequences at once, ``max_tokens`` each; tokens counted after prefill too."""
    prompts = (BENCH_PROMPTS * (concurrency // len(BENCH_PROMPTS) + 1))[:concurrency]
    params = SamplingParams(max_tokens=max_tokens)
    start = time.perf_counter()
    seqs = engine.generate(prompts, params)
    return Timed(sum(len(s.tokens) for s in seqs), time.perf_counter() - start)


def loop_overhead_ms(tokenizer, slots: int = 16, steps: int = 500) -> float:
    """Host time per decode step of the loop with a zero-cost session at ``slots`` sequences."""
    token = tokenizer(" the", add_special_tokens=False)["input_ids"][0]
    dims = Dims(1, 32, steps + 64, len(tokenizer), slots)
    engine = Engine(ZeroCostSession(dims, token), tokenizer)
    prompts = (BENCH_PROMPTS * 2)[:slots]
    for p in prompts:
        engine.submit(engine.encode(p), SamplingParams(max_tokens=steps))
    while any(s is None for s in engine.slots) or engine.queue:  # admit every slot first
        engine.step()
    start = time.perf_counter()
    for _ in range(steps - 2):
        engine.step()
    return (time.perf_counter() - start) / (steps - 2) * 1000


def hf_generate(model, tokenizer, max_tokens: int) -> Timed:
    """transformers ``generate`` (greedy, KV cache, batch 1) on the same weights: the baseline."""
    import torch

    enc = tokenizer(BENCH_PROMPTS[:1], return_tensors="pt")
    with torch.inference_mode():
        start = time.perf_counter()
        out = model.generate(**enc, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)
        seconds = time.perf_counter() - start
    return Timed(out.shape[1] - enc.input_ids.shape[1], seconds)
