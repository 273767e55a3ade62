"""LoRA adapters on the CPU KV session: each row's adapter applied beside the base weights, in one step.

A row of a run carries its adapter's id (``lora_ids``, QEfficient's finite LoRAX input: 0 is the base). A
projection's output gains ``scale * (x A^T) B^T`` for the rows of an adapter that targets it; the factors stay in
fp32 whatever the base's precision (fp32, bf16, int8, int4), and a base row gets nothing added, so its numbers are
the base model's. Each row's product is computed alone (a fixed shape), so a row's result does not depend on
the rows beside it: the batch invariance of ``cpu_kernels``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch

from ..contract import adapters as contract
from .protocol import SessionError


@dataclass(frozen=True)
class Adapter:
    """One adapter: its configuration and its factors by PEFT's names."""

    config: contract.AdapterConfig
    tensors: Mapping[str, torch.Tensor]

    @classmethod
    def read(cls, folder: Path, base_config: dict) -> Adapter:
        """The adapter in a PEFT folder, checked against the base model's config (SessionError naming what does
        not fit)."""
        from safetensors.torch import load_file

        try:
            config = contract.read_config(folder)
            contract.check_weights(folder, config, base_config)
        except contract.AdapterError as exc:
            raise SessionError(str(exc)) from None
        return cls(config, load_file(str(folder / contract.WEIGHTS_FILE)))


class Deltas:
    """The adapters of one projection: per adapter id, (first output, A [r, in], scale * B [out, r]) of each of its
    targets (a fused projection such as q, k and v has several, at their output offsets)."""

    def __init__(self) -> None:
        self.factors: dict[int, list[tuple[int, torch.Tensor, torch.Tensor]]] = {}

    def add(self, lora_id: int, start: int, a: torch.Tensor, b: torch.Tensor, scale: float) -> None:
        self.factors.setdefault(lora_id, []).append((start, a.float().contiguous(), (b.float() * scale).contiguous()))

    def apply(self, out: torch.Tensor, x: torch.Tensor, ids: list[int]) -> torch.Tensor:
        """``out`` [B, S, outputs] (the base product of ``x`` [B, S, inputs]) with row r's adapter ``ids[r]`` added."""
        for r, lora_id in enumerate(ids):
            for start, a, b in self.factors.get(lora_id, ()):
                delta = (x[r].float() @ a.T) @ b.T
                out[r, :, start : start + b.shape[0]] += delta.to(out.dtype)
        return out


def layer_deltas(adapters: Mapping[str, Adapter], layer: int, sizes: Mapping[str, tuple[int, int]]
                 ) -> tuple[Deltas, Deltas]:
    """The (fused q/k/v, o) deltas of one layer for ``adapters`` (ids from 1, in order); ``sizes``: each target's
    (inputs, outputs) in the base model (contract.module_sizes)."""
    qkv, o = Deltas(), Deltas()
    offsets = {"q_proj": 0, "k_proj": sizes["q_proj"][1], "v_proj": sizes["q_proj"][1] + sizes["k_proj"][1],
               "o_proj": 0}
    for lora_id, adapter in enumerate(adapters.values(), start=1):
        for target in adapter.config.targets:  # their shapes were checked against the base (Adapter.read)
            a = adapter.tensors.get(contract.weight_name(layer, target, "A"))
            b = adapter.tensors.get(contract.weight_name(layer, target, "B"))
            if a is None or b is None:
                continue  # this layer is not adapted (check_weights: every adapted layer has every target)
            (o if target == "o_proj" else qkv).add(lora_id, offsets[target], a, b, adapter.config.scale)
    return qkv, o
