"""CPU sessions over transformers' own model, for any architecture: one sequence per forward pass.

``TransformersKVSession`` emulates a KV-cache QPC for any ``AutoModelForCausalLM`` (GPT-2, StarCoder,
Phi-3, Gemma, Falcon, ...): each slot keeps transformers' own cache, as ``generate`` keeps it, fed by
chunked prefill and decode steps. ``CpuRecomputeSession`` emulates a causal (non-KV) QPC: it keeps each
slot's tokens and recomputes the whole sequence at every step.

Every row is computed alone, in a forward of its own: the model's own code (so every field of its
config is honoured as ``generate`` honours it), and a row's tokens cannot depend on its neighbours.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch

from ..contract.cpu_support import DENSE
from .cpu_kernels import torch_dtype
from .protocol import Dims, LastFed, SessionError, read_rows


class _RowSession:
    """``run`` for sessions that compute each row alone: ``_forward(slot, ids, positions) -> logits``."""

    def __init__(self, model, dims: Dims, precision: str) -> None:
        if precision not in DENSE:
            raise SessionError(f"{type(self).__name__} runs transformers' model in fp32 or bf16, not {precision}")
        self.dims = dims
        self.model = model.to(torch_dtype(precision))
        self.last = LastFed(dims)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids, pos, slots = read_rows(inputs, self.dims)
        logits = np.zeros((len(ids), 1, self.dims.vocab), dtype=np.float32)
        with torch.inference_mode():
            for r, slot in enumerate(slots):
                valid = np.flatnonzero(pos[r] >= 0)
                if not len(valid):
                    continue
                tokens, positions = ids[r, valid], pos[r, valid]
                last = slice(len(valid) - 1, len(valid))
                if len(valid) == 1 and self.last.repeats(slots[r : r + 1], tokens, positions)[0]:
                    logits[r, 0] = self.last.logits[slot]
                    continue
                logits[r, 0] = self._forward(int(slot), tokens, positions)
                self.last.record(slots[r : r + 1], tokens[last], positions[last], logits[r])
        return {"logits": logits}

    def _forward(self, slot: int, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _logits(self, ids: list[int] | np.ndarray, positions: np.ndarray, **kwargs) -> np.ndarray:
        """The model's logits at the last of ``ids`` (one sequence)."""
        out = self.model(input_ids=torch.as_tensor(np.asarray(ids, dtype=np.int64)).view(1, -1),
                         position_ids=torch.from_numpy(positions).view(1, -1), logits_to_keep=1, **kwargs)
        return out.logits[0, -1].float().numpy()


class TransformersKVSession(_RowSession):
    """KV-cache session for any causal LM: transformers' model with a cache per slot."""

    def __init__(self, model, dims: Dims, precision: str = "fp32") -> None:
        super().__init__(model, dims, precision)
        self.caches: list = [None] * dims.slots
        params = inspect.signature(model.forward).parameters  # transformers 5 names it ``cache``
        self.cache_arg = "cache" if "cache" in params else "past_key_values"

    def _new_cache(self):
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.model.config)  # sliding-window layers keep their window
        except TypeError:  # older transformers
            return DynamicCache()

    def _forward(self, slot: int, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        first = int(positions[0])
        if first == 0:
            self.caches[slot] = self._new_cache()
        cache = self.caches[slot]
        held = 0 if cache is None else cache.get_seq_length()
        if first != held or (positions != np.arange(first, first + len(positions))).any():
            raise ValueError(f"slot {slot} holds {held} positions: a row cannot go on at {positions.tolist()}")
        return self._logits(ids, positions, use_cache=True, **{self.cache_arg: cache})


class CpuRecomputeSession(_RowSession):
    """Causal (non-KV) session: keeps every slot's tokens and recomputes the whole sequence."""

    def __init__(self, model, dims: Dims, precision: str = "fp32") -> None:
        super().__init__(model, dims, precision)
        self.history: list[list[int]] = [[] for _ in range(dims.slots)]

    def _forward(self, slot: int, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        tokens = self.history[slot] = self.history[slot][: int(positions[0])] + ids.tolist()
        return self._logits(tokens, np.arange(len(tokens)), use_cache=False)
