"""QEfficient-style ONNX export of a Llama-family model: the graph a QPC is compiled from.

The graph has QEfficient's interface, input for input: ``input_ids`` / ``position_ids`` int64
[batch_size, seq_len], ``past_key.{i}`` / ``past_value.{i}`` [batch_size or full_batch_size,
kv_heads, ctx_len, head_dim] and, with continuous batching, ``batch_index`` int64 [batch_size, 1]
last; out ``logits`` [batch_size, 1, vocab] at each row's largest position, and
``past_*.{i}_RetainedState``. The axes are dynamic and named like the specialization symbols;
``specializations.json`` beside the graph fixes them as a compile of the given dimensions would.

Cache access is QEfficient's too: one ``ScatterND`` writes each new key/value at its position
and one ``GatherND`` reads the cache back, with QEfficient's invalid index, INT32_MAX, for the
positions past a row's last one (and, with continuous batching, for position -1, prefill
padding: the card writes nothing there). Scores there take -inf and values zeros, as in
QEfficient's attention. So the card's twin runs this graph and QEfficient's the same way
(:mod:`backend_model.twin.graph`). The export is TorchScript at opset 17, as QEfficient's; the
layers are Hugging Face's own modules (norms, rotary table, projections, MLP).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from backend_model.contract import specializations
from backend_model.models import Progress, load_pretrained
from backend_model.sessions.cpu import LLAMA_LIKE, head_dim
from backend_model.sessions.protocol import SessionError
from backend_model.twin.graph import INVALID_INDEX

GRAPH = "model.onnx"
OPSET = 17
# Example sizes the graph is traced with: all different and > 1, so no axis is taken for a constant.
EXAMPLE = {"batch_size": 2, "seq_len": 3, "ctx_len": 8, "full_batch_size": 4}


@dataclass(frozen=True)
class Export:
    """What ``export`` wrote and how long it took."""

    graph: Path
    specializations: Path
    seconds: float
    layers: int


class CacheWrite(torch.autograd.Function):
    """``cache`` with ``updates`` [B, H, S, D] written at ``indices`` [B, H, S, 3] (row, head, position):
    one ScatterND. A position past the cache writes nothing, as on the card."""

    @staticmethod
    def forward(ctx, cache: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
        out = cache.clone()
        keep = indices[..., 2] < cache.shape[2]
        row, head, pos = indices[keep].unbind(-1)
        out[row, head, pos] = updates[keep]
        return out

    @staticmethod
    def symbolic(g, cache, indices, updates):
        return g.op("ScatterND", cache, indices, updates).setType(cache.type())


class CacheRead(torch.autograd.Function):
    """``cache`` [F, H, C, D] read at ``indices`` [B, H, C', 3]: one GatherND. What an invalid
    position reads is discarded by the caller (position 0 here, as in QEfficient's ops)."""

    @staticmethod
    def forward(ctx, cache: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        row, head, pos = indices.unbind(-1)
        return cache[row, head, torch.where(pos < cache.shape[2], pos, 0)]

    @staticmethod
    def symbolic(g, cache, indices):
        return g.op("GatherND", cache, indices).setType(cache.type())


class KVStep(torch.nn.Module):
    """One step of a Llama-family model with QEfficient's tensor interface."""

    def __init__(self, model: Any, continuous: bool) -> None:  # transformers' model: Any, as the backend holds it
        super().__init__()
        cfg: Any = model.config  # transformers' config: read as untyped
        if cfg.model_type not in LLAMA_LIKE:
            raise SessionError(f"the ONNX export supports Llama-family models ({', '.join(sorted(LLAMA_LIKE))}), "
                               f"not {cfg.model_type!r}")
        self.model: Any = model  # a transformers model: its parts are read by name
        self.continuous = continuous
        self.head_dim = head_dim(cfg)
        self.kv_heads = cfg.num_key_value_heads
        self.groups = cfg.num_attention_heads // cfg.num_key_value_heads

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, *rest: torch.Tensor):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

        past, rows = (rest[:-1], rest[-1]) if self.continuous else (rest, None)
        inner = self.model.model
        b, s = input_ids.shape
        x = inner.embed_tokens(input_ids)
        cos, sin = inner.rotary_emb(x, position_ids.clamp(min=0))
        if rows is None:  # regular: row r is cache row r; position -1 wraps to the last one, as in QEfficient
            rows, written = torch.arange(b).view(b, 1), position_ids
        else:  # continuous: rows are slots; position -1 is invalid, so nothing is written
            written = torch.where(position_ids < 0, INVALID_INDEX, position_ids)
        cache_pos = torch.arange(past[0].shape[2]).view(1, -1)
        beyond = cache_pos > position_ids.max(1, keepdim=True).values  # [B, ctx]: not read
        masked = cache_pos.view(1, 1, 1, -1) > position_ids[:, None, :, None]  # [B, 1, S, ctx]
        write, read = self._coords(rows, written), self._coords(rows, torch.where(beyond, INVALID_INDEX, cache_pos))
        retained = []
        for i, layer in enumerate(inner.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q, k, v = (proj(h).view(b, s, -1, self.head_dim).transpose(1, 2)
                       for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            caches = []
            for new, old in ((k, past[2 * i]), (v, past[2 * i + 1])):
                retained.append(CacheWrite.apply(old, write, new))
                caches.append(CacheRead.apply(retained[-1], read))
            keys, values = (repeat_kv(c, self.groups) for c in caches)
            values = torch.where(beyond[:, None, :, None], 0.0, values)
            scores = torch.where(masked, float("-inf"), q @ keys.transpose(2, 3) * attn.scaling)
            weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
            x = x + attn.o_proj((weights @ values).transpose(1, 2).reshape(b, s, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        last = x.reshape(b * s, -1)[torch.arange(b) * s + position_ids.argmax(1)]  # each row's largest position
        return (self.model.lm_head(inner.norm(last)).unsqueeze(1), *retained)

    def _coords(self, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Cache coordinates [B, kv_heads, P, 3] (row, head, position) for ``positions`` [B or 1, P]."""
        shape = (rows.shape[0], self.kv_heads, positions.shape[1], 1)
        heads = torch.arange(self.kv_heads).view(1, -1, 1, 1)
        return torch.cat([rows.view(-1, 1, 1, 1).expand(shape), heads.expand(shape),
                          positions[:, None, :, None].expand(shape)], -1)


def _interface(model: Any, continuous: bool):
    """Example inputs, input/output names and dynamic axes, QEfficient's."""
    cfg: Any = model.config  # transformers' config: read as untyped
    size = head_dim(cfg)
    b, s, ctx, fbs = (EXAMPLE[k] for k in ("batch_size", "seq_len", "ctx_len", "full_batch_size"))
    rows = {0: "batch_size", 1: "seq_len"}
    args = [torch.zeros((b, s), dtype=torch.int64), torch.arange(s).repeat(b, 1)]
    names, outputs, axes = ["input_ids", "position_ids"], ["logits"], {"input_ids": rows, "position_ids": rows}
    cache_axes = {0: "full_batch_size" if continuous else "batch_size", 2: "ctx_len"}
    for i in range(cfg.num_hidden_layers):
        for kind in ("key", "value"):
            args.append(torch.zeros((fbs if continuous else b, cfg.num_key_value_heads, ctx, size)))
            name = f"past_{kind}.{i}"
            names.append(name)
            outputs.append(f"{name}_RetainedState")
            axes[name] = axes[f"{name}_RetainedState"] = cache_axes
    if continuous:  # last, as in QEfficient's export
        args.append(torch.tensor([[1], [3]], dtype=torch.int64))
        names.append("batch_index")
        axes["batch_index"] = {0: "batch_size"}
    axes["logits"] = {0: "batch_size"}
    return tuple(args), names, outputs, axes


def export(source: str, out_dir: str | Path, *, ctx_len: int, prefill_seq_len: int, batch_size: int = 1,
           full_batch_size: int = 0, progress: Progress = print) -> Export:
    """Export ``source`` (``embedded`` or a local Hugging Face folder) into ``out_dir``.

    Writes ``model.onnx`` and ``specializations.json`` (the given compile dimensions; a
    ``full_batch_size`` exports the continuous-batching graph, with ``batch_index``).
    """
    if prefill_seq_len > ctx_len:
        raise SessionError(f"prefill_seq_len ({prefill_seq_len}) must not exceed ctx_len ({ctx_len})")
    specs = specializations.build(batch_size, prefill_seq_len, ctx_len, full_batch_size)
    progress(f"loading {source} ...")
    model, _ = load_pretrained(source, progress)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    step = KVStep(model, continuous=bool(full_batch_size)).eval()
    args, names, outputs, axes = _interface(model, step.continuous)
    layers = model.config.num_hidden_layers
    progress(f"exporting {layers} layers to {out / GRAPH} (TorchScript, opset {OPSET}) ...")
    started = time.perf_counter()
    partial = out / f".{GRAPH}.partial"
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the exporter's tracer and deprecation chatter
            torch.onnx.export(step, args, str(partial), input_names=names, output_names=outputs,
                              dynamic_axes=axes, opset_version=OPSET, dynamo=False)
        os.replace(partial, out / GRAPH)
    finally:
        partial.unlink(missing_ok=True)
    spec_path = specializations.write(out, specs)
    seconds = time.perf_counter() - started
    size = (out / GRAPH).stat().st_size / 1e6
    progress(f"wrote {out / GRAPH} ({size:.0f} MB) and {spec_path.name} in {seconds:.1f} s")
    return Export(out / GRAPH, spec_path, seconds, layers)
