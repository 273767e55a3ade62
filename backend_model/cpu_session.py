"""CPU sessions: the QAIC session contract on transformers/PyTorch weights.

``CpuKVSession`` is a lean Llama-family forward pass with a static KV cache of
``slots x ctx_len`` per layer, chunked prefill and one batched decode step for every active slot,
emulating a KV-cache QPC. ``CpuRecomputeSession`` emulates a causal (non-KV) QPC: it keeps each
row's tokens and recomputes the whole sequence with the Hugging Face model at every step.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .contract import Dims, SessionError, TokenHistory

LLAMA_LIKE = {"llama", "mistral", "qwen2"}
# Activation dtype per precision: "int8" keeps fp32 activations with int8 weights (fbgemm dynamic
# quantisation). "int4" keeps fp32 activations too (attention, norms and the KV cache run faster in
# fp32 than in bf16 here, the more so in batches); its matmuls take bf16 inputs on 4-bit weights in
# groups of 32 along the input: the layout of the embedded GGUF's Q4_1 blocks, which it reproduces.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.float32, "int4": torch.float32}
INT4_GROUP = 32


def head_dim(config) -> int:
    """A Llama-family config's attention head size (its own, else hidden size over heads)."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def torch_dtype(precision: str) -> torch.dtype:
    try:
        return DTYPES[precision]
    except KeyError:
        raise SessionError(f"precision must be one of {sorted(DTYPES)}, got {precision!r}") from None


class _Linear:
    """y = x W^T (+ b) with W dense, int8 per channel (dynamic activations) or int4 per group of 32."""

    __slots__ = ("weight", "bias", "packed", "int4")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, precision: str) -> None:
        dtype = torch_dtype(precision)
        self.weight = weight.detach().to(dtype).contiguous()
        self.bias = None if bias is None else bias.detach().to(dtype)
        self.packed = self.int4 = None
        if precision == "int8":
            w = self.weight
            scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-8).double()
            zero = torch.zeros(len(scale), dtype=torch.long)
            qw = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(qw, self.bias)
            self.weight = None
        elif precision == "int4" and weight.shape[1] % INT4_GROUP == 0 and weight.shape[0] % 16 == 0:
            self.int4 = _pack_int4(weight.detach().float())
            self.weight = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return torch.ops.quantized.linear_dynamic(x, self.packed)
        if self.int4 is not None:  # torch's int4 CPU kernel is vectorised for bf16 inputs only
            packed, scales_zeros = self.int4
            flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
            flat = torch._weight_int4pack_mm_for_cpu(flat, packed, INT4_GROUP, scales_zeros).to(x.dtype)
            out = flat.reshape(*x.shape[:-1], flat.shape[-1])
            return out if self.bias is None else out + self.bias
        return F.linear(x, self.weight, self.bias)


