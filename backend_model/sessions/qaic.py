"""The QAIC session: the contract on a compiled QPC through QEfficient's ``QAICInferenceSession``.

QEfficient and qaicrt exist only inside Qualcomm's environment (``/opt/qeff-env``), so they are
imported lazily (by :mod:`..contract.qpc`, when a QPC is opened). The runtime is opened through one seam,
``opener``: the card's (``open_qpc``) or its ONNX Runtime twin's (``twin.session.onnx_opener``).

A QPC compiled with QEfficient's sampler (``include_sampler``) samples on the card: each run takes the rows'
sampler inputs (:mod:`..engine.card_sampling`) and returns ``next_tokens``, not logits. A QPC compiled with
compute-context lengths takes a ``comp_ctx_lengths`` input whose length is the context a run attends: each run
sends the one QEfficient's generation loop would (``specializations.choose_length``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from ..contract.qpc import RETAINED_PREFIXES, find_qpc, has_kv_cache, open_session, qaic_available, specializations_of
from ..contract.specializations import CCL, choose_length, comp_ctx_lengths
from ..engine import card_sampling
from .protocol import Dims, SessionError, TokenHistory

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
    scores = card_sampling.RETAINED[0] if card_sampling.RETAINED[0] in names else "logits"  # [rows, vocab] or logits
    vocab = max(d[-1] for d in binding_dims(session, scores))
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


def samples_on_card(session: Any) -> int:
    """The ``max_top_k_ids`` a QPC's sampler keeps, or 0 when it has none; SessionError for part of one (as
    QEfficient's ``validate_sampler_inputs``)."""
    found = set(card_sampling.INPUTS) & set(session.input_names)
    if found and len(found) < len(card_sampling.INPUTS):
        missing = sorted(set(card_sampling.INPUTS) - found)
        raise SessionError(f"the QPC has {len(found)} of the {len(card_sampling.INPUTS)} on-device sampler inputs "
                           f"(no {', '.join(missing)}): recompile it with include_sampler or without")
    return max(d[1] for d in binding_dims(session, "random_numbers")) if found else 0


def ccl_lists(session: Any) -> dict[int, list[int]]:
    """{seq_len: compute-context lengths} of a QPC compiled with them (from its specializations), else {}."""
    if CCL not in session.input_names:
        return {}
    pairs = zip(binding_dims(session, "input_ids"), binding_dims(session, CCL))
    return comp_ctx_lengths([(ids[1], lengths[0]) for ids, lengths in pairs])


class QaicSession:
    """A KV-cache or causal QPC behind the session contract."""

    adapters: tuple[str, ...] = ()  # the LoRA adapters compiled in (its lora_ids input: 1, 2, ... in this order)

    def __init__(self, qpc_path: str | Path, device_ids: list[int] | None = None, opener: Opener = open_qpc):
        self.session, program = opener(Path(qpc_path).expanduser(), device_ids)
        self.dims, self.kv = read_dims(self.session, program)
        self.max_top_k_ids = samples_on_card(self.session)  # > 0: the card samples (``run`` takes sampler inputs)
        self.ccl = ccl_lists(self.session)
        if self.kv:
            self.session.skip_buffers(retained_names(self.session))  # the KV cache stays on the card
            self.history = None
        else:
            self.history = TokenHistory(self.dims)

    @property
    def keeps_prefix(self) -> bool:
        """A KV-cache QPC keeps a slot's cache on the device (retained state) until the slot is prefilled again;
        its sampler's repetition mask is the slot's last prompt's and reply's, so a sampling QPC reuses none."""
        return self.kv and not self.max_top_k_ids

    @property
    def prompt_limit(self) -> int:
        """The most prompt positions (whole prefill chunks) a prefill can attend: the largest prefill compute-context
        length; 0 when every prompt shorter than ctx_len fits."""
        lengths = self.ccl.get(self.dims.prefill_seq_len)
        return lengths[-1] if lengths and self.dims.prefill_seq_len > 1 else 0

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The rows' logits ([rows, 1, vocab]), or their ``next_tokens`` ([rows, 1, 1]) when the card samples: then
        ``inputs`` carry the rows' sampler inputs."""
        rows = len(inputs["input_ids"])
        if not self.kv:
            return self._run_causal(inputs, rows)
        feed = dict(inputs)
        if self.ccl:
            feed[CCL] = np.zeros(self._length(inputs), dtype=np.int64)
        if self.max_top_k_ids:
            feed["last_accepted_output_tokens"] = inputs["input_ids"]
            out = card_sampling.OUTPUT
            self.session.set_buffers({out: np.zeros((rows, 1, 1), dtype=np.int64)})
            return {out: self.session.run(feed)[out]}
        # an output buffer fixes the output shape: logits of the last valid position per row
        self.session.set_buffers({"logits": np.zeros((rows, 1, self.dims.vocab), dtype=np.float32)})
        return {"logits": self.session.run(feed)["logits"]}

    def _length(self, inputs: dict[str, np.ndarray]) -> int:
        """The compute-context length of this run (a prefill chunk's rows start at their first valid position)."""
        pos = np.asarray(inputs["position_ids"])
        lengths = self.ccl.get(pos.shape[1])
        if lengths is None:
            raise ValueError(f"the QPC has no compute-context length for {pos.shape[1]}-token runs")
        starts = [int(row[row >= 0][0]) for row in pos if (row >= 0).any()] or [0]
        return choose_length(lengths, starts if pos.shape[1] > 1 else [int(pos.max())], pos.shape[1])

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
