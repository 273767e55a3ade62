"""What a compile config asks of memory: the model's weights plus its static KV cache, from its config.json.

A KV-cache model allocates ``2 (K and V) × layers × KV heads × head_dim × ctx_len × rows`` values when it loads
(rows: full_batch_size, else batch_size); a causal model keeps no cache. Where the model runs sets the bytes per
value and what must hold them: the CPU engine (fp32 values; bf16 at bf16 precision) or the ONNX twin (fp32) in
this machine's memory; a card (fp16, mxint8 with mxint8_kv_cache; mxfp6 MatMul weights with mxfp6_matmul: the
embedding, a Gather, stays fp16, and QEfficient's export holds a tied head as a MatMul weight of its own) in one Cloud
AI 100 device (16 GB on a Standard card, 32 GB on a Pro, and on each of an Ultra's four) — or, compiled with
``num_devices`` N (tensor slicing), 1/N of the weights and of the cache (split by KV heads) on each of N. A QPC already
compiled fixed its own memory. The card's sampler (``include_sampler``) keeps two [rows, vocab] one-byte masks
(QEfficient's repetition and presence penalty buffers) beside the cache; compute-context lengths change how much of
the cache a step reads, not what is allocated (the cache is ctx_len long all the same). A model whose config.json is
not here (:func:`~.spec.local_config`: a hub name missing from the local Hugging Face cache) cannot be estimated:
neither is checked.

Standard library only, and Python 3.8: the release artifacts' generator imports it.
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from backend_model.contract import compile_config, devices

from .writer import ModelSpec, RepoError

Note = Callable[[str], None]
# SmolLM2-135M-Instruct's config.json (the embedded GGUF's model), the keys an estimate reads
EMBEDDED_CONFIG = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                   "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
                   "tie_word_embeddings": True}
# all-MiniLM-L6-v2's (the embedded encoder's)
EMBEDDED_ENCODER_CONFIG = {"model_type": "bert", "hidden_size": 384, "intermediate_size": 1536, "num_hidden_layers": 6,
                           "num_attention_heads": 12, "vocab_size": 30522, "tie_word_embeddings": True}
UNGATED = ("gpt2", "gpt_bigcode", "gpt_neox", "gptj", "falcon", "opt", "bloom", "phi", "bert")  # an MLP of 2 matrices
CPU_WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "int8": 1.0, "int4": 0.5}
FP16, MXFP6, MXINT8 = 2.0, 25 / 32, 33 / 32  # bytes a value: MX blocks of 32 elements (6 or 8 bits) and an 8-bit scale
CARD = "a Cloud AI 100 card"
CARD_MOST, CARD_LEAST = 32e9, 16e9  # bytes of one Cloud AI 100 device: Pro (and each of an Ultra's), Standard
SERVER_SOCS = 16  # the most SoCs a server carries: the count tried when qaic-util is not here to say
UNSPLIT = "activations and each SoC's program not counted"


@dataclass(frozen=True)
class Estimate:
    """The bytes a model takes where it runs, and how the KV cache was counted."""

    weights: float
    kv_cache: float
    place: str  # "the CPU engine", CARD
    formats: str  # the weights' and the cache's formats, in words
    shape: str  # "ctx_len 131072 × full_batch_size 1024"
    rows: str  # the key that sets the cache's rows: full_batch_size or batch_size
    socs: int = 1  # SoCs the card's share is for (num_devices: weights split N ways, the cache by KV heads)
    split: str = ""  # how the cache splits when the KV heads do not divide by ``socs``
    saved: float = 0.0  # bytes the card's MX formats save against fp16 weights and cache
    sampler: float = 0.0  # the card's sampler's penalty masks (include_sampler)

    @property
    def savings(self) -> str:
        """What the MX formats save, in words (empty without them)."""
        return f"{size(self.saved)} less than fp16" if self.saved else ""

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.sampler

    def __str__(self) -> str:
        where = f"each of {self.socs} SoCs of {self.place}" if self.socs > 1 else self.place
        split = f"; {self.split}" if self.split else ""
        saved = f": {self.savings}" if self.saved else ""
        sampler = f" + the sampler's masks {size(self.sampler)}" if self.sampler else ""
        return (f"{self.shape} needs about {size(self.total)} on {where} (weights {size(self.weights)} + static "
                f"KV cache {size(self.kv_cache)}{sampler}, {self.formats}{saved}{split})")


def size(count: float) -> str:
    """Bytes in decimal units, as memory is sold: ``6.2 TB``, ``270 MB``."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count / 1e6:.0f} MB"