def _pack_int4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit groups: w = (q - 8) * scale + zero, with q in [0, 15] per 32 inputs."""
    n, k = w.shape
    groups = w.reshape(n, k // INT4_GROUP, INT4_GROUP)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    scale = ((high - low) / 15).clamp(min=1e-10)
    q = ((groups - low) / scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    zero = low + 8 * scale
    scales_zeros = torch.stack([scale.reshape(n, -1), zero.reshape(n, -1)], dim=-1).transpose(0, 1)
    return torch._convert_weight_to_int4pack_for_cpu(q, 1), scales_zeros.contiguous().to(torch.bfloat16)


def _rope_tables(config, ctx_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [ctx_len, head_dim] computed the way transformers computes them."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        size = head_dim(config)
        theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        inv_freq = 1.0 / (theta ** (torch.arange(0, size, 2, dtype=torch.int64).float() / size))
        scale = 1.0
    else:
        inv_freq, scale = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
    freqs = torch.outer(torch.arange(ctx_len, dtype=torch.float32), inv_freq.float())
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * scale, emb.sin() * scale


class _Layer:
    __slots__ = ("in_norm", "qkv", "o", "post_norm", "gate_up", "down")


class CpuKVSession:
    """KV-cache session for Llama-family models (static cache, chunked prefill, batched decode)."""

    kind = "cpu"

    def __init__(self, model, dims: Dims, precision: str = "fp32") -> None:
        cfg = model.config
        if cfg.model_type not in LLAMA_LIKE:
            raise SessionError(
                f"the CPU KV-cache session supports Llama-family models ({', '.join(sorted(LLAMA_LIKE))}),"
                f" not {cfg.model_type!r}; use model_type 'causal' for this model"
            )
        self.dims = dims
        self.dtype = torch_dtype(precision)
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = head_dim(cfg)
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim**-0.5
        self._load_weights(model, precision)
        cos, sin = _rope_tables(cfg, dims.ctx_len)
        half = self.head_dim // 2  # rotate_half(x) * sin == roll(x, half) * (sin with its first half negated)
        self.cos, self.sin = cos.to(self.dtype), torch.cat((-sin[:, :half], sin[:, half:]), -1).to(self.dtype)
        shape = (dims.slots, self.n_kv, dims.ctx_len, self.head_dim)
        self.k_cache = [torch.zeros(shape, dtype=self.dtype) for _ in self.layers]
        self.v_cache = [torch.zeros(shape, dtype=self.dtype) for _ in self.layers]
        # each slot's last write (token, position) and the logits it gave: a decode row that repeats
        # it (an idle row) rewrites an entry with what produced it, so it is not run again
        self.last_fed = np.full((dims.slots, 2), -1, dtype=np.int64)
        self.last_logits = np.zeros((dims.slots, dims.vocab), dtype=np.float32)

    def _load_weights(self, model, precision: str) -> None:
        def own(t: torch.Tensor) -> torch.Tensor:
            return t.detach().to(self.dtype).contiguous()

        inner = model.model
        self.embed = own(inner.embed_tokens.weight)
        self.norm = own(inner.norm.weight)
        self.lm_head = _Linear(model.lm_head.weight, None, precision)
        self.layers = []
        for blk in inner.layers:
            at, mlp = blk.self_attn, blk.mlp
            layer = _Layer()
            layer.in_norm = own(blk.input_layernorm.weight)
            layer.post_norm = own(blk.post_attention_layernorm.weight)
            projs = (at.q_proj, at.k_proj, at.v_proj)
            bias = None if at.q_proj.bias is None else torch.cat([p.bias for p in projs])
            layer.qkv = _Linear(torch.cat([p.weight for p in projs]), bias, precision)
            layer.o = _Linear(at.o_proj.weight, at.o_proj.bias, precision)
            layer.gate_up = _Linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), None, precision)
            layer.down = _Linear(mlp.down_proj.weight, None, precision)
            self.layers.append(layer)

    # -- the contract ----------------------------------------------------------------------
    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids = np.asarray(inputs["input_ids"], dtype=np.int64)
        pos = np.asarray(inputs["position_ids"], dtype=np.int64)
        if ids.ndim != 2 or ids.shape != pos.shape:
            raise ValueError(f"input_ids {ids.shape} and position_ids {pos.shape} must be [B, S]")
        rows = ids.shape[0]
        if "batch_index" in inputs:
            slots = np.asarray(inputs["batch_index"], dtype=np.int64).reshape(-1)
        else:
            slots = np.arange(rows)
        if len(slots) != rows or (slots >= self.dims.slots).any() or (slots < 0).any():
            raise ValueError(f"batch_index {slots.tolist()} does not fit {self.dims.slots} slots")
        if pos.max(initial=-1) >= self.dims.ctx_len:
            raise ValueError(f"position {int(pos.max())} is beyond ctx_len {self.dims.ctx_len}")
        logits = np.zeros((rows, 1, self.dims.vocab), dtype=np.float32)
        with torch.inference_mode():
            if ids.shape[1] == 1:
                fed = np.stack([ids[:, 0], pos[:, 0]], 1)
                repeat = (self.last_fed[slots] == fed).all(1)
                logits[repeat, 0] = self.last_logits[slots[repeat]]
                live = np.flatnonzero((pos[:, 0] >= 0) & ~repeat)
                if len(live):
                    logits[live, 0] = self._decode(ids[live, 0], pos[live, 0], slots[live])
                    self.last_fed[slots[live]] = fed[live]
                    self.last_logits[slots[live]] = logits[live, 0]
            else:
                for r in range(rows):
                    valid = np.flatnonzero(pos[r] >= 0)
                    if len(valid):
                        n = int(valid[-1]) + 1
                        logits[r, 0] = self._prefill(ids[r, :n], int(pos[r, 0]), int(slots[r]))
                        self.last_fed[slots[r]] = (ids[r, n - 1], pos[r, n - 1])
                        self.last_logits[slots[r]] = logits[r, 0]
        return {"logits": logits}

    # -- the forward pass --------------------------------------------------------------------
    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, w.shape, w, self.eps)

    def _qkv(self, layer: _Layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """h [B, S, H] -> q [B, heads, S, d], k and v [B, kv_heads, S, d]; q and k rotated together."""
        b, s, _ = h.shape
        qkv = layer.qkv(h)
        d, nq, nk = self.head_dim, self.n_heads, self.n_kv
        qk = qkv[..., : (nq + nk) * d].view(b, s, nq + nk, d)
        qk = qk * cos + qk.roll(d // 2, -1) * sin  # transformers' rope, the same products and sums
        v = qkv[..., (nq + nk) * d :].view(b, s, nk, d)
        return qk[:, :, :nq].transpose(1, 2), qk[:, :, nq:].transpose(1, 2), v.transpose(1, 2)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Grouped-query attention: q [B, nq, S, d], k/v [B, nk, L, d], mask [B, 1, S, L] bool."""
        b, nq, s, d = q.shape
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=True)
        return out.transpose(1, 2).reshape(b, s, nq * d)

    def _mlp(self, layer: _Layer, x: torch.Tensor) -> torch.Tensor:
        gate, up = layer.gate_up(self._rms(x, layer.post_norm)).chunk(2, dim=-1)
        return x + layer.down(F.silu(gate) * up)

    def _prefill(self, ids: np.ndarray, start: int, slot: int) -> np.ndarray:
        n = len(ids)
        end = start + n
        x = self.embed[torch.from_numpy(ids)].unsqueeze(0)
        cos, sin = self.cos[start:end].unsqueeze(1), self.sin[start:end].unsqueeze(1)
        qpos = torch.arange(start, end).view(n, 1)
        mask = (torch.arange(end).view(1, end) <= qpos).view(1, 1, n, end)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, self._rms(x, layer.in_norm), cos, sin)
            kc, vc = self.k_cache[i], self.v_cache[i]
            kc[slot, :, start:end] = k[0]
            vc[slot, :, start:end] = v[0]
            att = self._attend(q, kc[slot : slot + 1, :, :end], vc[slot : slot + 1, :, :end], mask)
            x = x + layer.o(att)
            x = self._mlp(layer, x)
        last = self._rms(x[0, -1:], self.norm)
        return self.lm_head(last).float().numpy()[0]

    def _decode(self, ids: np.ndarray, pos: np.ndarray, slots: np.ndarray) -> np.ndarray:
        b = len(ids)
        pos_t, slot_t = torch.from_numpy(pos), torch.from_numpy(slots)
        length = int(pos.max()) + 1
        contiguous = bool((slots == np.arange(slots[0], slots[0] + b)).all())
        x = self.embed[torch.from_numpy(ids)].unsqueeze(1)
        cos, sin = self.cos[pos_t].view(b, 1, 1, -1), self.sin[pos_t].view(b, 1, 1, -1)
        mask = (torch.arange(length).view(1, length) <= pos_t.view(b, 1)).view(b, 1, 1, length)
        s0 = int(slots[0])
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, self._rms(x, layer.in_norm), cos, sin)
            kc, vc = self.k_cache[i], self.v_cache[i]
            kc[slot_t, :, pos_t] = k[:, :, 0]
            vc[slot_t, :, pos_t] = v[:, :, 0]
            if contiguous:
                keys, values = kc[s0 : s0 + b, :, :length], vc[s0 : s0 + b, :, :length]
            else:
                keys, values = kc[slot_t, :, :length], vc[slot_t, :, :length]
            x = x + layer.o(self._attend(q, keys, values, mask))
            x = self._mlp(layer, x)
        return self.lm_head(self._rms(x[:, 0], self.norm)).float().numpy()


