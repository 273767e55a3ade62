"""Engine benchmarks in one process, side by side: CPU session tokens/s, HF generate, loop overhead."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.sessions.protocol import Dims

BENCH_PROMPTS = [
    "My name is", "Maroon bells are", "The capital of France is", "Once upon a time",
    "Water boils at", "The three primary colours are", "In 1969, the first humans", "def fibonacci(n):",
    "The best way to learn", "Mountains are formed when", "A good breakfast has", "The history of Rome",
    "Python is a language that", "The ocean is", "My favourite book is", "Every morning I",
]


class ZeroCostSession:
    """A session that computes nothing: the next token after position p is ``pattern[p % len(pattern)]``.

    It times the loop itself (``loop_overhead_ms``) and, served (``zero_cost_model``), the host cost
    around a card; the pattern lets a client check that every token arrived, once and in order.
    """

    kind = "zero-cost"

    def __init__(self, dims: Dims, pattern: list[int]) -> None:
        self.dims = dims
        self.pattern = np.asarray(pattern, dtype=np.int64)
        self._logits: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # rows -> (buffer, its hot columns)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        last = np.asarray(inputs["position_ids"]).max(axis=1)  # each row's last position
        rows = len(last)
        if rows not in self._logits:
            self._logits[rows] = (np.zeros((rows, 1, self.dims.vocab), dtype=np.float32), np.zeros(rows, np.int64))
        logits, hot = self._logits[rows]
        every = np.arange(rows)
        logits[every, 0, hot] = 0.0
        hot[:] = self.pattern[last % len(self.pattern)]
        logits[every, 0, hot] = 1.0
        return {"logits": logits}


def digit_tokens(tokenizer) -> list[int]:
    """The token ids of ``0`` .. ``9``, the zero-cost pattern (one token each in the embedded vocabulary)."""
    ids = [tokenizer(str(d), add_special_tokens=False)["input_ids"] for d in range(10)]
    if any(len(i) != 1 for i in ids):
        raise ValueError("this tokenizer splits a digit into several tokens")
    return [i[0] for i in ids]


def digits_after(prompt_tokens: int, count: int) -> str:
    """The text a zero-cost session generates for a prompt of ``prompt_tokens`` tokens."""
    return "".join(str((prompt_tokens - 1 + i) % 10) for i in range(count))


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


def loop_overhead(tokenizer, slots: int = 16, steps: int = 500) -> Timed:
    """The loop's decode steps with a zero-cost session at ``slots`` sequences: the tokens they made
    (every slot decodes in each timed step) and the host time they took."""
    dims = Dims(1, 32, steps + 64, len(tokenizer), slots)
    engine = Engine(ZeroCostSession(dims, digit_tokens(tokenizer)), tokenizer)
    prompts = (BENCH_PROMPTS * 2)[:slots]
    for p in prompts:
        engine.submit(engine.encode(p), SamplingParams(max_tokens=steps))
    while any(s is None for s in engine.slots) or engine.queue:  # admit every slot first
        engine.step()
    made = sum(len(s.tokens) for s in engine.slots if s is not None)
    start = time.perf_counter()
    for _ in range(steps - 2):
        engine.step()
    seconds = time.perf_counter() - start
    return Timed(sum(len(s.tokens) for s in engine.slots if s is not None) - made, seconds)


def loop_overhead_ms(tokenizer, slots: int = 16, steps: int = 500) -> float:
    """Host time per decode step of the loop with a zero-cost session at ``slots`` sequences."""
    return loop_overhead(tokenizer, slots, steps).seconds / (steps - 2) * 1000


def matmul_ceiling(session, repeats: int = 20) -> float | None:
    """Tokens/s of one sequence if a decode step did nothing but its matmuls, on this session's weights
    and threads: the kernels' ceiling, which no cut in the step's other work can pass (None for a session
    that does not list its matmuls)."""
    import torch  # torch (the serve extra) loads when a measurement runs

    products = getattr(session, "products", None)
    if products is None:
        return None
    calls = [(linear, torch.randn(1, linear.inputs)) for linear in products()]
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            for linear, x in calls:
                linear.rowwise(x)
            best = min(best, time.perf_counter() - start)
    return 1 / best


def hf_generate(model, tokenizer, max_tokens: int) -> Timed:
    """transformers ``generate`` (greedy, KV cache, batch 1) on the same weights: the baseline."""
    import torch  # torch (the serve extra) loads when a measurement runs

    enc = tokenizer(BENCH_PROMPTS[:1], return_tensors="pt")
    with torch.inference_mode():
        start = time.perf_counter()
        out = model.generate(**enc, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)
        seconds = time.perf_counter() - start
    return Timed(out.shape[1] - enc.input_ids.shape[1], seconds)


CHAT_SYSTEM = ("You are a helpful assistant. Answer in one or two plain sentences, and say so when you do not know. "
               "Keep to the question asked.\n")


def chat_turns(engine: Engine, conversations: int, turns: int, max_tokens: int) -> list[float]:
    """``conversations`` chats at once on one engine, as the bench's ``--turns`` sends them: each next turn (the
    history, then a new question) is submitted when the last one's answer ends. The time to first token of every
    turn after the first, in seconds (from its submission to its first token)."""
    params = SamplingParams(max_tokens=max_tokens, min_tokens=max_tokens)
    questions = iter(BENCH_PROMPTS * (turns * conversations // len(BENCH_PROMPTS) + 1))
    live: dict[int, tuple[int, str, float]] = {}  # sequence id -> (turn, its prompt, submitted at)
    answered: set[int] = set()  # sequences whose first text is out
    ttfts: list[float] = []

    def ask(history: str, turn: int) -> None:
        prompt = history + next(questions)
        seq = engine.submit(engine.encode(prompt), params)
        live[seq.id] = (turn, prompt, time.perf_counter())

    for _ in range(conversations):
        ask(CHAT_SYSTEM, 1)
    while live:
        for update in engine.step():
            seq = update.seq
            turn, prompt, submitted = live[seq.id]
            if seq.id not in answered:
                answered.add(seq.id)
                if turn > 1:
                    ttfts.append(time.perf_counter() - submitted)
            if update.finished:
                del live[seq.id]
                if turn < turns:
                    ask(prompt + seq.text + "\n", turn + 1)
    return ttfts
