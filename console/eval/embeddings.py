"""``eval embeddings``: how close each candidate's vectors are to a reference's on one small set: the cosine of every
input's two vectors (mean and minimum) and the agreement of a retrieval (each query ranks the documents by cosine: the
share of queries whose first document is the reference's, and the mean Spearman correlation of the two rankings).

A path is a served embedding model (``MODEL@URL``: a tritonserver, the front, vLLM or any OpenAI-compatible server,
through the consoles' adapters), the embedding backend's CPU encoder in this process (``cpu`` or ``cpu:fp32``, on
``--model``: the embedded all-MiniLM-L6-v2 or a folder), or a recorded golden run (its vectors). ``eval embeddings
record`` keeps one path's vectors and the set in a golden file; ``eval embeddings compare`` replays them as the
reference and says whether each candidate stays within the thresholds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from console.core.adapters import adapter_for
from console.core.embeddings import probed, unit

from .paths import SpecError, parse, unique
from .report import aligned, figure, write_csv
from .run import ASSETS

TEXTS = ASSETS / "embeddings.json"
FORMAT = "qaic-console-eval-embeddings/1"
SPEC_HELP = ("MODEL@URL (a served embedding model: a tritonserver's address or an OpenAI-compatible .../v1 URL), or "
             "cpu (the embedding backend's CPU encoder on --model, in this process)")
DIGITS = 7  # a recorded vector's significant digits (float32 keeps about 7)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class TextSet:
    """The inputs of an eval: texts, and a retrieval set (queries ranking documents)."""

    texts: list[str]
    queries: list[str]
    documents: list[str]

    @property
    def inputs(self) -> list[str]:
        """Every input, as each path is asked for them (texts, queries, documents)."""
        return [*self.texts, *self.queries, *self.documents]

    def split(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the queries', the documents') rows of :attr:`inputs`' vectors."""
        start = len(self.texts)
        return vectors[start:start + len(self.queries)], vectors[start + len(self.queries):]

    def to_json(self) -> dict[str, list[str]]:
        return {"texts": self.texts, "queries": self.queries, "documents": self.documents}

    @classmethod
    def of(cls, data: Any, where: str) -> TextSet:
        """The set in ``data`` (a JSON object); ValueError naming what is missing."""
        lists = {key: data.get(key) if isinstance(data, dict) else None for key in ("texts", "queries", "documents")}
        for key, items in lists.items():
            if not isinstance(items, list) or not all(isinstance(t, str) and t.strip() for t in items):
                raise ValueError(f"{where}: {key!r} must be a list of non-empty strings")
        if not lists["texts"] and not lists["queries"]:
            raise ValueError(f"{where}: give some texts, or queries and documents")
        if bool(lists["queries"]) != bool(lists["documents"]) or len(lists["documents"] or ()) == 1:
            raise ValueError(f"{where}: a retrieval needs queries and at least two documents")
        return cls(lists["texts"], lists["queries"], lists["documents"])  # type: ignore[arg-type]


def read_texts(path: Path) -> TextSet:
    """A set file (``{"texts": [...], "queries": [...], "documents": [...]}``); ValueError on anything else."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    return TextSet.of(data, str(path))


@dataclass
class VectorPath:
    """A path: its name, spec and kind, and how it gives vectors (``embed``), or its recorded ones."""

    name: str
    spec: str
    kind: str
    embed: Callable[[list[str]], np.ndarray] | None = None
    recorded: np.ndarray | None = None

    def vectors(self, inputs: list[str]) -> np.ndarray:
        if self.recorded is not None:
            if len(self.recorded) != len(inputs):
                raise SpecError(f"{self.name} recorded {len(self.recorded)} vectors for {len(inputs)} inputs")
            return self.recorded
        assert self.embed is not None, "a path that embeds"
        return np.asarray(self.embed(inputs), dtype=np.float32)


def _served(model: str, url: str) -> Callable[[list[str]], np.ndarray]:
    """The vectors of a served model (:func:`~console.core.embeddings.probed` first: a model not served there, or
    not an embedding model, fails before any path runs)."""
    http, _, grpc = url.partition(",")
    server = adapter_for(http, grpc_url=grpc or None)
    info = probed(server, model)
    return lambda inputs: server.embed(model, inputs, None, info)[0]


def _cpu(source: str, progress: Progress) -> Callable[[list[str]], np.ndarray]:
    """The embedding backend's CPU encoder (torch, fp32) on ``source``, pooled and normalised as its files say."""
    from backend_model.contract.sentence_config import sentence_config
    from backend_model.embedding.embedder import build_embedder
    from backend_model.embedding.settings import EmbeddingSettings
    from backend_model.embedding.source import model_folder

    told = sentence_config(model_folder(source))
    settings = EmbeddingSettings(engine="cpu", hf_model_name=source, pooling=told.pooling or "mean",
                                 normalize=told.normalize if told.normalize is not None else True)
    embedder = build_embedder(settings, progress)
    progress(embedder.description)
    return lambda inputs: embedder.embed(embedder.tokens(inputs))


