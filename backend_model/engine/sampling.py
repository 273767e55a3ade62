"""Request parameters and next-token selection (greedy by default)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    """The engine's typed sampling fields. A request's values come checked by the controls' schema
    (:meth:`of`); the defaults are what a request that sets nothing gets (greedy, until EOS or ctx_len)."""

    max_tokens: int | None = None  # None: until EOS or ctx_len, as the seed's backend does
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    min_tokens: int = 0  # EOS does not end a sequence before this many tokens
    ignore_eos: bool = False  # generate to max_tokens / ctx_len whatever the model says (benchmarks)
    logprobs: int | None = None  # report each token's log-probability and this many alternatives (None: none)
    structured_outputs: dict[str, Any] | None = None  # the grammar the reply must match (engine.grammar)
    lora_name: str | None = None  # the LoRA adapter that answers (None: the base model)
    other: tuple[tuple[str, Any], ...] = ()  # (name, value) of the schema's controls without a field here yet

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> SamplingParams:
        """From the checked values of a request's controls (by the schema's names; unset ones absent)."""
        own = {f.name for f in fields(cls)} - {"other"}
        rest = tuple(sorted((k, v) for k, v in values.items() if k not in own))
        given = {k: v for k, v in values.items() if k in own}
        if given.get("max_tokens") == 0:  # as many as the context allows
            given["max_tokens"] = None
        return cls(**given, other=rest)

    def changed(self) -> dict[str, Any]:
        """The values a request set away from the defaults (the request log shows them)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}
        out.update(out.pop("other", ()))
        return out

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
