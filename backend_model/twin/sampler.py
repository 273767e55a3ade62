"""The twin of a QPC compiled with ``include_sampler``: the graph's logits, then the card's sampler on them.

A sampling QPC (QEfficient's ``SamplerTransform``) has the model's inputs plus the sampler's
(``last_accepted_output_tokens``, the per-row ``repetition_penalties`` ... ``random_numbers``) and two retained
[rows, vocab] masks, ``past_repetition_penalty_buffer`` and ``past_presence_penalty_buffer``; it returns
``next_tokens`` [batch, 1, 1] and no logits. :class:`SamplingProgram` gives a twin session that surface: the masks
are kept here as the program keeps them (a prefill chunk marks its tokens for the repetition penalty, clearing its
row first at position 0, and clears every row's presence mask; a decode step marks the token it is fed in both), and
each run's token is :func:`..engine.card_sampling.sample` on the graph's logits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import card_sampling
from .session import RETAINED_SUFFIX, Binding, OnnxInferenceSession

LOGITS = "logits"
SEEN = ("input_ids", "position_ids", "batch_index")  # the graph's inputs the sampler reads too


class SamplingProgram:
    """QAICInferenceSession's surface of a sampling QPC over a twin session (``inner``) of its graph."""

    def __init__(self, inner: OnnxInferenceSession, top_k: int) -> None:
        self.inner, self.top_k = inner, top_k
        self.specializations_from, self.prepared = inner.specializations_from, inner.prepared
        shapes = [[dims for _, dims in spec] for spec in inner.allowed_shapes] or [[b.dims for b in inner.bindings]]
        index = inner.binding_index_map
        kept = [b for b in inner.bindings if b.name != LOGITS]
        added: list[tuple[str, Any, bool]] = [("last_accepted_output_tokens", np.int64, True)]
        added += [(name, np.int32 if name == "top_ks" else np.float32, True) for name in card_sampling.OPS]
        added += [(name, np.bool_, True) for name in card_sampling.RETAINED]
        added += [(name + RETAINED_SUFFIX, np.bool_, False) for name in card_sampling.RETAINED]
        added.append((card_sampling.OUTPUT, np.int64, False))
        dims = []
        for spec in shapes:
            batch, seq = spec[index["input_ids"]]
            rows, vocab = spec[index["past_key.0"]][0], spec[index[LOGITS]][-1]
            sizes = {"last_accepted_output_tokens": [batch, seq], "random_numbers": [batch, top_k],
                     card_sampling.OUTPUT: [batch, 1, 1]}
            dims.append([spec[b.index] for b in kept] + [sizes.get(n, [rows, vocab] if n.startswith("past_")
                                                                   else [batch, 1]) for n, _, _ in added])
        self.bindings = [Binding(b.name, i, dims[0][i], b.dtype, b.is_input) for i, b in enumerate(kept)]
        self.bindings += [Binding(n, len(kept) + i, dims[0][len(kept) + i], np.dtype(t), is_in)
                          for i, (n, t, is_in) in enumerate(added)]
        self.binding_index_map = {b.name: b.index for b in self.bindings}
        self.input_names = [b.name for b in self.bindings if b.is_input]
        self.output_names = [b.name for b in self.bindings if not b.is_input]
        self.allowed_shapes = [] if len(dims) == 1 else [
            [(b.dtype.itemsize, spec[b.index]) for b in self.bindings] for spec in dims
        ]
        self.vocab = dims[0][self.binding_index_map[card_sampling.RETAINED[0]]][1]
        rows = dims[0][self.binding_index_map[card_sampling.RETAINED[0]]][0]
        self.masks = {name: np.zeros((rows, self.vocab), dtype=bool) for name in card_sampling.RETAINED}
        self.given: dict[str, np.ndarray] = {}

    def set_buffers(self, buffers: dict[str, np.ndarray]) -> None:
        """The sampler's inputs and masks are kept here (an empty array: skipped), the rest goes to the graph's."""
        passed = {}
        for name, buffer in buffers.items():
            buffer = np.asarray(buffer)
            if name in self.masks:
                if buffer.size:  # data given for a retained buffer replaces it
                    self.masks[name] = buffer.astype(bool).copy()
            elif name in card_sampling.INPUTS or name in SEEN:
                if buffer.size:
                    self.given[name] = buffer
                if name in SEEN:
                    passed[name] = buffer
            elif name in self.binding_index_map and name in self.inner.binding_index_map:  # not the graph's logits
                passed[name] = buffer
        self.inner.set_buffers(passed)

    def skip_buffers(self, names: list[str]) -> None:
        self.set_buffers({n: np.array([]) for n in names})

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.set_buffers(inputs)
        ids = np.asarray(self.given["input_ids"])
        missing = [n for n in card_sampling.INPUTS if n not in self.given]
        if missing:
            raise ValueError(f"no buffer set for input {missing[0]}")
        rows = len(ids)
        wrong = [n for n in card_sampling.INPUTS if len(self.given[n]) != rows]
        if wrong or self.given["random_numbers"].shape[1] != self.top_k:
            raise ValueError(f"sampler input {(wrong or ['random_numbers'])[0]} does not fit {rows} rows of "
                             f"max_top_k_ids {self.top_k}")
        self.inner.set_buffers({LOGITS: np.zeros((rows, 1, self.vocab), dtype=np.float32)})
        out = self.inner.run({})
        logits = out.pop(LOGITS)[:, -1]
        slots = self._mark(ids)
        repeated, present = (self.masks[name][slots] for name in card_sampling.RETAINED)
        out[card_sampling.OUTPUT] = card_sampling.sample(logits, repeated, present, self.given, self.top_k)
        out[card_sampling.OUTPUT] = out[card_sampling.OUTPUT].reshape(rows, 1, 1).astype(np.int64)
        return out

    def _mark(self, ids: np.ndarray) -> np.ndarray:
        """Update the retained masks for this run's tokens, as the sampling program does; each row's slot."""
        pos = np.asarray(self.given["position_ids"])
        slots = np.asarray(self.given.get("batch_index", np.arange(len(ids)))).reshape(-1)
        repeated, present = (self.masks[name] for name in card_sampling.RETAINED)
        if ids.shape[1] > 1:  # a prefill chunk
            present[:] = False
            for r, slot in enumerate(slots):
                if pos[r, 0] == 0:
                    repeated[slot] = False
                repeated[slot, ids[r][pos[r] >= 0]] = True
        else:
            fed = np.asarray(self.given["last_accepted_output_tokens"])
            for r, slot in enumerate(slots):
                if pos[r, -1] >= 0:
                    repeated[slot, fed[r, -1]] = present[slot, fed[r, -1]] = True
        return slots
