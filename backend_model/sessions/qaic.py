"""The QAIC session: the contract on a compiled QPC through QEfficient's ``QAICInferenceSession``.

QEfficient and qaicrt exist only inside Qualcomm's environment (``/opt/qeff-env``), so they are
imported lazily (by :mod:`..contract.qpc`, when a QPC is opened). The runtime is opened through one seam,
``opener``: the card's (``open_qpc``) or its ONNX Runtime twin's (``twin.session.onnx_opener``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from ..contract.qpc import RETAINED_PREFIXES, find_qpc, has_kv_cache, open_session, qaic_available, specializations_of
from .protocol import Dims, TokenHistory

__all__ = ["Opener", "QaicSession", "find_qpc", "open_qpc", "qaic_available", "read_dims"]

# (path, device_ids) -> (a QAICInferenceSession-like runtime, the program: the folder holding
# programqpc.bin or the twin's .onnx file; specializations.json sits in its parent). typing names: 3.8-safe.
Opener = Callable[[Path, Optional[List[int]]], Tuple[Any, Path]]


def open_qpc(path: Path, device_ids: list[int] | None) -> tuple[Any, Path]:
    """The card's opener: QEfficient's ``QAICInferenceSession`` on the QPC under ``path``."""
    qpc = find_qpc(path)
    return open_session(qpc, device_ids), qpc


def retained_names(session: Any) -> list[str]:
    """The buffers that stay on the card between runs."""
    return [n for n in list(session.input_names) + list(session.output_names) if n.startswith(RETAINED_PREFIXES)]


def binding_dims(session: Any, name: str) -> list[list[int]]:
    """Every specialization's dims for one binding; a fixed-shape QPC has one, in its bindings."""
    index = session.binding_index_map[name]
    if session.allowed_shapes:
        return [list(shapes[index][1]) for shapes in session.allowed_shapes]
    return [list(session.bindings[index].dims)]


def read_dims(session: Any, program: Path) -> tuple[Dims, bool]:
    """Compile dimensions (and whether the QPC has a KV cache) from a loaded session."""
    names = set(session.input_names)
    kv = has_kv_cache(list(names))
    ids = binding_dims(session, "input_ids")
    vocab = max(d[-1] for d in binding_dims(session, "logits"))
    batch_size = max(d[0] for d in ids)
    seq_len = max(d[1] for d in ids)
    full_batch = max(d[0] for d in binding_dims(session, "batch_index")) if "batch_index" in names else 0
    ctx_len = max(d[2] for d in binding_dims(session, "past_key.0")) if kv else seq_len
    entries = specializations_of(program)
    if entries:  # authoritative where present
        ctx_len = max(int(e.get("ctx_len", ctx_len)) for e in entries)
    if full_batch:  # prefill runs one prompt at a time into a slot
        batch_size = 1
    return Dims(batch_size, seq_len, ctx_len, vocab, full_batch), kv


class QaicSession:
    """A KV-cache or causal QPC behind the session contract."""

    adapters: tuple[str, ...] = ()  # the LoRA adapters compiled in (its lora_ids input: 1, 2, ... in this order)

    def __init__(self, qpc_path: str | Path, device_ids: list[int] | None = None, opener: Opener = open_qpc):
        self.session, program = opener(Path(qpc_path).expanduser(), device_ids)
        self.dims, self.kv = read_dims(self.session, program)
        if self.kv:
            self.session.skip_buffers(retained_names(self.session))  # the KV cache stays on the card
            self.history = None
        else:
            self.history = TokenHistory(self.dims)

    @property
    def keeps_prefix(self) -> bool:
        """A KV-cache QPC keeps a slot's cache on the device (retained state) until the slot is prefilled again."""
        return self.kv

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = len(inputs["input_ids"])
        if self.kv:
            # an output buffer fixes the output shape: logits of the last valid position per row
            self.session.set_buffers({"logits": np.zeros((rows, 1, self.dims.vocab), dtype=np.float32)})
            return {"logits": self.session.run(dict(inputs))["logits"]}
        return self._run_causal(inputs, rows)

    def _run_causal(self, inputs: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        """A causal QPC takes the whole left-padded sequence [batch, seq_len] with its mask."""
        logits = np.zeros((rows, 1, self.dims.vocab), dtype=np.float32)
        width, batch = self.dims.prefill_seq_len, self.dims.batch_size
        assert self.history is not None, "a causal QPC keeps its token history"
        for r, seq in self.history.feed(inputs):
            if len(seq) > width:
                raise ValueError(f"sequence of {len(seq)} tokens exceeds the QPC's seq_len {width}")
            ids = np.zeros((batch, width), dtype=np.int64)
            mask = np.zeros((batch, width), dtype=np.int64)
            ids[:, width - len(seq) :] = seq
            mask[:, width - len(seq) :] = 1
            self.session.set_buffers({"logits": np.zeros((batch, width, self.dims.vocab), dtype=np.float32)})
            out = self.session.run({"input_ids": ids, "attention_mask": mask})["logits"]
            logits[r, 0] = out[0, -1]
        return {"logits": logits}