CPU_SPECS = ("cpu", "cpu:fp32")


def opened(specs: Sequence[str], source: str, progress: Progress) -> list[VectorPath]:
    """The paths ``specs`` name, in order (served models' info read first); SpecError for one that names no embedding
    path."""
    names: set[str] = set()
    kinds = ["in-process" if spec.strip() in CPU_SPECS else parse(spec)[0] for spec in specs]
    for spec, kind in zip(specs, kinds):
        if kind not in ("served", "in-process"):
            raise SpecError(f"{spec!r} is no embedding path: use {SPEC_HELP}")
    served = {i: _served(*parse(spec)[1]) for i, (spec, kind) in enumerate(zip(specs, kinds)) if kind == "served"}
    return [VectorPath(unique(spec if kind == "served" else "cpu-fp32", names), spec, kind,
                       served[i] if kind == "served" else _cpu(source, progress))
            for i, (spec, kind) in enumerate(zip(specs, kinds))]


def _ranks(scores: np.ndarray) -> np.ndarray:
    """Each row's ranks (0: the highest score), ties broken by position."""
    return np.argsort(np.argsort(-scores, axis=1, kind="stable"), axis=1, kind="stable")


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's correlation of two rank vectors without ties: 1 - 6 Σd² / (n (n² - 1))."""
    n = len(a)
    return float(1.0 - 6.0 * float(((a - b) ** 2).sum()) / (n * (n * n - 1)))


def compare(texts: TextSet, reference: np.ndarray, candidate: np.ndarray) -> dict[str, Any]:
    """A candidate's vectors against the reference's: each input's cosine (mean, min and the input of the min), and
    the retrieval's top-1 agreement and mean Spearman correlation (None without a retrieval set)."""
    if reference.shape != candidate.shape:
        raise ValueError(f"vectors of {reference.shape[1]} and {candidate.shape[1]} dimensions cannot be compared")
    cosines = (unit(reference) * unit(candidate)).sum(axis=1)
    worst = int(np.argmin(cosines))
    out: dict[str, Any] = {"mean_cosine": round(float(cosines.mean()), 6), "min_cosine": round(float(cosines[worst]),
                                                                                                 6),
                           "min_cosine_input": texts.inputs[worst], "cosines": [round(float(c), 6) for c in cosines],
                           "top1_agreement": None, "spearman": None}
    if texts.queries:
        ranks = [_ranks(unit(q) @ unit(d).T) for q, d in (texts.split(reference), texts.split(candidate))]
        out["top1_agreement"] = round(float((np.argmin(ranks[0], axis=1) == np.argmin(ranks[1], axis=1)).mean()), 6)
        out["spearman"] = round(float(np.mean([spearman(a, b) for a, b in zip(*ranks)])), 6)
    return out


@dataclass
class VectorEvaluation:
    """Every path's vectors and each candidate's comparison with the reference."""

    texts: TextSet
    reference: str
    paths: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> spec, kind, dimension, seconds
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    comparisons: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def candidates(self) -> list[str]:
        return [name for name in self.paths if name != self.reference]

    def summary(self, name: str) -> dict[str, Any]:
        """One path's row: its figures against the reference (the reference's own: none)."""
        figures = {k: v for k, v in self.comparisons.get(name, {}).items() if k != "cosines"}
        return {"path": name, **self.paths[name], **figures}

    def to_json(self, vectors: bool = False) -> dict[str, Any]:
        """The whole run (``vectors``: with every path's vectors, as a golden file keeps its reference's)."""
        return {"format": FORMAT, **self.texts.to_json(), "reference": self.reference,
                "summary": [self.summary(name) for name in self.paths],
                "paths": {name: {**self.paths[name], "comparison": self.comparisons.get(name),
                                 **({"vectors": [[float(f"{v:.{DIGITS}g}") for v in row]
                                                 for row in self.vectors[name]]} if vectors else {})}
                          for name in self.paths}}


