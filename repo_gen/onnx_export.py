"""QEfficient-style ONNX export of a Llama-family model: the graph a QPC is compiled from.

The graph has QEfficient's interface: ``input_ids`` / ``position_ids`` int64 [batch_size, seq_len],
``batch_index`` int64 [batch_size, 1] with continuous batching, ``past_key.{i}`` / ``past_value.{i}``
[batch_size or full_batch_size, kv_heads, ctx_len, head_dim]; out ``logits`` [batch_size, 1, vocab]
at each row's largest position, and ``past_*.{i}_RetainedState``. The axes are dynamic and named
like the specialization symbols; ``specializations.json`` beside the graph fixes them as a compile
of the given dimensions would. Position -1 marks padding: it is neither written nor attended.

Cache writes select by position (a one-hot product, exact in float32) instead of QEfficient's
scatter, so padding needs no out-of-range index (QEfficient's ORT check rewrites that index to 0,
which would overwrite position 0 of a slot). The export is TorchScript at opset 17, as
QEfficient's; the layers are Hugging Face's own modules (norms, rotary table, projections, MLP).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from backend_model import specializations
from backend_model.contract import SessionError
from backend_model.cpu_session import LLAMA_LIKE, head_dim
from backend_model.models import Progress, load_pretrained

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


class KVStep(torch.nn.Module):
    """One step of a Llama-family model with QEfficient's tensor interface."""

    def __init__(self, model: torch.nn.Module, continuous: bool) -> None:
        super().__init__()
        cfg = model.config
        if cfg.model_type not in LLAMA_LIKE:
            raise SessionError(f"the ONNX export supports Llama-family models ({', '.join(sorted(LLAMA_LIKE))}), "
                               f"not {cfg.model_type!r}")
        self.model = model
        self.continuous = continuous
        self.head_dim = head_dim(cfg)
        self.groups = cfg.num_attention_heads // cfg.num_key_value_heads

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, *rest: torch.Tensor):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

        slots, past = (rest[0].view(-1), rest[1:]) if self.continuous else (None, rest)
        inner = self.model.model
        b, s = input_ids.shape
        x = inner.embed_tokens(input_ids)
        cos, sin = inner.rotary_emb(x, position_ids.clamp(min=0))
        cache_pos = torch.arange(past[0].shape[2])
        picks = (position_ids.unsqueeze(-1) == cache_pos).to(x.dtype)  # [B, S, ctx]: -1 picks nothing
        put = picks.transpose(1, 2).unsqueeze(1)  # [B, 1, ctx, S]
        written = (picks.sum(1) > 0)[:, None, :, None]  # [B, 1, ctx, 1]
        attended = cache_pos.view(1, 1, 1, -1) <= position_ids[:, None, :, None]  # [B, 1, S, ctx]
        mask = torch.where(attended, 0.0, torch.finfo(x.dtype).min)
        retained = []
        for i, layer in enumerate(inner.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q, k, v = (proj(h).view(b, s, -1, self.head_dim).transpose(1, 2)
                       for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            caches = []
            for new, old in ((k, past[2 * i]), (v, past[2 * i + 1])):
                rows = torch.where(written, put @ new, old if slots is None else old[slots])
                caches.append(rows)
                retained.append(rows if slots is None else old.index_put((slots,), rows))
            keys, values = (repeat_kv(c, self.groups) for c in caches)
            weights = torch.softmax(q @ keys.transpose(2, 3) * attn.scaling + mask, dim=-1, dtype=torch.float32)
            x = x + attn.o_proj((weights @ values).transpose(1, 2).reshape(b, s, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        last = x.reshape(b * s, -1)[torch.arange(b) * s + position_ids.argmax(1)]  # each row's largest position
        return (self.model.lm_head(inner.norm(last)).unsqueeze(1), *retained)


def _interface(model: torch.nn.Module, continuous: bool):
    """Example inputs, input/output names and dynamic axes, QEfficient's."""
    cfg = model.config
    size = head_dim(cfg)
    b, s, ctx, fbs = (EXAMPLE[k] for k in ("batch_size", "seq_len", "ctx_len", "full_batch_size"))
    rows = {0: "batch_size", 1: "seq_len"}
    args = [torch.zeros((b, s), dtype=torch.int64), torch.arange(s).repeat(b, 1)]
    names, outputs, axes = ["input_ids", "position_ids"], ["logits"], {"input_ids": rows, "position_ids": rows}
    if continuous:
        args.append(torch.tensor([[1], [3]], dtype=torch.int64))
        names.append("batch_index")
        axes["batch_index"] = {0: "batch_size"}
    cache_axes = {0: "full_batch_size" if continuous else "batch_size", 2: "ctx_len"}
    for i in range(cfg.num_hidden_layers):
        for kind in ("key", "value"):
            args.append(torch.zeros((fbs if continuous else b, cfg.num_key_value_heads, ctx, size)))
            name = f"past_{kind}.{i}"
            names.append(name)
            outputs.append(f"{name}_RetainedState")
            axes[name] = axes[f"{name}_RetainedState"] = cache_axes
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
