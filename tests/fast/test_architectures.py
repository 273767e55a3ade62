"""Every causal LM exact or refused on the CPU, in-process.

Tiny random-weight models of each architecture (``tests/tiny_models.py``: transformers' own config
classes, no download) run through the engine on the session the backend picks (``open_cpu_session``),
in the three ways a model is served: kv_cache with regular batching (batch_size 2, the batch models),
kv_cache with continuous batching (full_batch_size 2, the decoupled samples), and causal. Prefill runs
in chunks of 4 tokens. The greedy tokens must equal transformers' ``generate(do_sample=False)`` on the
same model (with its KV cache, or without for causal), or the config must be refused naming the field.
``tests/e2e/test_architectures_served.py`` serves them through tritonserver.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from helpers import engine_threads  # noqa: F401 (autouse: the engine's threads)
from tiny_models import TINY, tiny_model
from transformers import AutoTokenizer

from backend_model.build import open_cpu_session
from backend_model.contract import cpu_support
from backend_model.engine.loop import Engine
from backend_model.engine.sampling import SamplingParams
from backend_model.models import eos_ids, prepare_embedded
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.hf import CpuRecomputeSession, TransformersKVSession
from backend_model.sessions.protocol import Dims, SessionError

PROMPTS = ["My name is", "Once upon a time, in a faraway kingdom, there lived"]  # the second outgrows windows of 8
TOKENS = 16
CTX = 128
MODES = {  # name -> (use_kv_cache, dims)
    "kv_cache batch": (True, Dims(2, 4, CTX, 49152)),
    "kv_cache stream": (True, Dims(1, 4, CTX, 49152, full_batch_size=2)),
    "causal": (False, Dims(1, CTX, CTX, 49152)),
}
LLAMA_FAMILY = {"llama", "llama_biases_head_dim", "llama_rope_llama3", "llama_rope_yarn", "llama_rope_linear",
                "llama_rope_longrope", "llama_rope_dynamic", "mistral_window", "qwen2_window"}
REFUSED_KV = {"llama_rope_dynamic_short": "rope_type 'dynamic' rescales positions past max_position_embeddings 32"}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))


def hf_greedy(model, tokenizer, prompt: str, cache: bool) -> list[int]:
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=TOKENS, do_sample=False, use_cache=cache)
    return out[0, ids.shape[1] :].tolist()


def expected_session(name: str, kv: bool) -> type | None:
    if not kv:
        return CpuRecomputeSession
    if name in REFUSED_KV:
        return None
    return CpuKVSession if name in LLAMA_FAMILY else TransformersKVSession


def test_every_tiny_architecture_is_one_the_rule_names() -> None:
    types = {getattr(transformers, class_name).model_type for class_name, _ in TINY.values()}
    assert types <= set(cpu_support.LLAMA_LIKE + cpu_support.TRANSFORMERS_KV_TYPES)
    assert set(cpu_support.LLAMA_LIKE + cpu_support.TRANSFORMERS_KV_TYPES) <= types  # each listed type is tested


@pytest.mark.parametrize("name", list(TINY))
def test_served_tokens_equal_generate_or_the_config_is_refused(tokenizer, name: str) -> None:
    model = tiny_model(name)
    references = {cache: [hf_greedy(model, tokenizer, p, cache) for p in PROMPTS] for cache in (True, False)}
    for mode, (kv, dims) in MODES.items():
        expected = expected_session(name, kv)
        if expected is None:
            with pytest.raises(SessionError, match=REFUSED_KV[name]):
                open_cpu_session(model, dims, kv, "fp32")
            continue
        session = open_cpu_session(model, dims, kv, "fp32")
        assert type(session) is expected, mode
        engine = Engine(session, tokenizer, eos_ids(model, tokenizer))
        got = [s.tokens for s in engine.generate(PROMPTS, SamplingParams(max_tokens=TOKENS))]
        assert got == references[kv], (name, mode)


@pytest.mark.parametrize(("config", "kv", "precision", "refusal"), [
    ({"model_type": "gpt2"}, True, "int4", "precision int4 on the CPU is the Llama-family session's"),
    ({"model_type": "gpt2"}, False, "int8", "in fp32 or bf16, not int8"),
    ({"model_type": "mamba"}, True, "fp32", "model_type 'mamba' has no CPU KV-cache session"),
    ({"model_type": "llama", "rope_scaling": {"type": "su"}}, True, "fp32", "rope_scaling rope_type 'su' is not one"),
    ({"model_type": "phi3", "original_max_position_embeddings": 64, "rope_scaling": {"rope_type": "longrope"}},
     True, "fp32", "past original_max_position_embeddings 64, and ctx_len 128"),
    ({"model_type": "qwen2", "layer_types": ["full_attention", "linear_attention"]}, True, "fp32",
     "layer_types 'linear_attention'"),
])
def test_the_rule_refuses_naming_the_field(config: dict, kv: bool, precision: str, refusal: str) -> None:
    with pytest.raises(SessionError, match=refusal):
        cpu_support.session_for(config, kv, precision, CTX)


def test_the_rule_reads_older_and_newer_config_files() -> None:
    assert cpu_support.session_for({"model_type": "mistral", "rope_scaling": None}, True, "int4", CTX) == "llama-family"
    gemma = {"model_type": "gemma3_text", "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8},
                                                               "sliding_attention": {"rope_type": "default"}}}
    assert cpu_support.session_for(gemma, True, "bf16", CTX) == "transformers-kv"
    assert cpu_support.session_for({"model_type": "anything"}, False, "fp32", CTX) == "recompute"
