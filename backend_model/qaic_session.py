"""The QAIC session: the contract on a compiled QPC through QEfficient's ``QAICInferenceSession``.

QEfficient and qaicrt exist only inside Qualcomm's environment (``/opt/qeff-env``): :mod:`.qpc`
imports them lazily, when a QPC is opened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .contract import Dims, TokenHistory
from .qpc import find_qpc, has_kv_cache, open_session, qaic_available, specializations

__all__ = ["QaicSession", "find_qpc", "qaic_available", "read_dims"]


def _binding_dims(session: Any, name: str) -> list[list[int]]:
    """Every specialization's dims for one binding."""
    index = session.binding_index_map[name]
    return [list(shapes[index][1]) for shapes in session.allowed_shapes]


def read_dims(session: Any, qpc: Path) -> tuple[Dims, bool]:
    """Compile dimensions (and whether the QPC has a KV cache) from a loaded session."""
    names = set(session.input_names)
    kv = has_kv_cache(list(names))
    ids = _binding_dims(session, "input_ids")
    vocab = max(d[-1] for d in _binding_dims(session, "logits"))
    batch_size = max(d[0] for d in ids)
    seq_len = max(d[1] for d in ids)
    full_batch = max(d[0] for d in _binding_dims(session, "batch_index")) if "batch_index" in names else 0
    if kv:
        ctx_len = max(d[2] for d in _binding_dims(session, "past_key.0"))
    else:
        ctx_len = seq_len
    entries = specializations(qpc)
    if entries:  # authoritative where present
        ctx_len = max(int(e.get("ctx_len", ctx_len)) for e in entries)
    if full_batch:  # prefill runs one prompt at a time into a slot
        batch_size = 1
    return Dims(batch_size, seq_len, ctx_len, vocab, full_batch), kv


class QaicSession:
    """A KV-cache or causal QPC behind the session contract."""

    kind = "qaic"

    def __init__(self, qpc_path: str | Path, device_ids: list[int] | None = None, opener=open_session):
        qpc = find_qpc(qpc_path)
        self.session = opener(qpc, device_ids)
        self.dims, self.kv = read_dims(self.session, qpc)
        if self.kv:
            retained = [n for n in self.session.input_names if n.startswith("past_")]
            retained += [n for n in self.session.output_names if n.endswith("_RetainedState")]
            self.session.skip_buffers(retained)  # the KV cache stays on the card
            self.history = None
        else:
            self.history = TokenHistory(self.dims)

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
