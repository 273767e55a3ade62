"""The seed's four sample models, five embedded SmolLM2 samples that run anywhere, the embedded embedding model and
an embedded vision sample.

The embedded KV-cache samples a new user meets first (``smollm2_decoupled`` for streaming,
``smollm2_kv`` for batch and generate) run int4 on the CPU: the embedded GGUF's own 4-bit weights
(their answers read like llama.cpp's on the same file) at several times fp32's speed.
``smollm2_decoupled_fp32`` streams at fp32, token-exact with transformers. Both precisions give a
request the same greedy answer under any load; int8's varies with its neighbours, so no sample uses it.
The causal samples recompute every token, so they stay fp32 (their session takes fp32 or bf16).
``minilm_embedding`` serves the embedded all-MiniLM-L6-v2 (model type ``embedding``) as its sentence-transformers
config says: mean pooling, normalised, 256 tokens at most, 384 dimensions; compiled for three sequence lengths.
``smollm2_vision`` takes images: SmolLM2 with a random-weight vision tower (``backend_model/vision/embedded.py``),
so a new user tries the image path without a download; its answers do not describe the image. It is written on
request only (``repo samples --vision``), not into the consoles' default repository.
"""

from __future__ import annotations

from pathlib import Path

from backend_model.contract.parameters import IMAGE_TEXT_TO_TEXT

from .writer import ModelSpec, RepoError, write_model

# What a causal model costs on a CPU (it recomputes the whole sequence at every token), said by every help that warns
CAUSAL_CPU_SPEED = "about 1 token/s for the embedded one on a busy 2-core CPU"
EMBEDDED_KV = {"prefill_seq_len": 32, "ctx_len": 512, "full_batch_size": 8}
EMBEDDED_CAUSAL = {"ctx_len": 256, "batch_size": 1}
EMBEDDED_VISION = {"prefill_seq_len": 32, "ctx_len": 512, "full_batch_size": 4, "img_size": 112}
MISTRAL = {"num_cores": 16, "prefill_seq_len": 32, "ctx_len": 256, "full_batch_size": 3, "mxfp6_matmul": True}
MINILM = {"seq_len": [32, 128, 256], "batch_size": 8}
MINILM_VECTORS = {"pooling": "mean", "normalize": "true", "max_seq_len": "256", "dimensions": "384"}
STARCODER = {"num_cores": 16, "prefill_seq_len": 32, "ctx_len": 1024, "batch_size": 1, "mxfp6_matmul": True}

SAMPLES: dict[str, ModelSpec] = {
    spec.model_name: spec
    for spec in (
        ModelSpec("starcoder_15b", "causal", False, hf_model_name="bigcode/starcoder", compile=STARCODER),
        ModelSpec("starcoder_decoupled", "causal", True, hf_model_name="bigcode/starcoder", compile=STARCODER),
        ModelSpec("mistral_7b", "kv_cache", False, hf_model_name="mistralai/Mistral-7B-v0.1", compile=MISTRAL),
        ModelSpec("mistral_decoupled", "kv_cache", True, hf_model_name="mistralai/Mistral-7B-v0.1", compile=MISTRAL),
        ModelSpec("smollm2_kv", "kv_cache", False, hf_model_name="embedded", compile=EMBEDDED_KV, precision="int4"),
        ModelSpec("smollm2_decoupled", "kv_cache", True, hf_model_name="embedded", compile=EMBEDDED_KV,
                  precision="int4"),
        ModelSpec("smollm2_decoupled_fp32", "kv_cache", True, hf_model_name="embedded", compile=EMBEDDED_KV),
        ModelSpec("smollm2_causal", "causal", False, hf_model_name="embedded", compile=EMBEDDED_CAUSAL),
        ModelSpec("smollm2_causal_decoupled", "causal", True, hf_model_name="embedded", compile=EMBEDDED_CAUSAL),
        ModelSpec("minilm_embedding", "embedding", hf_model_name="embedded", compile=MINILM, vectors=MINILM_VECTORS),
        ModelSpec("smollm2_vision", IMAGE_TEXT_TO_TEXT, True, hf_model_name="embedded_vision", compile=EMBEDDED_VISION,
                  max_images=2),
    )
}
EMBEDDED_ALL = tuple(name for name, spec in SAMPLES.items() if spec.hf_model_name == "embedded")
EMBEDDED_EMBEDDING = tuple(name for name in EMBEDDED_ALL if SAMPLES[name].embedding)  # the embedded encoder's
EMBEDDED_SAMPLES = tuple(name for name in EMBEDDED_ALL if name not in EMBEDDED_EMBEDDING)  # the chat models
VISION_SAMPLES = tuple(name for name, spec in SAMPLES.items() if spec.hf_model_name == "embedded_vision")
SEED_SAMPLES = tuple(name for name in SAMPLES if name not in EMBEDDED_ALL + VISION_SAMPLES)


def write_samples(names: tuple[str, ...], out_dir: str | Path, force: bool = False) -> list[Path]:
    """Write the named samples into ``out_dir``; when one is unknown or exists (without force), none."""
    unknown = [name for name in names if name not in SAMPLES]
    if unknown:
        raise RepoError(f"unknown sample {unknown[0]!r} (samples: {', '.join(SAMPLES)})")
    existing = [name for name in names if (Path(out_dir) / name).exists()]
    if existing and not force:
        raise RepoError(f"{Path(out_dir) / existing[0]} already exists (use --force to replace it)")
    return [write_model(SAMPLES[name], out_dir, force=force) for name in names]
