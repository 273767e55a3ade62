"""One eval: every path answers the prompts greedily; each candidate is compared with the reference (greedy
agreement) and, on in-process paths, scored (likelihood, perplexity, KL). The result is one JSON document the report
and the golden files are made from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend_model.models import load_tokenizer

from . import greedy
from . import likelihood as scoring
from .images import PromptImages, payloads
from .paths import Answer, EvalPath

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "eval"
PROMPTS = ASSETS / "prompts.txt"
CORPUS = ASSETS / "corpus.txt"
FORMAT = "qaic-console-eval/1"
Advance = Callable[[int], None]
Progress = Callable[[str], None]


def read_prompts(path: Path) -> list[str]:
    """One prompt a line; blank lines and ``#`` comments skipped; ``\\n`` is a newline. ValueError when none."""
    lines = path.read_text(encoding="utf-8").splitlines()
    prompts = [line.replace("\\n", "\n") for line in lines if line.strip() and not line.startswith("#")]
    if not prompts:
        raise ValueError(f"{path} holds no prompt")
    return prompts


@dataclass
class Evaluation:
    """Every path's answers, each candidate's comparisons with the reference, the likelihood figures."""

    prompts: list[str]
    max_tokens: int
    reference: str
    paths: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> spec, kind, seconds
    answers: dict[str, list[Answer]] = field(default_factory=dict)
    comparisons: dict[str, list[greedy.Comparison]] = field(default_factory=dict)
    scores: dict[str, scoring.Likelihood] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    images: list[PromptImages] = field(default_factory=list)  # each prompt's images (none: text prompts)

    @property
    def candidates(self) -> list[str]:
        return [name for name in self.paths if name != self.reference]

    def summary(self, name: str) -> dict[str, Any]:
        """One path's row: its agreement with the reference and its likelihood figures."""
        row: dict[str, Any] = {"path": name, **self.paths[name]}
        if name in self.comparisons:
            row.update(greedy.summary(self.comparisons[name], self.max_tokens))
        if name in self.scores:
            figures = self.scores[name].to_json()
            row.update({k: figures[k] for k in ("mean_nll", "mean_kl", "perplexity")})
        return row

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "prompts": self.prompts, "max_tokens": self.max_tokens, "reference": self.reference,
            "notes": self.notes,
            **({"images": [[image.to_json() for image in prompt] for prompt in self.images]} if self.images else {}),
            "summary": [self.summary(name) for name in self.paths],
            "paths": {name: {**self.paths[name],
                             "answers": [a.to_json() for a in self.answers[name]],
                             "comparisons": [c.to_json() for c in self.comparisons.get(name, [])],
                             "likelihood": self.scores[name].to_json() if name in self.scores else None}
                      for name in self.paths},
        }


def evaluate(reference: EvalPath, candidates: Sequence[EvalPath], prompts: Sequence[str], max_tokens: int,
             source: str, scored: bool, corpus: Path | None, advance: Advance, progress: Progress,
             images: Sequence[PromptImages] = ()) -> Evaluation:
    """Run every path (``images``: each prompt's), then compare and (``scored``, text prompts) score; ``advance(n)``
    as prompts are done."""
    paths = [reference, *candidates]
    result = Evaluation(list(prompts), max_tokens, reference.name, images=list(images))
    for path in paths:
        started = time.perf_counter()
        result.answers[path.name] = path.generate(prompts, max_tokens, advance, payloads(images))
        result.paths[path.name] = {"spec": path.spec, "kind": path.kind,
                                   "seconds": round(time.perf_counter() - started, 3), **path.recorded}
    tokenizer = next((p.tokenizer for p in paths if p.tokenizer is not None), None)
    if tokenizer is None:
        tokenizer, _ = load_tokenizer(source, progress)
    ref_answers = result.answers[reference.name]
    for path in candidates:
        result.comparisons[path.name] = [greedy.compare(r, c, tokenizer)
                                         for r, c in zip(ref_answers, result.answers[path.name])]
    if scored and images:
        result.notes.append("likelihood: not measured on image prompts (the paths score text only)")
    elif scored:
        _score(result, paths, reference, corpus, advance)
    return result


def _score(result: Evaluation, paths: Sequence[EvalPath], reference: EvalPath, corpus: Path | None,
           advance: Advance) -> None:
    """Likelihood of the reference's answers on every path that scores, and perplexity on ``corpus`` (in-process)."""
    if not any(p.scores for p in paths):
        result.notes.append("likelihood: no path can score (in-process engines and the bundled backend can)")
        return
    result.scores = scoring.measure(paths, reference, result.prompts, result.answers[reference.name], advance)
    if reference.engine is None:
        result.notes.append(f"KL: not measured (the reference {reference.name} is not in-process: no distributions)")
    unscored = [p.name for p in paths if not p.scores and p.answers is None]  # a recording keeps its own figures
    if unscored:
        result.notes.append(f"likelihood: not measured on {', '.join(unscored)} (no continuation scoring)")
    local = [(p, p.engine) for p in paths if p.engine is not None]
    if corpus is not None and local:
        for path, engine in local:
            value, tokens = scoring.perplexity(engine, corpus)
            result.scores[path.name].perplexity = value
            advance(1)
        result.notes.append(f"perplexity: on {corpus.name} ({tokens} tokens), in process")
