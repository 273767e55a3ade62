"""Every architecture served exactly: one tritonserver on a repository of tiny random-weight models.

One model per architecture (``tests/tiny_models.py``, saved with the embedded tokenizer and written by
the generator with ``engine cpu``) as a decoupled kv_cache model with continuous batching (full_batch_size
2, prefill chunks of 4): asked as a stream (two prompts in one gRPC request) and as a batch (one answer
per prompt through the generate endpoint, ``stream: false``); two of them also as causal models (HTTP
infer). Each answer must be the text of transformers' ``generate(do_sample=False)`` on the same folder.
``tests/fast/test_architectures.py`` covers every config in-process, refusals included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import SERVER_START
from tiny_models import save_tiny
from transformers import AutoModelForCausalLM, AutoTokenizer
from triton_wire import Stream, generate, http_infer, joined

from backend_model.models import prepare_embedded
from repo_gen.spec import generate as generate_model

pytestmark = [pytest.mark.server, pytest.mark.slow]
KV = ["llama_biases_head_dim", "llama_rope_yarn", "mistral_window", "qwen2_window", "qwen3", "granite", "phi3",
      "gemma2", "gemma3_text", "starcoder2", "gpt2", "gpt_bigcode", "gpt_neox", "falcon"]
CAUSAL = ["llama_biases_head_dim", "gpt2"]
PROMPTS = ["My name is", "Once upon a time, in a faraway kingdom, there lived"]
TOKENS = 16
KV_COMPILE = {"prefill_seq_len": 4, "ctx_len": 128, "full_batch_size": 2}
CAUSAL_COMPILE = {"ctx_len": 128, "batch_size": 1}


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the tiny models' folders, the repository of their Triton models)."""
    root = tmp_path_factory.mktemp("tiny_architectures")
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    for name in dict.fromkeys(KV + CAUSAL):
        save_tiny(name, root / "models" / name, tokenizer)
    for names, kind, decoupled, compiled in ((KV, "kv_cache", True, KV_COMPILE),
                                             (CAUSAL, "causal", False, CAUSAL_COMPILE)):
        for name in names:
            config = root / f"{name}_{kind}.json"
            config.write_text(json.dumps(compiled))
            generate_model(f"{name}_{kind}", root / "repo", hf_model_name=str(root / "models" / name),
                           model_type=kind, decoupled=decoupled, engine="cpu", compile_config_path=config)
    return root / "models", root / "repo"


@pytest.fixture(scope="module")
def tiny_server(tiny_repo):
    from console.server import TritonServer

    server = TritonServer(tiny_repo[1])
    server.start(timeout=SERVER_START)
    yield server
    server.stop()


def reference(folder: Path, cache: bool) -> list[str]:
    """transformers' greedy answers on the saved folder (its KV cache, or recomputed: causal), as text."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    texts = []
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.inference_mode():
            out = model.generate(ids, max_new_tokens=TOKENS, do_sample=False, use_cache=cache)
        texts.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    return texts


@pytest.mark.parametrize("name", KV)
def test_a_kv_cache_model_streams_and_answers_what_generate_does(tiny_repo, tiny_server, name: str) -> None:
    expected = reference(tiny_repo[0] / name, cache=True)
    stream = Stream(tiny_server)
    try:
        stream.send(f"{name}_kv_cache", PROMPTS, "both", max_tokens=TOKENS)
        assert joined(stream.collect(timeout=300)["both"]) == expected, "stream"
    finally:
        stream.close()
    for prompt, text in zip(PROMPTS, expected):
        body = {"prompt": prompt, "max_tokens": TOKENS, "stream": False, "exclude_input_in_output": True}
        assert generate(tiny_server, f"{name}_kv_cache", body)["text_output"] == text, "batch"


@pytest.mark.parametrize("name", CAUSAL)
def test_a_causal_model_answers_what_generate_does(tiny_repo, tiny_server, name: str) -> None:
    result = http_infer(tiny_server, f"{name}_causal", PROMPTS, max_tokens=TOKENS, exclude_input_in_output=True)
    assert [t.decode() for t in result["text_output"]] == reference(tiny_repo[0] / name, cache=False)
