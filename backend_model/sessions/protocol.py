"""The session contract: what the generation loop needs from a QAIC card or the CPU.

It mirrors QEfficient's ``QAICInferenceSession`` as the loop uses it: ``run`` takes
``input_ids`` / ``position_ids`` (-1 marks prefill padding; an idle decode row repeats its last
token and position) and, with continuous batching, ``batch_index``; it returns ``logits`` of shape
[B, 1, vocab] for the last valid position of each row. The KV cache (or, for a causal model, the
token history) stays inside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..contract.errors import SessionError

__all__ = ["Dims", "LastFed", "Session", "SessionError", "TokenHistory", "read_rows"]


@dataclass(frozen=True)
class Dims:
    """Compile dimensions of a session (a QPC's specializations, or their CPU emulation)."""

    batch_size: int
    prefill_seq_len: int
    ctx_len: int
    vocab: int
    full_batch_size: int = 0  # > 0 turns on continuous batching

    @property
    def slots(self) -> int:
        """Rows decoded together: full_batch_size with continuous batching, else batch_size."""
        return self.full_batch_size or self.batch_size

    @property
    def continuous(self) -> bool:
        return self.full_batch_size > 0


class Session(Protocol):
    """A compiled model the loop can drive (a QPC on the card, the CPU engine, the ONNX twin)."""

    dims: Dims

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def read_rows(inputs: dict[str, np.ndarray], dims: Dims) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, position_ids, slot of each row) of one ``run`` call, checked against ``dims`` (ValueError)."""
    ids = np.asarray(inputs["input_ids"], dtype=np.int64)
    pos = np.asarray(inputs["position_ids"], dtype=np.int64)
    if ids.ndim != 2 or ids.shape != pos.shape:
        raise ValueError(f"input_ids {ids.shape} and position_ids {pos.shape} must be [B, S]")
    rows = ids.shape[0]
    slots = np.asarray(inputs.get("batch_index", np.arange(rows)), dtype=np.int64).reshape(-1)
    if len(slots) != rows or (slots >= dims.slots).any() or (slots < 0).any():
        raise ValueError(f"batch_index {slots.tolist()} does not fit {dims.slots} slots")
    if pos.max(initial=-1) >= dims.ctx_len:
        raise ValueError(f"position {int(pos.max())} is beyond ctx_len {dims.ctx_len}")
    return ids, pos, slots


class LastFed:
    """Each slot's last write (token, position) and the logits it gave. A decode row that repeats it (an idle
    row) would rewrite a cache entry with what produced it: its logits are these, it is not run again.

    A slot fed several rows in one call (drafted tokens, ``speculation.py``) keeps no last write: the next call
    rewrites positions before its last row's (a rejected draft's), so a row there is never a repeat."""

    def __init__(self, dims: Dims) -> None:
        self.fed = np.full((dims.slots, 2), -1, dtype=np.int64)
        self.logits = np.zeros((dims.slots, dims.vocab), dtype=np.float32)

    def repeats(self, slots: np.ndarray, ids: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Which decode rows (one token each) repeat their slot's last write."""
        return (self.fed[slots] == np.stack([ids, pos], 1)).all(1)

    def record(self, slots: np.ndarray, ids: np.ndarray, pos: np.ndarray, logits: np.ndarray) -> None:
        """The rows' last (token, position) and their logits; none for a slot fed several rows."""
        self.fed[slots] = np.stack([ids, pos], 1)
        self.logits[slots] = logits
        self.fed[slots[np.bincount(slots, minlength=len(self.fed))[slots] > 1]] = -1


class TokenHistory:
    """The retained state of a causal (non-KV) session: every slot's tokens so far.

    ``feed`` applies one ``run`` call's inputs (a row's first valid position truncates the slot, so a
    new prompt at position 0 starts afresh) and returns ``(row, tokens)`` for the rows to compute.
    """

    def __init__(self, dims: Dims) -> None:
        self.dims = dims
        self.slots: list[list[int]] = [[] for _ in range(dims.slots)]

    def feed(self, inputs: dict[str, np.ndarray]) -> list[tuple[int, list[int]]]:
        ids = np.asarray(inputs["input_ids"], dtype=np.int64)
        pos = np.asarray(inputs["position_ids"], dtype=np.int64)
        rows = ids.shape[0]
        index = np.asarray(inputs.get("batch_index", np.arange(rows)), dtype=np.int64).reshape(-1)
        if pos.max(initial=-1) >= self.dims.ctx_len:
            raise ValueError(f"position {int(pos.max())} is beyond ctx_len {self.dims.ctx_len}")
        live = []
        for r in range(rows):
            valid = pos[r] >= 0
            if not valid.any():
                continue
            history = self.slots[int(index[r])]
            del history[int(pos[r][valid][0]) :]
            history.extend(ids[r][valid].tolist())
            live.append((r, history))
        return live