def _first(config: Mapping[str, Any], *keys: str) -> int | None:
    value = next((config[k] for k in keys if isinstance(config.get(k), int)), None)
    return value if value is None or value > 0 else None


def _shape(config: Mapping[str, Any]) -> tuple[float, float, int, int] | None:
    """(parameters, of them the embedding's, cache values per token and row, KV heads) of a decoder-only model, or
    None when its config is not one."""
    hidden = _first(config, "hidden_size", "n_embd", "d_model")
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(config, "num_attention_heads", "n_head")
    vocab = _first(config, "vocab_size")
    if hidden is None or layers is None or heads is None or vocab is None:
        return None
    kv_heads = _first(config, "num_key_value_heads") or (1 if config.get("multi_query") else heads)
    head_dim = _first(config, "head_dim") or hidden // heads
    inner = _first(config, "intermediate_size", "n_inner") or 4 * hidden
    mlp = (2 if config.get("model_type") in UNGATED else 3) * hidden * inner
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return float(embeddings + layers * (attention + mlp)), float(vocab * hidden), 2 * layers * kv_heads * head_dim, \
        kv_heads


def _encoder(spec: ModelSpec, config: Mapping[str, Any] | None) -> Estimate | None:
    """An encoder's weights where it runs (no KV cache; activations are not counted)."""
    shape = _shape(config) if config is not None else None
    if shape is None:
        return None
    c = spec.compiled()
    place, weight_format, weight_bytes, socs = "the CPU engine", "fp32", 4.0, 1
    if on_card(spec):
        weight_format, weight_bytes = ("mxfp6", 0.78) if c["mxfp6_matmul"] else ("fp16", 2.0)
        place, socs = CARD, c["num_devices"]
    return Estimate(shape[0] * weight_bytes / socs, 0.0, place, f"{weight_format} weights, no KV cache",
                    f"seq_len {c['seq_len'][-1]} × batch_size {c['batch_size']}", "batch_size", socs)


def on_card(spec: ModelSpec) -> bool:
    """Whether the model will run on a card: engine qaic, or auto with a QPC or with QEfficient on this machine."""
    if spec.engine == "qaic":
        return True
    return spec.engine == "auto" and bool(spec.aic_binary_dir or importlib.util.find_spec("QEfficient"))


def _formats(spec: ModelSpec, c: dict[str, Any]) -> tuple[str, str, float, str, float]:
    """(place, weight format, bytes per weight, cache format, bytes per cache value) where ``spec`` runs."""
    if on_card(spec):
        weights = ("mxfp6", MXFP6) if c["mxfp6_matmul"] else ("fp16", FP16)
        cache = ("mxint8", MXINT8) if c["mxint8_kv_cache"] else ("fp16", FP16)
        return (CARD, *weights, *cache)
    if spec.engine == "onnx":
        return "the ONNX engine (on the CPU)", "fp32", 4.0, "fp32", 4.0
    cache = ("bf16", 2.0) if spec.precision == "bf16" else ("fp32", 4.0)
    return ("the CPU engine", spec.precision, CPU_WEIGHT_BYTES[spec.precision], *cache)


def estimate(spec: ModelSpec, config: Mapping[str, Any] | None, num_devices: int | None = None) -> Estimate | None:
    """The memory ``spec``'s compile config asks where it runs, from its model's ``config`` (the embedded model's
    when ``spec`` names it); on a card, per SoC of ``num_devices`` (default: the compile config's): the weights
    split N ways, the cache by KV heads (the largest share when they do not divide). None without a config."""
    if spec.hf_model_name in ("", "embedded"):
        config = EMBEDDED_ENCODER_CONFIG if spec.embedding else EMBEDDED_CONFIG
    if spec.embedding:
        return _encoder(spec, config)
    shape = _shape(config) if config is not None else None
    if shape is None:
        return None
    params, embedding, per_token, kv_heads = shape
    c = compile_config.validate(spec.compile)
    rows = "full_batch_size" if c["full_batch_size"] else "batch_size"
    tokens = c["ctx_len"] * c[rows] if spec.model_type != "causal" else 0
    place, weight_format, weight_bytes, cache_format, cache_bytes = _formats(spec, c)
    socs = (num_devices or c["num_devices"]) if place == CARD else 1
    heads = math.ceil(kv_heads / socs)
    split = f"{kv_heads} KV heads do not split {socs} ways: {heads} on one SoC" if kv_heads % socs else ""
    weights, cache = params * weight_bytes / socs, tokens * per_token * heads / kv_heads
    saved = 0.0
    if place == CARD:  # the embedding is a Gather (fp16); the MatMuls are the layers' and the head's own
        tied = bool(config and config.get("tie_word_embeddings"))
        matmuls = params + (embedding if tied else 0) - embedding
        weights = (matmuls * weight_bytes + embedding * FP16) / socs
        saved = matmuls * (FP16 - weight_bytes) / socs + cache * (FP16 - cache_bytes)
    ccl = "; compute-context lengths read less of the cache, allocated whole" if c["comp_ctx_lengths_decode"] else ""
    assert config is not None  # it gave a shape
    sampler = 2.0 * c[rows] * (_first(config, "vocab_size") or 0) if c["include_sampler"] and place == CARD else 0.0
    return Estimate(weights, cache * cache_bytes, place,
                    f"{weight_format} weights, {cache_format} cache" + (f", {UNSPLIT}" if socs > 1 else "") + ccl,
                    f"ctx_len {c['ctx_len']} × {rows} {c[rows]}", rows, socs, split, saved, sampler)