class CpuRecomputeSession:
    """Causal (non-KV) session: keeps every row's tokens and recomputes the full sequence."""

    kind = "cpu"

    def __init__(self, model, dims: Dims, precision: str = "fp32") -> None:
        if precision in ("int8", "int4"):
            raise SessionError(f"precision {precision} is for the KV-cache session; use fp32 or bf16")
        self.dims = dims
        self.model = model.to(torch_dtype(precision))
        self.history = TokenHistory(dims)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        live = self.history.feed(inputs)
        logits = np.zeros((len(inputs["input_ids"]), 1, self.dims.vocab), dtype=np.float32)
        if not live:
            return {"logits": logits}
        width = max(len(seq) for _, seq in live)
        batch = torch.zeros((len(live), width), dtype=torch.long)
        attn = torch.zeros((len(live), width), dtype=torch.long)
        for j, (_, seq) in enumerate(live):  # left padding, as a causal QPC takes it
            batch[j, width - len(seq) :] = torch.tensor(seq)
            attn[j, width - len(seq) :] = 1
        position_ids = (attn.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            out = self.model(
                input_ids=batch, attention_mask=attn, position_ids=position_ids, use_cache=False,
                logits_to_keep=1,
            ).logits
        logits[[r for r, _ in live], 0] = out[:, -1].float().numpy()
        return {"logits": logits}
