"""The lean CPU KV-cache session for Llama-family models: the QAIC session contract on PyTorch weights.

A static KV cache of ``slots x ctx_len`` per layer, chunked prefill and one batched decode step for
every active slot, emulating a KV-cache QPC. It honours what the Llama-family configs carry (attention
and MLP biases, the activation, per-layer sliding windows, head_dim, tied embeddings, the rope types
whose tables depend on the position only); ``cpu_support`` refuses the rest before it loads.

Batch invariance: a row's tokens do not depend on the rows that share its steps. The matmuls of a
decode step take ``Linear.rowwise`` (see ``cpu_kernels``), and each row attends over exactly its own
keys in a call of its own (a batched attention sums over the longest row's length, so a row's sums
would change with its neighbours). A prefill runs one prompt at a time.

LoRA adapters (``adapters``): a row of a run names its adapter in ``lora_ids``, whose product is added to its
attention projections beside the base weights (``lora``).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
import torch.nn.functional as F

from ..contract.adapters import module_sizes
from ..contract.cpu_support import LLAMA_LIKE
from .cpu_kernels import DTYPES, INT4_GROUP, Linear, head_dim, rope_tables, torch_dtype
from .lora import Adapter, Deltas, layer_deltas
from .protocol import Dims, LastFed, SessionError, read_rows

__all__ = ["DTYPES", "INT4_GROUP", "LLAMA_LIKE", "CpuKVSession", "head_dim", "layer_windows"]


def layer_windows(config) -> list[int | None]:
    """Each layer's sliding window (None: it attends to every earlier position), as transformers reads it."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types is None:  # Mistral: one window for every layer
        return [window] * config.num_hidden_layers
    return [window if kind == "sliding_attention" else None for kind in types]


def _keys(position: int, window: int | None) -> slice:
    """The cache positions a query at ``position`` attends to (transformers' window: the last ``window``)."""
    return slice(0 if window is None else max(0, position + 1 - window), position + 1)


class _Layer:
    """One decoder layer's weights and sliding window (slots: a decode step reads them for every layer)."""

    __slots__ = ("in_norm", "qkv", "o", "post_norm", "gate_up", "down", "window", "qkv_lora", "o_lora")
    in_norm: torch.Tensor
    qkv: Linear
    o: Linear
    qkv_lora: Deltas
    o_lora: Deltas
    post_norm: torch.Tensor
    gate_up: Linear
    down: Linear
    window: int | None


