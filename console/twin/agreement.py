"""Token-level agreement, as QEfficient's own tests assert it: exact greedy tokens on every path.

The paths: Hugging Face full recompute (the reference), the CPU KV engine, the ONNX twin through
the QAIC adapter (``QaicSession`` on ``OnnxInferenceSession``) and, where a card and a QPC are
present, the card. The engines share the twin's compile dimensions; every path generates at most
``max_tokens`` per prompt and never past ``ctx_len``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.models import Progress, eos_ids, load_pretrained
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.protocol import Dims
from backend_model.sessions.qaic import QaicSession
from backend_model.twin.session import onnx_opener

REFERENCE = "hf"


@dataclass(frozen=True)
class Divergence:
    """Where a path first leaves the reference: prompt index, generated-token position, both tokens."""

    prompt: int
    position: int
    path: str
    expected: int | None  # None: the path generated more tokens than the reference
    got: int | None  # None: the path stopped early


@dataclass
class Agreement:
    """Every path's greedy tokens for every prompt, and how long each path took."""

    prompts: list[str]
    paths: dict[str, list[list[int]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    tokenizer: Any = field(default=None, repr=False)

    @property
    def match(self) -> bool:
        return self.first_divergence() is None

    def divergence(self, prompt: int, path: str) -> Divergence | None:
        """Where ``path`` first leaves the reference on one prompt (None: the same tokens)."""
        expected, got = self.paths[REFERENCE][prompt], self.paths[path][prompt]
        for i in range(max(len(expected), len(got))):
            want = expected[i] if i < len(expected) else None
            have = got[i] if i < len(got) else None
            if want != have:
                return Divergence(prompt, i, path, want, have)
        return None

    def first_divergence(self) -> Divergence | None:
        """The earliest divergence from the reference (by prompt, then position)."""
        for p in range(len(self.prompts)):
            found = [d for name in self.paths if name != REFERENCE if (d := self.divergence(p, name)) is not None]
            if found:
                return min(found, key=lambda d: d.position)
        return None

    def text(self, token: int) -> str:
        return self.tokenizer.decode([token]) if self.tokenizer is not None else ""

    def tokens_per_s(self, path: str) -> float:
        count = sum(len(t) for t in self.paths[path])
        return count / self.seconds[path] if self.seconds.get(path) else 0.0

    def to_json(self) -> dict:
        return {"prompts": self.prompts, "paths": self.paths, "match": self.match}


def hf_greedy(model, tokenizer, prompt: str, max_tokens: int) -> list[int]:
    """transformers' greedy decoding with full recompute (no KV cache): the reference."""
    import torch

    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=max_tokens, do_sample=False, use_cache=False,
                             pad_token_id=tokenizer.eos_token_id)
    return out[0, ids.shape[1]:].tolist()


def engine_tokens(engine: Engine, prompts: list[str], max_tokens: int) -> list[list[int]]:
    return [s.tokens for s in engine.generate(prompts, SamplingParams(max_tokens=max_tokens))]


def check(source: str, graph: str | Path, prompts: list[str], max_tokens: int, qpc: str | Path | None = None,
          fallback: list[dict[str, Any]] | None = None, progress: Progress = print) -> Agreement:
    """Run every path on ``prompts``; the twin's dimensions (from ``graph``, or ``fallback``'s
    specializations where none are beside it) apply to the engines."""
    import torch

    opener = onnx_opener(fallback, torch.get_num_threads(), "the dimension options")  # torch's threads: fair speed
    twin = QaicSession(graph, opener=opener)
    model, tokenizer = load_pretrained(source, progress)
    eos = eos_ids(model, tokenizer)
    dims: Dims = twin.dims
    budgets = [dims.ctx_len - len(tokenizer(p).input_ids) for p in prompts]
    if min(budgets) < 1:
        raise ValueError(f"prompt {budgets.index(min(budgets))} does not fit the graph's ctx_len {dims.ctx_len}")
    engines = {"cpu_kv": Engine(CpuKVSession.of(model, dims), tokenizer, eos), "onnx": Engine(twin, tokenizer, eos)}
    if qpc is not None:
        engines["card"] = Engine(QaicSession(qpc), tokenizer, eos)
    runs: dict[str, Callable[[], list[list[int]]]] = {
        REFERENCE: lambda: [hf_greedy(model, tokenizer, p, min(max_tokens, n)) for p, n in zip(prompts, budgets)]
    }
    for name, engine in engines.items():
        runs[name] = partial(engine_tokens, engine, prompts, max_tokens)
    result = Agreement(prompts, tokenizer=tokenizer)
    for name, run in runs.items():
        progress(f"{name}: generating {len(prompts)} x {max_tokens} tokens ...")
        started = time.perf_counter()
        result.paths[name] = run()
        result.seconds[name] = time.perf_counter() - started
        progress(f"{name}: {result.seconds[name]:.1f} s, {result.tokens_per_s(name):.1f} tokens/s")
    return result
