"""Tiny random-weight causal LMs of each architecture, built with transformers' own config classes (no download).

Each has two layers, hidden size 64 and the embedded SmolLM2 tokenizer's vocabulary, so it is served
and compared with ``generate`` through the embedded tokenizer. ``save_tiny`` writes one as a Hugging
Face folder (weights, config, tokenizer) a model repository can name in ``hf_model_name``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, CTX = 49152, 64, 2, 4, 2, 256
# the SmolLM2 tokenizer's special tokens; weights wide enough that attention depends on positions (at 0.02 it
# is nearly uniform, and a wrong rope or window would go unseen)
TOKENS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "initializer_range": 0.2}
LLAMA_SIZES = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 128, "num_hidden_layers": LAYERS,
               "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "max_position_embeddings": CTX, **TOKENS}
GPT_SIZES = {"vocab_size": VOCAB, "n_embd": HIDDEN, "n_layer": LAYERS, "n_head": HEADS, "n_positions": CTX, **TOKENS}
LONG_FACTORS = {"short_factor": [1.0 + i / 4 for i in range(8)], "long_factor": [4.0] * 8}  # head_dim 16

# name -> (config class name, its arguments): what each exercises is in its arguments
TINY: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", {**LLAMA_SIZES, "tie_word_embeddings": True}),
    "llama_biases_head_dim": ("LlamaConfig", {**LLAMA_SIZES, "attention_bias": True, "mlp_bias": True,
                                              "head_dim": 32, "hidden_act": "gelu_pytorch_tanh"}),
    "llama_rope_llama3": ("LlamaConfig", {**LLAMA_SIZES, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}}),
    "llama_rope_yarn": ("LlamaConfig", {**LLAMA_SIZES, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}}),
    "llama_rope_linear": ("LlamaConfig", {**LLAMA_SIZES, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    "llama_rope_longrope": ("LlamaConfig", {**LLAMA_SIZES, "rope_scaling": {
        "rope_type": "longrope", "original_max_position_embeddings": CTX, **LONG_FACTORS}}),
    "llama_rope_dynamic": ("LlamaConfig", {**LLAMA_SIZES, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
    "llama_rope_dynamic_short": ("LlamaConfig", {**LLAMA_SIZES, "max_position_embeddings": 32,
                                                 "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
    "mistral_window": ("MistralConfig", {**LLAMA_SIZES, "sliding_window": 8}),
    "qwen2_window": ("Qwen2Config", {**LLAMA_SIZES, "use_sliding_window": True, "sliding_window": 8,
                                     "max_window_layers": 1}),
    "qwen3": ("Qwen3Config", {**LLAMA_SIZES, "head_dim": 16}),
    "granite": ("GraniteConfig", {**LLAMA_SIZES, "embedding_multiplier": 4.0, "residual_multiplier": 0.5,
                                  "attention_multiplier": 0.1, "logits_scaling": 2.0}),
    "phi3": ("Phi3Config", {**LLAMA_SIZES, "original_max_position_embeddings": CTX}),
    "gemma2": ("Gemma2Config", {**LLAMA_SIZES, "head_dim": 16, "sliding_window": 8, "query_pre_attn_scalar": 16,
                                "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}),
    "gemma3_text": ("Gemma3TextConfig", {**LLAMA_SIZES, "head_dim": 16, "sliding_window": 8,
                                         "query_pre_attn_scalar": 16, "layer_types": ["sliding_attention",
                                                                                      "full_attention"]}),
    "starcoder2": ("Starcoder2Config", {**LLAMA_SIZES, "sliding_window": 8, "use_bias": True}),
    "gpt2": ("GPT2Config", GPT_SIZES),
    "gpt_bigcode": ("GPTBigCodeConfig", {**GPT_SIZES, "multi_query": True}),
    "gpt_neox": ("GPTNeoXConfig", {"vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 128,
                                   "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
                                   "max_position_embeddings": CTX, "rotary_pct": 0.5, **TOKENS}),
    "falcon": ("FalconConfig", {"vocab_size": VOCAB, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
                                "num_attention_heads": HEADS, "num_kv_heads": KV_HEADS,
                                "new_decoder_architecture": True, "max_position_embeddings": CTX, **TOKENS}),
}


def tiny_model(name: str, seed: int = 0) -> transformers.PreTrainedModel:
    """The tiny model ``name`` of ``TINY`` with seeded random weights, in float32, eval mode."""
    class_name, kwargs = TINY[name]
    config = getattr(transformers, class_name)(**kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):  # initialised to zero: a dropped bias would go unseen
                param.normal_(0.0, 0.2)
    return model.eval()


def save_tiny(name: str, folder: Path, tokenizer: Callable | Any) -> Path:
    """``folder`` holding the tiny model ``name`` and ``tokenizer``, as ``save_pretrained`` writes them."""
    tiny_model(name).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