def evaluate(reference: VectorPath, candidates: Sequence[VectorPath], texts: TextSet,
             progress: Progress) -> VectorEvaluation:
    """Ask every path for the set's vectors, then compare each candidate's with the reference's."""
    result = VectorEvaluation(texts, reference.name)
    for path in (reference, *candidates):
        progress(f"{path.name}: {len(texts.inputs)} vectors ...")
        started = time.perf_counter()
        result.vectors[path.name] = path.vectors(texts.inputs)
        result.paths[path.name] = {"spec": path.spec, "kind": path.kind,
                                   "dimension": int(result.vectors[path.name].shape[1]),
                                   "seconds": round(time.perf_counter() - started, 3)}
    for path in candidates:
        try:
            result.comparisons[path.name] = compare(texts, result.vectors[reference.name], result.vectors[path.name])
        except ValueError as exc:
            raise ValueError(f"{path.name} against {reference.name}: {exc}") from None
    return result


COLUMNS = ("path", "kind", "dimension", "mean cosine", "min cosine", "top-1", "Spearman", "seconds")


def table(result: VectorEvaluation) -> str:
    """The plain-text table: the reference first, then each candidate's figures."""
    rows = [COLUMNS]
    for name in result.paths:
        s = result.summary(name)
        if name == result.reference:
            figures = ("reference", "-", "-", "-")
        else:
            figures = (figure(s["mean_cosine"], 6), figure(s["min_cosine"], 6), figure(s["top1_agreement"]),
                       figure(s["spearman"], 4))
        rows.append((name, s["kind"], str(s["dimension"]), *figures, figure(s["seconds"], 2)))
    lines = aligned(rows)
    texts = result.texts
    lines.append(f"{len(texts.inputs)} inputs ({len(texts.texts)} texts, {len(texts.queries)} queries, "
                 f"{len(texts.documents)} documents); reference {result.reference}; cosine: each input's two vectors; "
                 "top-1: queries whose first document is the reference's; Spearman: of each query's ranking, mean")
    return "\n".join(lines)


SUMMARY_FIELDS = ("path", "spec", "kind", "dimension", "mean_cosine", "min_cosine", "min_cosine_input",
                  "top1_agreement", "spearman", "seconds")


def write(result: VectorEvaluation, out_dir: Path) -> list[Path]:
    """``eval_embeddings.json`` (everything but the vectors) and ``eval_embeddings.csv`` (one row a path)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    document, summary = out_dir / "eval_embeddings.json", out_dir / "eval_embeddings.csv"
    document.write_text(json.dumps(result.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    write_csv(summary, SUMMARY_FIELDS, [result.summary(name) for name in result.paths])
    return [document, summary]


def record(result: VectorEvaluation, path: Path) -> None:
    """A golden file: the set, and the recorded path's vectors."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(vectors=True), ensure_ascii=False) + "\n", encoding="utf-8")


def recorded(file: Path) -> tuple[TextSet, VectorPath]:
    """A golden file's set and its recorded path (its vectors as the reference); ValueError on anything else."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format') if isinstance(data, dict) else None!r}")
        name = data["reference"]
        vectors = np.array(data["paths"][name]["vectors"], dtype=np.float32)
        spec = str(data["paths"][name]["spec"])
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{file} is not a qaic-console embeddings record: {type(exc).__name__} {exc}") from None
    texts = TextSet.of(data, str(file))
    if vectors.ndim != 2 or len(vectors) != len(texts.inputs):
        raise ValueError(f"{file} holds {len(vectors)} vectors for {len(texts.inputs)} inputs")
    return texts, VectorPath(f"golden:{name}", spec, "recorded", recorded=vectors)


def verdicts(result: VectorEvaluation, min_cosine: float, min_top1: float) -> list[tuple[str, bool, str]]:
    """(candidate, passed, why) against the recorded reference: its least cosine and its top-1 agreement."""
    out = []
    for name in result.candidates:
        row = result.comparisons[name]
        passed = row["min_cosine"] >= min_cosine
        why = [f"min cosine {row['min_cosine']:.6f} (min {min_cosine})"]
        if row["top1_agreement"] is not None:
            passed = passed and row["top1_agreement"] >= min_top1
            why.append(f"top-1 {row['top1_agreement']:.0%} (min {min_top1:.0%})")
        out.append((name, passed, "; ".join(why)))
    return out
