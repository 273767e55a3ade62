"""The CPU KV session's kernels: matmuls per precision (dense, int8, int4) and the rope tables.

A decode step's rows belong to different sequences, and a row's result must not depend on the rows
beside it (batch invariance): ``Linear.rowwise`` is the product for those calls. int4's kernel
(``_weight_int4pack_mm_for_cpu``) sums each output from zero over the inputs in order, row by row, at
any row count. Dense fp32/bf16 matmuls do not: MKL and oneDNN pick a kernel, and an order of sums, by
the row count (measured here: one row differs from two, 2-15 rows from 16 or more, and bf16 at scattered
counts), so ``rowwise`` runs them on pairs of rows, one shape for every step. int8's dynamic quantisation
scales the activations of a whole call: its rows depend on their neighbours by construction
(``parameters.VARIES_WITH_BATCH``). ``tests/fast/test_batch_invariance.py`` checks each of these on
the machine it runs on.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F

from .protocol import SessionError

# Activation dtype per precision: "int8" keeps fp32 activations with int8 weights (fbgemm dynamic
# quantisation). "int4" keeps fp32 activations too (attention, norms and the KV cache run faster in
# fp32 than in bf16 here, the more so in batches); its matmuls take bf16 inputs on 4-bit weights in
# groups of 32 along the input: the layout of the embedded GGUF's Q4_1 blocks, which it reproduces.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.float32, "int4": torch.float32}
INT4_GROUP = 32
ALIGNMENT = 64  # bytes: where torch's CPU allocator starts a tensor


def head_dim(config) -> int:
    """A Llama-family config's attention head size (its own, else hidden size over heads)."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def torch_dtype(precision: str) -> torch.dtype:
    try:
        return DTYPES[precision]
    except KeyError:
        raise SessionError(f"precision must be one of {sorted(DTYPES)}, got {precision!r}") from None


def aligned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, or its copy where torch allocates when it does not start on a 64-byte boundary (a safetensors
    file's tensors start where its header's length puts them): on some CPUs (AVX without AVX2) a matrix product's
    rounding depends on where its operands start, and the logits must be those of the model transformers loads."""
    return tensor if tensor.data_ptr() % ALIGNMENT == 0 else tensor.clone()


class Linear:
    """y = x W^T (+ b) with W dense, int8 per channel (dynamic activations) or int4 per group of 32."""

    __slots__ = ("weight", "bias", "packed", "int4", "inputs")
    weight: torch.Tensor | None  # dense (None: int8's or int4's packed weight holds it)
    bias: torch.Tensor | None
    packed: Any  # int8: torch's prepacked weight (an opaque script object)
    int4: tuple[torch.Tensor, torch.Tensor] | None  # int4: the packed weight and its scales and zeros
    inputs: int

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, precision: str) -> None:
        dtype = torch_dtype(precision)
        self.inputs = weight.shape[1]
        self.weight = weight.detach().to(dtype).contiguous()
        self.bias = None if bias is None else bias.detach().to(dtype)
        self.packed = self.int4 = None
        if precision == "int8":
            w = self.weight
            scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-8).double()
            zero = torch.zeros(len(scale), dtype=torch.long)
            with warnings.catch_warnings():  # torch 2.13 calls quantized tensors deprecated: noise in each int8 load
                warnings.filterwarnings("ignore", "torch.quantize_per_tensor", UserWarning)
                qw = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(qw, self.bias)
            self.weight = None
        elif precision == "int4" and weight.shape[1] % INT4_GROUP == 0 and weight.shape[0] % 16 == 0:
            self.int4 = pack_int4(weight.detach().float())
            self.weight = None
        else:  # kept dense: maybe the checkpoint file's own memory (``models.read_tensors`` maps it)
            self.weight = aligned(self.weight)
            self.bias = None if self.bias is None else aligned(self.bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The product for a call whose rows are one prompt's (a prefill chunk: fixed by the prompt)."""
        if self.weight is not None:
            out = F.linear(x.reshape(-1, x.shape[-1]), self.weight, self.bias)
        elif self.int4 is not None:  # torch's int4 CPU kernel is vectorised for bf16 inputs only
            packed, scales_zeros = self.int4
            flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
            out = torch._weight_int4pack_mm_for_cpu(flat, packed, INT4_GROUP, scales_zeros)
            out = out.to(x.dtype) if self.bias is None else out.to(x.dtype) + self.bias
        else:  # int8: the prepacked product takes any leading dims
            return torch.ops.quantized.linear_dynamic(x, self.packed)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def rowwise(self, x: torch.Tensor) -> torch.Tensor:
        """The product for rows of different sequences (a decode step): each row's result as if it were alone.

        int4's kernel sums each row on its own whatever the row count; a dense one takes its rows in pairs
        (a lone row is paired with a copy of itself), one kernel shape for every step."""
        if self.weight is None:
            return self(x)
        flat = x.reshape(-1, x.shape[-1])
        rows = len(flat)
        if rows % 2:
            flat = torch.cat([flat, flat[-1:]])
        out = torch.cat([F.linear(flat[i : i + 2], self.weight, self.bias) for i in range(0, len(flat), 2)])
        return out[:rows].reshape(*x.shape[:-1], out.shape[-1])


def pack_int4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit groups: w = (q - 8) * scale + zero, with q in [0, 15] per 32 inputs."""
    n, k = w.shape
    groups = w.reshape(n, k // INT4_GROUP, INT4_GROUP)
    low, high = torch.aminmax(groups, dim=-1, keepdim=True)
    scale = ((high - low) / 15).clamp_(min=1e-10)
    q = (groups - low).div_(scale).round_().clamp_(0, 15).to(torch.int32).reshape(n, k)  # in place: half the time
    zero = low + 8 * scale
    scales_zeros = torch.stack([scale.reshape(n, -1), zero.reshape(n, -1)], dim=-1).transpose(0, 1)
    return torch._convert_weight_to_int4pack_for_cpu(q, 1), scales_zeros.contiguous().to(torch.bfloat16)


def rope_tables(config, ctx_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [ctx_len, head_dim] computed the way transformers computes them (a rope type whose
    table depends on the sequence length is refused before: ``cpu_support``)."""
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
