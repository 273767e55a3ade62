"""Request parameters and next-token selection (greedy by default)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


class BadRequest(ValueError):
    """A request the engine refuses, with a message meant for the client."""


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int | None = None  # None: until EOS or ctx_len, as the seed's backend does
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = field(default_factory=tuple)
    min_tokens: int = 0  # EOS does not end a sequence before this many tokens
    ignore_eos: bool = False  # generate to max_tokens / ctx_len whatever the model says (benchmarks)

    def __post_init__(self) -> None:
        def bad(name: str, value, rule: str) -> BadRequest:
            return BadRequest(f"{name} must be {rule}, got {value!r}")

        def finite(name: str, value) -> float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise bad(name, value, "a finite number")
            return float(value)

        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1
        ):
            raise bad("max_tokens", self.max_tokens, "a positive integer")
        if finite("temperature", self.temperature) < 0:
            raise bad("temperature", self.temperature, ">= 0")
        if not 0 < finite("top_p", self.top_p) <= 1:
            raise bad("top_p", self.top_p, "in (0, 1]")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise bad("top_k", self.top_k, "an integer >= 0")
        if finite("repetition_penalty", self.repetition_penalty) <= 0:
            raise bad("repetition_penalty", self.repetition_penalty, "> 0")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise bad("seed", self.seed, "an integer >= 0")
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, int) or self.min_tokens < 0:
            raise bad("min_tokens", self.min_tokens, "an integer >= 0")
        if not isinstance(self.ignore_eos, bool):
            raise bad("ignore_eos", self.ignore_eos, "true or false")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise bad("stop", self.stop, "non-empty strings")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 and self.repetition_penalty == 1.0


class Sampler:
    """Picks one sequence's next token from its logits row."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def __call__(self, logits: np.ndarray, seen: list[int]) -> int:
        p = self.params
        if p.greedy:
            return int(logits.argmax())
        logits = logits.astype(np.float64, copy=True)
        if p.repetition_penalty != 1.0 and seen:
            idx = np.unique(np.asarray(seen))
            vals = logits[idx]
            logits[idx] = np.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
        if p.temperature == 0:
            return int(logits.argmax())
        logits /= p.temperature
        if p.top_k and p.top_k < len(logits):
            kth = np.partition(logits, -p.top_k)[-p.top_k]
            logits[logits < kth] = -np.inf
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        if p.top_p < 1.0:
            order = np.argsort(-probs)
            cum = np.cumsum(probs[order])
            cut = order[np.searchsorted(cum, p.top_p) + 1 :]
            probs[cut] = 0.0
            probs /= probs.sum()
        return int(self.rng.choice(len(probs), p=probs))
