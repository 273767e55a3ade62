"""Which CPU session serves a model exactly, decided from its config: one rule for the backend and the generator.

The backend asks at load (``model.config.to_dict()``), the generator at write time (the folder's
``config.json``), so a model the CPU cannot serve is named before a server starts. Standard library
only, and Python 3.8: the generator the release artifacts ship imports it.

* ``LLAMA_FAMILY``: the lean KV session (``sessions.cpu``), every precision. It honours biases, the
  activation, sliding windows, head_dim, tied embeddings and the rope types below.
* ``TRANSFORMERS_KV``: transformers' own model with a cache per slot (``sessions.hf``), fp32 or bf16;
  the architectures listed are the ones tested token for token against ``generate``.
* causal (no KV cache): transformers' own model recomputed at every token, any architecture, fp32 or bf16.
* ``VISION_KV`` (model_type ``image_text_to_text``): a vision-language model's own vision tower and projector
  feeding its language model, a cache per slot (``vision.session``), fp32 or bf16; the families listed are the
  ones tested token for token against ``generate`` (their language model takes the image embeddings in place of
  its placeholders, with plain positions and causal attention).

A rope whose table changes with the sequence length (``dynamic`` past max_position_embeddings, ``longrope``
past original_max_position_embeddings) is refused for a KV cache whose ctx_len goes past that length.
"""

from __future__ import annotations

from typing import Any, Mapping

from .errors import SessionError

LLAMA_FAMILY = "llama-family"
TRANSFORMERS_KV = "transformers-kv"
RECOMPUTE = "recompute"
VISION_KV = "vision-kv"

LLAMA_LIKE = ("llama", "mistral", "qwen2")
TRANSFORMERS_KV_TYPES = ("falcon", "gemma2", "gemma3_text", "gpt2", "gpt_bigcode", "gpt_neox", "granite", "phi3",
                         "qwen3", "starcoder2")
VISION_TYPES = ("llava", "llava_next", "idefics3", "aya_vision")
DENSE = ("fp32", "bf16")
POSITION_ROPES = ("default", "linear", "llama3", "yarn")  # tables that depend on the position only
LENGTH_ROPES = {"dynamic": "max_position_embeddings", "longrope": "original_max_position_embeddings"}  # up to
LAYER_TYPES = ("full_attention", "sliding_attention")


def session_for(config: Mapping[str, Any], use_kv_cache: bool, precision: str, ctx_len: int) -> str:
    """LLAMA_FAMILY, TRANSFORMERS_KV or RECOMPUTE for this model on the CPU; SessionError naming the field
    that none of them serves exactly."""
    model_type = str(config.get("model_type", "?"))
    if not use_kv_cache:
        _dense(precision, f"the causal (recompute) session runs transformers' {model_type} model")
        return RECOMPUTE
    if model_type in LLAMA_LIKE:
        _rope(config, ctx_len)
        kinds = sorted(set(config.get("layer_types") or ()) - set(LAYER_TYPES))
        if kinds:
            raise SessionError(f"layer_types {kinds[0]!r}: the CPU KV session serves {' and '.join(LAYER_TYPES)} "
                               "layers only; use model_type 'causal'")
        return LLAMA_FAMILY
    if model_type in TRANSFORMERS_KV_TYPES:
        _dense(precision, f"precision {precision} on the CPU is the Llama-family session's ({', '.join(LLAMA_LIKE)}); "
                          f"a {model_type} model runs")
        _rope(config, ctx_len)
        return TRANSFORMERS_KV
    raise SessionError(
        f"model_type {model_type!r} has no CPU KV-cache session (exact for: {', '.join(LLAMA_LIKE)}, "
        f"{', '.join(TRANSFORMERS_KV_TYPES)}): use model_type 'causal', which recomputes every token"
    )


def vision_session_for(config: Mapping[str, Any], precision: str, ctx_len: int) -> str:
    """VISION_KV for this vision-language model on the CPU; SessionError naming the field it cannot serve."""
    model_type = str(config.get("model_type", "?"))
    if model_type not in VISION_TYPES:
        raise SessionError(f"model_type {model_type!r} has no CPU image-text-to-text session (exact for: "
                           f"{', '.join(VISION_TYPES)})")
    _dense(precision, f"a {model_type} model runs")
    text = config.get("text_config")
    _rope(text if isinstance(text, Mapping) else {}, ctx_len)
    return VISION_KV


def _dense(precision: str, what: str) -> None:
    if precision not in DENSE:
        raise SessionError(f"{what} in fp32 or bf16, not {precision}")


def _rope(config: Mapping[str, Any], ctx_len: int) -> None:
    """SessionError when the rope table changes with the sequence length within ctx_len: a KV cache keeps
    the keys it rotated before, where the model would rotate them anew."""
    for name, params in _rope_params(config):
        kind = params.get("rope_type", params.get("type", "default"))
        if kind in POSITION_ROPES:
            continue
        if kind not in LENGTH_ROPES:
            raise SessionError(f"{name} rope_type {kind!r} is not one the CPU KV sessions know "
                               f"({', '.join(POSITION_ROPES + tuple(LENGTH_ROPES))}); use model_type 'causal'")
        field = LENGTH_ROPES[kind]
        limit = params.get(field) or config.get(field)
        if not limit or ctx_len > int(limit):
            raise SessionError(f"{name} rope_type {kind!r} rescales positions past {field} {limit}, and ctx_len "
                               f"{ctx_len} goes past it (a KV cache keeps the keys it rotated before): use "
                               "model_type 'causal', or a ctx_len within it")


def _rope_params(config: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(field, parameters) of each rope: ``rope_parameters`` (transformers 5, maybe one per layer type) or
    ``rope_scaling`` (older config.json files)."""
    for name in ("rope_parameters", "rope_scaling"):
        params = config.get(name)
        if isinstance(params, Mapping) and params:
            nested = [(f"{name}.{k}", v) for k, v in params.items() if isinstance(v, Mapping)]
            return nested or [(name, params)]
    return []
