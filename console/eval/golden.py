"""Golden runs: ``eval record`` keeps one path's greedy answers and figures in a file; ``eval compare`` replays it as
the reference for later runs and says whether each candidate stays within the thresholds (a CI gate).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .images import PromptImages, from_record
from .paths import Answer, EvalPath
from .run import FORMAT, Evaluation


class GoldenError(ValueError):
    """A file that is not a recorded eval."""


def write(result: Evaluation, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Golden:
    """A recorded run: its prompts, token budget, and the recorded path as a reference that replays its answers."""

    prompts: list[str]
    max_tokens: int
    path: EvalPath
    images: list[PromptImages] = field(default_factory=list)  # each prompt's, read again (none: text prompts)


def read(file: Path) -> Golden:
    """The golden file's recorded path (its reference's answers and figures); GoldenError on anything else."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise GoldenError(f"{file} is not a qaic-console eval record (format {data.get('format')!r})")
        name = data["reference"]
        recorded = data["paths"][name]
        answers = [Answer.of(a) for a in recorded["answers"]]
        figures = recorded.get("likelihood") or {}
        prompts, max_tokens = [str(p) for p in data["prompts"]], int(data["max_tokens"])
        entries = data.get("images") or []
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, GoldenError):
            raise
        raise GoldenError(f"{file} is not a qaic-console eval record: {type(exc).__name__} {exc}") from None
    if len(answers) != len(prompts):
        raise GoldenError(f"{file} holds {len(answers)} answers for {len(prompts)} prompts")
    images = from_record(entries)  # a recorded image gone or changed: a UsageError naming it
    if images and len(images) != len(prompts):
        raise GoldenError(f"{file} holds images for {len(images)} of its {len(prompts)} prompts")
    kept = {f"recorded_{k}": figures.get(k) for k in ("mean_nll", "perplexity") if figures.get(k) is not None}
    path = EvalPath(f"golden:{name}", str(file), answers=answers, recorded={"recorded": recorded["spec"], **kept})
    return Golden(prompts, max_tokens, path, images)


def verdicts(result: Evaluation, min_exact: float, max_nll_increase: float | None) -> list[tuple[str, bool, str]]:
    """(candidate, passed, why) against the recorded reference."""
    recorded = result.paths[result.reference].get("recorded_mean_nll")
    out = []
    for name in result.candidates:
        row: dict[str, Any] = result.summary(name)
        reasons, passed = [f"exact {row['exact']}/{row['prompts']} (min {min_exact:.0%})"], True
        if row["exact_rate"] < min_exact:
            passed = False
        if max_nll_increase is not None:
            nll = row.get("mean_nll")
            if nll is None or recorded is None:
                reasons.append("NLL not measured (needs an in-process candidate and a recorded NLL)")
                passed = False
            else:
                increase = nll - recorded
                reasons.append(f"NLL {nll:.4f} vs recorded {recorded:.4f} (+{increase:.4f}, max +{max_nll_increase})")
                passed = passed and increase <= max_nll_increase
        out.append((name, passed, "; ".join(reasons)))
    return out