class CpuKVSession:
    """KV-cache session for Llama-family models (static cache, chunked prefill, batched decode)."""

    keeps_prefix = True  # a slot's cache stays as it is until the slot is prefilled again (the engine reuses it)
    speculates = True  # a decode step may feed several positions of one slot, a row each (speculation.py)

    def __init__(self, config, weights: Mapping[str, torch.Tensor], dims: Dims, precision: str = "fp32",
                 adapters: Mapping[str, Adapter] | None = None) -> None:
        """``weights``: the checkpoint's tensors by their transformers names (``model.layers.0.mlp.up_proj.weight``),
        from the safetensors files or from a loaded model's ``state_dict()``; ``adapters``: LoRA adapters by name
        (ids from 1, in order)."""
        from transformers.activations import ACT2FN

        if config.model_type not in LLAMA_LIKE:
            raise SessionError(f"the Llama-family KV session serves {', '.join(LLAMA_LIKE)}, "
                               f"not {config.model_type!r}")
        self.dims = dims
        self.dtype = torch_dtype(precision)
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.head_dim = head_dim(config)
        self.eps = config.rms_norm_eps
        self.scale = self.head_dim**-0.5
        self.act = ACT2FN[config.hidden_act]
        self.windows = set(layer_windows(config))
        self.adapters = tuple(adapters or ())
        self._load_weights(config, weights, precision)
        sizes = module_sizes(config.to_dict())
        for i, layer in enumerate(self.layers):
            layer.qkv_lora, layer.o_lora = layer_deltas(adapters or {}, i, sizes)
        cos, sin = rope_tables(config, dims.ctx_len)
        half = self.head_dim // 2  # rotate_half(x) * sin == roll(x, half) * (sin with its first half negated)
        self.cos, self.sin = cos.to(self.dtype), torch.cat((-sin[:, :half], sin[:, half:]), -1).to(self.dtype)
        shape = (dims.slots, self.n_kv, dims.ctx_len, self.head_dim)
        self.k_cache = [torch.zeros(shape, dtype=self.dtype) for _ in self.layers]
        self.v_cache = [torch.zeros(shape, dtype=self.dtype) for _ in self.layers]
        self.last = LastFed(dims)

    @classmethod
    def of(cls, model, dims: Dims, precision: str = "fp32", adapters: Mapping[str, Adapter] | None = None
           ) -> CpuKVSession:
        """The session on a loaded transformers model's weights."""
        return cls(model.config, model.state_dict(), dims, precision, adapters)

    def _load_weights(self, config, weights: Mapping[str, torch.Tensor], precision: str) -> None:
        """A bias is read where the checkpoint has one; tied embeddings are the output head, as transformers ties
        them; a missing weight is a SessionError naming it."""
        def tensor(name: str) -> torch.Tensor:
            try:
                return weights[name]
            except KeyError:
                raise SessionError(f"the checkpoint has no {name}") from None

        def own(name: str) -> torch.Tensor:
            return tensor(name).detach().to(self.dtype).contiguous()

        def joined(parts: list) -> torch.Tensor:  # one projection is used as it is: no copy of its weights
            return parts[0] if len(parts) == 1 else torch.cat(parts)

        def linear(*names: str) -> Linear:
            biases = [weights.get(f"{n}.bias") for n in names]
            bias = None if biases[0] is None else joined(biases)
            return Linear(joined([tensor(f"{n}.weight") for n in names]), bias, precision)

        self.embed = own("model.embed_tokens.weight")
        self.norm = own("model.norm.weight")
        tied = getattr(config, "tie_word_embeddings", False)
        self.lm_head = linear("model.embed_tokens" if tied else "lm_head")
        self.layers: list[_Layer] = []
        for i, window in enumerate(layer_windows(config)):
            at, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
            layer = _Layer()
            layer.in_norm = own(f"model.layers.{i}.input_layernorm.weight")
            layer.post_norm = own(f"model.layers.{i}.post_attention_layernorm.weight")
            layer.qkv = linear(at + "q_proj", at + "k_proj", at + "v_proj")
            layer.o = linear(at + "o_proj")
            layer.gate_up = linear(mlp + "gate_proj", mlp + "up_proj")
            layer.down = linear(mlp + "down_proj")
            layer.window = window
            self.layers.append(layer)

    def products(self) -> list[Linear]:
        """Every matmul of a decode step, in order (the bench times them alone: ``matmul_ceiling``)."""
        return [p for layer in self.layers for p in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [self.lm_head]

    # -- the contract ----------------------------------------------------------------------
    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids, pos, slots = read_rows(inputs, self.dims)
        loras = np.asarray(inputs.get("lora_ids", np.zeros((len(ids), 1))), dtype=np.int64).reshape(-1)
        if len(loras) != len(ids) or loras.min(initial=0) < 0 or loras.max(initial=0) > len(self.adapters):
            raise ValueError(f"lora_ids {loras.tolist()} do not fit {len(ids)} rows and {len(self.adapters)} "
                             "adapters")
        logits = np.zeros((len(ids), 1, self.dims.vocab), dtype=np.float32)
        with torch.inference_mode():
            if ids.shape[1] == 1:
                repeat = self.last.repeats(slots, ids[:, 0], pos[:, 0])
                logits[repeat, 0] = self.last.logits[slots[repeat]]
                live = np.flatnonzero((pos[:, 0] >= 0) & ~repeat)
                if len(live):
                    logits[live, 0] = self._decode(ids[live, 0], pos[live, 0], slots[live], loras[live].tolist())
                    self.last.record(slots[live], ids[live, 0], pos[live, 0], logits[live, 0])
            else:
                for r in range(len(ids)):
                    valid = np.flatnonzero(pos[r] >= 0)
                    if len(valid):
                        n = int(valid[-1]) + 1
                        logits[r, 0] = self._prefill(ids[r, :n], int(pos[r, 0]), int(slots[r]), int(loras[r]))
                        self.last.record(slots[r : r + 1], ids[r, n - 1 : n], pos[r, n - 1 : n], logits[r])
        return {"logits": logits}

    # -- the forward pass --------------------------------------------------------------------
    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, w.shape, w, self.eps)

    def _qkv(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """qkv [B, S, (nq + 2 nk) d] -> q [B, nq, S, d], k and v [B, nk, S, d]; q and k rotated together."""
        b, s, _ = qkv.shape
        d, nq, nk = self.head_dim, self.n_heads, self.n_kv
        qk = qkv[..., : (nq + nk) * d].view(b, s, nq + nk, d)
        qk = qk * cos + qk.roll(d // 2, -1) * sin  # transformers' rope, the same products and sums
        v = qkv[..., (nq + nk) * d :].view(b, s, nk, d)
        return qk[:, :, :nq].transpose(1, 2), qk[:, :, nq:].transpose(1, 2), v.transpose(1, 2)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Grouped-query attention: q [B, nq, S, d], k/v [B, nk, L, d], mask [B, 1, S, L] bool -> [B, S, nq d]."""
        b, nq, s, d = q.shape
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=True)
        return out.transpose(1, 2).reshape(b, s, nq * d)

    def _mlp(self, layer: _Layer, x: torch.Tensor, rowwise: bool) -> torch.Tensor:
        up_proj, down_proj = (layer.gate_up.rowwise, layer.down.rowwise) if rowwise else (layer.gate_up, layer.down)
        gate, up = up_proj(self._rms(x, layer.post_norm)).chunk(2, dim=-1)
        return x + down_proj(self.act(gate) * up)

    def _prefill(self, ids: np.ndarray, start: int, slot: int, lora: int = 0) -> np.ndarray:
        n = len(ids)
        end = start + n
        x = self.embed[torch.from_numpy(ids)].unsqueeze(0)
        cos, sin = self.cos[start:end].unsqueeze(1), self.sin[start:end].unsqueeze(1)
        qpos, kpos = torch.arange(start, end).view(n, 1), torch.arange(end).view(1, end)
        causal = kpos <= qpos
        for i, layer in enumerate(self.layers):
            h = self._rms(x, layer.in_norm)
            q, k, v = self._qkv(layer.qkv_lora.apply(layer.qkv(h), h, [lora]), cos, sin)
            kc, vc = self.k_cache[i], self.v_cache[i]
            kc[slot, :, start:end] = k[0]
            vc[slot, :, start:end] = v[0]
            mask = causal if layer.window is None else causal & (kpos > qpos - layer.window)
            att = self._attend(q, kc[slot : slot + 1, :, :end], vc[slot : slot + 1, :, :end], mask.view(1, 1, n, end))
            x = x + layer.o_lora.apply(layer.o(att), att, [lora])
            x = self._mlp(layer, x, rowwise=False)
        last = self._rms(x[0, -1:], self.norm)
        return self.lm_head(last).float().numpy()[0]

    def _decode(self, ids: np.ndarray, pos: np.ndarray, slots: np.ndarray, loras: list[int]) -> np.ndarray:
        b = len(ids)
        pos_t, slot_t = torch.from_numpy(pos), torch.from_numpy(slots)
        x = self.embed[torch.from_numpy(ids)].unsqueeze(1)
        cos, sin = self.cos[pos_t].view(b, 1, 1, -1), self.sin[pos_t].view(b, 1, 1, -1)
        spans = {w: [(s, _keys(p, w)) for s, p in zip(slots.tolist(), pos.tolist())] for w in self.windows}
        for i, layer in enumerate(self.layers):
            h = self._rms(x, layer.in_norm)
            q, k, v = self._qkv(layer.qkv_lora.apply(layer.qkv.rowwise(h), h, loras), cos, sin)
            kc, vc = self.k_cache[i], self.v_cache[i]
            kc[slot_t, :, pos_t] = k[:, :, 0]
            vc[slot_t, :, pos_t] = v[:, :, 0]
            att = torch.cat([  # each row over exactly its own keys, whatever its neighbours hold
                self._attend(q[r : r + 1], kc[s : s + 1, :, keys], vc[s : s + 1, :, keys], None)
                for r, (s, keys) in enumerate(spans[layer.window])
            ])
            x = x + layer.o_lora.apply(layer.o.rowwise(att), att, loras)
            x = self._mlp(layer, x, rowwise=True)
        return self.lm_head.rowwise(self._rms(x[:, 0], self.norm)).float().numpy()
