"""Likelihood: the reference's own continuation scored under each path (in-process, or by a served bundled backend's
``continuation`` input and ``logprobs`` output), perplexity on the shipped corpus (in-process), and the mean per-token
KL divergence to the reference (full distributions: in-process only).

In process, a continuation is scored by the engine's own loop (its prefill chunks, slots and batches) with a sampler
that feeds the given tokens instead of choosing one and keeps each step's full log-probability rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams

from .paths import Answer, EvalPath

CORPUS_WINDOW = 256  # tokens per perplexity window (fewer where ctx_len is shorter)
Advance = Callable[[int], None]


class Forced:
    """A sampler that returns the continuation's next token and keeps the log-probabilities it was given."""

    def __init__(self, continuation: Sequence[int], keep_rows: bool) -> None:
        self.continuation = list(continuation)
        self.keep_rows = keep_rows
        self.nll: list[float] = []
        self.rows: list[np.ndarray] = []

    def __call__(self, logits: np.ndarray, seen: list[int]) -> int:
        row = logits.astype(np.float64)
        row = row - row.max()
        logp = row - math.log(np.exp(row).sum())
        token = self.continuation[len(self.nll)]
        self.nll.append(-float(logp[token]))
        if self.keep_rows:
            self.rows.append(logp.astype(np.float32))
        return token


def score(engine: Engine, prompts: Sequence[list[int]], continuations: Sequence[list[int]],
          keep_rows: bool = False) -> list[Forced]:
    """Each continuation after its prompt (cut to what ctx_len leaves), scored in one run of the engine's loop."""
    forced, seqs = [], []
    for prompt_ids, continuation in zip(prompts, continuations):
        room = engine.dims.ctx_len - len(prompt_ids)
        f = Forced(continuation[:max(room, 0)], keep_rows)
        forced.append(f)
        if f.continuation:
            seq = engine.prepare(prompt_ids, SamplingParams(max_tokens=len(f.continuation), ignore_eos=True))
            seq.sampler = f
            seqs.append(seq)
    engine.enqueue(seqs)
    while not all(s.finished for s in seqs):
        engine.step()
    failed = next((s for s in seqs if s.finish_reason == "error"), None)
    if failed is not None:
        raise RuntimeError(f"scoring failed: {failed.error}")
    return forced


@dataclass
class Likelihood:
    """One path's figures: per prompt the mean NLL of the reference's continuation and the mean KL to the reference
    (None where not measured); over the set, token-weighted means and the corpus perplexity."""

    nll: list[float | None]
    kl: list[float | None]
    tokens: int
    mean_nll: float | None
    mean_kl: float | None
    perplexity: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"mean_nll": _round(self.mean_nll), "mean_kl": _round(self.mean_kl),
                "perplexity": _round(self.perplexity), "tokens": self.tokens,
                "nll": [_round(v) for v in self.nll], "kl": [_round(v) for v in self.kl]}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


def continuation(engine: Engine, answer: Answer) -> list[int]:
    """The reference's continuation as this engine's tokens: its tokens where it has them, else its text's."""
    if answer.tokens is not None:
        return list(answer.tokens)
    return engine.tokenizer(answer.text, add_special_tokens=False)["input_ids"]


def measure(paths: Sequence[EvalPath], reference: EvalPath, prompts: Sequence[str], answers: Sequence[Answer],
            advance: Advance, group: int = 8) -> dict[str, Likelihood]:
    """Every scoring path's likelihood of the reference's answers, ``group`` prompts at a time (the reference's
    distributions for KL, in-process only, are held for one group only)."""
    scored = [p for p in paths if p.scores]
    kl_ok = reference.engine is not None
    nll: dict[str, list[float | None]] = {p.name: [] for p in scored}
    kl: dict[str, list[float | None]] = {p.name: [] for p in scored}
    sums = {p.name: [0.0, 0.0, 0.0] for p in scored}  # nll sum, kl sum, tokens
    for start in range(0, len(prompts), group):
        part = range(start, min(start + group, len(prompts)))
        ref, ref_rows = None, None
        if kl_ok:
            assert reference.engine is not None, "kl_ok: the reference is in-process"
            ref = score(reference.engine, [reference.engine.encode(prompts[i]) for i in part],
                        [continuation(reference.engine, answers[i]) for i in part], keep_rows=True)
            ref_rows = [np.stack(f.rows) if f.rows else None for f in ref]
        for path in scored:
            for k, (losses, rows) in enumerate(_scored(path, reference, prompts, answers, part, kl_ok, ref)):
                nll[path.name].append(sum(losses) / len(losses) if losses else None)
                divergence = _kl(ref_rows[k], rows) if ref_rows is not None and rows else None
                kl[path.name].append(divergence)
                total = sums[path.name]
                total[0] += sum(losses)
                total[1] += (divergence or 0.0) * len(losses)
                total[2] += len(losses)
        advance(len(part))
    out = {}
    for path in scored:
        nll_sum, kl_sum, n = sums[path.name]
        mean_kl = kl_sum / n if kl_ok and n and path.engine is not None else None
        out[path.name] = Likelihood(nll[path.name], kl[path.name], int(n), nll_sum / n if n else None, mean_kl)
    return out


def _scored(path: EvalPath, reference: EvalPath, prompts: Sequence[str], answers: Sequence[Answer], part: range,
            keep_rows: bool, ref: list[Forced] | None) -> list[tuple[list[float], list[np.ndarray]]]:
    """(per-token NLL, log-probability rows) of each prompt in ``part`` on ``path``: in-process (rows kept for KL),
    or scored by the server (the reference's tokens, else its text; no rows)."""
    if path is reference and ref is not None:
        return [(f.nll, f.rows) for f in ref]
    engine = path.engine
    if engine is not None:
        got = score(engine, [engine.encode(prompts[i]) for i in part], [continuation(engine, answers[i]) for i in part],
                    keep_rows=keep_rows)
        return [(f.nll, f.rows) for f in got]
    given = [i for i in part if answers[i].tokens or answers[i].text]  # an empty answer has nothing to score
    values = [answers[i].tokens or answers[i].text for i in given]
    losses = dict(zip(given, path.served_nll([prompts[i] for i in given], values))) if given else {}
    return [(losses.get(i, []), []) for i in part]


def _kl(reference: np.ndarray | None, rows: list[np.ndarray]) -> float | None:
    """Mean over positions of KL(reference || candidate), from log-probabilities."""
    if reference is None or not rows:
        return None
    candidate = np.stack(rows)
    if candidate.shape != reference.shape:
        return None
    ref = reference.astype(np.float64)
    return max(0.0, float((np.exp(ref) * (ref - candidate.astype(np.float64))).sum(axis=1).mean()))  # >= 0 but for
    # float32 rounding of equal rows


def perplexity(engine: Engine, corpus: Path) -> tuple[float, int]:
    """(perplexity, tokens scored) of ``engine`` on the corpus, in windows that fit its ctx_len."""
    ids = engine.tokenizer(corpus.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    width = min(CORPUS_WINDOW, engine.dims.ctx_len)
    windows = [ids[i:i + width] for i in range(0, len(ids), width) if len(ids[i:i + width]) > 1]
    scored = score(engine, [w[:1] for w in windows], [w[1:] for w in windows])
    losses = [v for f in scored for v in f.nll]
    return math.exp(sum(losses) / len(losses)), len(losses)
