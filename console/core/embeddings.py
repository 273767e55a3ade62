"""The consoles' embeddings mode, UI-free: :func:`embed` asks a server's adapter for the vectors of some texts, and
:class:`Embeddings` holds them with what the consoles show: each input's dimension and norm, and the cosine
similarity of every pair (:meth:`Embeddings.table` in a terminal, :meth:`Embeddings.as_dict` for JSON and the web
page's heat map).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from console.clients import BadRequest, ModelInfo

from .adapters import Adapter

LABEL = 16  # characters of an input shown as a row or column label


def unit(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to length 1 (a zero row stays zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


@dataclass(frozen=True)
class Embeddings:
    """``model``'s vectors of ``texts`` (one row each), their tokens (None: not sent) and the call's seconds."""

    model: str
    texts: list[str]
    vectors: np.ndarray
    tokens: list[int] | None
    seconds: float

    @property
    def norms(self) -> list[float]:
        return [float(n) for n in np.linalg.norm(self.vectors, axis=1)]

    @property
    def similarity(self) -> np.ndarray:
        """The cosine similarity of every pair of inputs (a zero vector's: 0)."""
        rows = unit(self.vectors)
        return np.clip(rows @ rows.T, -1.0, 1.0)

    def labels(self) -> list[str]:
        """Each input as a short label: its number and its start."""
        return [f"{i + 1} {t if len(t) <= LABEL else t[:LABEL - 1] + '…'}" for i, t in enumerate(self.texts)]

    def as_dict(self) -> dict[str, Any]:
        inputs = [{"index": i, "text": t, "dimension": int(self.vectors.shape[1]), "norm": round(n, 6),
                   "tokens": self.tokens[i] if self.tokens else None}
                  for i, (t, n) in enumerate(zip(self.texts, self.norms))]
        return {"model": self.model, "inputs": inputs, "seconds": self.seconds,
                "similarity": [[round(float(v), 6) for v in row] for row in self.similarity]}

    def table(self) -> str:
        """The inputs (dimension, norm, tokens) and the similarity matrix as plain text tables."""
        labels = self.labels()
        width = max(len(label) for label in labels)
        rows = [f"{'input':<{width}}  dimension  norm      tokens"]
        for i, (label, norm) in enumerate(zip(labels, self.norms)):
            tokens = str(self.tokens[i]) if self.tokens else "-"
            rows.append(f"{label:<{width}}  {self.vectors.shape[1]:>9}  {norm:<8.4f}  {tokens:>6}")
        rows += ["", f"cosine similarity ({self.model})", " " * width + "".join(f"{i + 1:>8}" for i in
                                                                              range(len(labels)))]
        rows += [f"{label:<{width}}" + "".join(f"{v:>8.4f}" for v in row)
                 for label, row in zip(labels, self.similarity)]
        return "\n".join(rows)


def embed(server: Adapter, model: str | None, texts: Sequence[str], timeout: float | None = None) -> Embeddings:
    """``texts``' vectors from ``model`` (None: the server's first embedding model); ClientError."""
    texts = list(texts)
    if not texts or not all(texts):
        raise BadRequest("give one or more non-empty texts to embed ('a|b|c')")
    name = model or server.embedding_model()
    started = time.perf_counter()
    vectors, tokens = server.embed(name, texts, timeout)
    return Embeddings(name, texts, vectors, tokens, time.perf_counter() - started)


def probed(server: Adapter, model: str | None, timeout: float | None = None) -> ModelInfo:
    """The embedding model a run asks (``model``, else the server's first one), read once and asked for one vector:
    a model not served there, or one that answers none, fails here with the server's reason, before any run."""
    info = server.model_info(model or server.embedding_model(), "batch", "http")
    server.embed(info.name, ["probe"], info.network_timeout(timeout), info)
    return info