def smallest_socs(spec: ModelSpec, config: Mapping[str, Any] | None, most: float, socs: int) -> int | None:
    """The smallest num_devices up to ``socs`` whose share of the model fits in ``most`` bytes per SoC, or None."""
    for n in range(1, socs + 1):
        found = estimate(spec, config, n)
        if found is not None and found.total <= most:
            return n
    return None


def machine_socs() -> tuple[int, str]:
    """(SoCs to try, where that count comes from): the SoCs qaic-util lists here, else :data:`SERVER_SOCS`."""
    found, _ = devices.query()
    if found:
        return len(found), f"the {len(found)} SoCs qaic-util lists here"
    return SERVER_SOCS, f"{SERVER_SOCS} SoCs (the most a server carries; no qaic-util here to count them)"


def machine_memory() -> tuple[float, float] | None:
    """(total, available now) bytes of this machine's memory, or None where it cannot be read."""
    try:
        total = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        lines = Path("/proc/meminfo").read_text(encoding="ascii").splitlines()
    except (AttributeError, OSError, ValueError):
        return None
    free = next((float(line.split()[1]) * 1024 for line in lines if line.startswith("MemAvailable:")), total)
    return total, free


def _bounds(found: Estimate, machine: tuple[float, float] | None) -> tuple[tuple[float, str], tuple[float, str]] | None:
    """((bytes, what) over which the estimate is refused, (bytes, what) over which it is warned), or None."""
    if found.place == CARD:
        return (CARD_MOST, "the 32 GB of a Cloud AI 100 device"), (CARD_LEAST, "the 16 GB of an AI 100 Standard")
    if machine is None:
        return None
    return (machine[0], f"this machine's {size(machine[0])}"), (machine[1], f"the {size(machine[1])} free here now")


def check(spec: ModelSpec, note: Note, config: Mapping[str, Any] | None,
          machine: tuple[float, float] | None = None, socs: tuple[int, str] | None = None) -> None:
    """Refuse (RepoError) a compile config whose memory cannot fit where the model runs; warn (``note``) when it
    is tight. ``config``: the model's config.json, when it is here; ``machine``: this machine's (total, available)
    bytes (default: read); ``socs``: the SoCs a card's refusal may suggest, and whence (default: qaic-util's).
    On a card, a refusal names the smallest num_devices that fits, or says that none up to the machine's does."""
    found = estimate(spec, config)
    if found is None or (spec.aic_binary_dir and found.place == CARD):
        return
    bounds = _bounds(found, machine or machine_memory())
    if bounds is None:
        return
    (most, beyond), (tight, beside) = bounds
    if found.total > most and found.place == CARD:
        count, whence = socs or machine_socs()
        fits = smallest_socs(spec, config, most, count)
        if fits is None:
            raise RepoError(f"compile config: {found}, more than {beyond}, and it fits on no SoC count up to "
                            f"{whence}: lower ctx_len or {found.rows}")
        raise RepoError(f"compile config: {found}, more than {beyond}: set num_devices {fits} (the smallest that "
                        f"fits, of {whence}) and device groups of {fits}, or lower ctx_len or {found.rows}")
    if found.total > most:
        raise RepoError(f"compile config: {found}, more than {beyond}: lower ctx_len or {found.rows}")
    if found.total > tight:
        note(f"warning: compile config: {found}, more than {beside}")
