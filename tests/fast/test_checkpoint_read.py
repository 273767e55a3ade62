"""The Llama-family session read from the safetensors files holds what it holds built from transformers' model.

The backend reads a Llama-family checkpoint's tensors itself (``models.safetensors_files``, ``read_tensors``)
instead of building transformers' model; the session must be the same to the bit: every weight, and so every
logit. Each Llama-family tiny model is saved as ``save_pretrained`` writes it (tied and untied embeddings,
biases, head_dim, windows), in one file and in shards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import tiny_model
from transformers import AutoConfig, AutoTokenizer
from twin_data import qeff_fixtures

from backend_model.build import BackendSettings, build_engine
from backend_model.engine.sampling import SamplingParams
from backend_model.models import prepare_embedded, read_tensors, safetensors_files
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.protocol import Dims, SessionError

ARCHITECTURES = ["llama", "llama_biases_head_dim", "llama_rope_yarn", "mistral_window", "qwen2_window"]
DIMS = Dims(1, 8, 64, 49152, 2)
PROMPT = np.array([[5, 17, 300, 9, 44, 1001, 7, 2]], dtype=np.int64)


def state(session: CpuKVSession) -> list[torch.Tensor]:
    """Every tensor the session computes with, in order."""
    out = [session.embed, session.norm, session.cos, session.sin]
    for linear in [session.lm_head] + [p for layer in session.layers for p in (layer.qkv, layer.o, layer.gate_up,
                                                                              layer.down)]:
        out += [t for t in (linear.weight, linear.bias) if t is not None]
    out += [t for layer in session.layers for t in (layer.in_norm, layer.post_norm)]
    return out


def prefill(session: CpuKVSession) -> np.ndarray:
    inputs = {"input_ids": PROMPT, "position_ids": np.arange(8, dtype=np.int64)[None], "batch_index": np.zeros((1, 1),
                                                                                                         np.int64)}
    return session.run(inputs)["logits"]


@pytest.mark.parametrize("shard", [None, "200KB"], ids=["one file", "shards"])
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_a_session_read_from_the_files_is_the_session_of_the_loaded_model(tmp_path: Path, name: str,
                                                                          shard: str | None) -> None:
    model = tiny_model(name)
    model.save_pretrained(tmp_path, **({"max_shard_size": shard} if shard else {}))
    files = safetensors_files(str(tmp_path))
    assert files and (len(files) > 1) == bool(shard)
    read = CpuKVSession(AutoConfig.from_pretrained(tmp_path), read_tensors(files), DIMS, "fp32")
    # each product's operands start where the model's own tensors do: an AVX-only CPU rounds by where they start
    assert all(t.data_ptr() % 64 == 0 for p in read.products() for t in (p.weight, p.bias) if t is not None)
    loaded = CpuKVSession.of(model, DIMS, "fp32")
    assert len(state(read)) == len(state(loaded))
    for mine, theirs in zip(state(read), state(loaded)):
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs)
    np.testing.assert_array_equal(prefill(read), prefill(loaded))


def test_a_checkpoint_without_a_weight_is_refused_naming_it(tmp_path: Path) -> None:
    model = tiny_model("llama_biases_head_dim")
    tensors = dict(model.state_dict())
    del tensors["model.layers.1.mlp.down_proj.weight"]
    with pytest.raises(SessionError, match=r"no model\.layers\.1\.mlp\.down_proj\.weight"):
        CpuKVSession(model.config, tensors, DIMS, "fp32")


@pytest.mark.parametrize("index", ["{", '{"metadata": {}}', '{"weight_map": ["a"]}'])
def test_a_broken_shard_index_is_left_to_from_pretrained(tmp_path: Path, index: str) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors.index.json").write_text(index)
    assert safetensors_files(str(tmp_path)) is None


def test_only_safetensors_are_read_directly(tmp_path: Path) -> None:
    model = tiny_model("llama")
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    assert safetensors_files(str(tmp_path)) is None  # a .bin checkpoint: transformers' from_pretrained reads it


def test_the_backend_reads_the_files_and_keeps_the_models_eos(tmp_path: Path) -> None:
    """A folder without generation_config.json: the EOS ids are the model config's too, as a loaded model's."""
    model = tiny_model("llama")
    model.config.eos_token_id = 7  # not the tokenizer's (2)
    model.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").unlink()
    AutoTokenizer.from_pretrained(prepare_embedded(progress=lambda m: None)).save_pretrained(tmp_path)
    engine, _ = build_engine(BackendSettings(engine="cpu", hf_model_name=str(tmp_path)), progress=lambda m: None)
    assert isinstance(engine.session, CpuKVSession)
    assert set(engine.eos_ids) == {2, 7}


def test_a_hub_name_in_the_local_cache_is_read_from_its_snapshot(tmp_path: Path) -> None:
    """A hub name already in the Hugging Face cache (the layout ``from_pretrained`` downloads into) loads offline from
    its snapshot's safetensors, without building transformers' model."""
    snapshot = tmp_path / "hub" / "models--someorg--tiny-llama" / "snapshots" / "abc123"
    tiny_model("llama").save_pretrained(snapshot)
    AutoTokenizer.from_pretrained(prepare_embedded(progress=lambda m: None)).save_pretrained(snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    script = ("import sys; from backend_model.build import BackendSettings, build_engine; "
              "from backend_model.models import safetensors_files; "
              "files = safetensors_files('someorg/tiny-llama'); "
              "engine, _ = build_engine(BackendSettings(engine='cpu', hf_model_name='someorg/tiny-llama'), print); "
              "print(files, type(engine.session).__name__, 'transformers.models.llama.modeling_llama' in sys.modules)")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"[{snapshot / 'model.safetensors'!r}] CpuKVSession False"


def test_the_qeff_fixtures_hf_folder_is_read_directly_and_answers_as_transformers_did() -> None:
    """The real tiny-llama of the QEfficient fixtures, loaded by the backend from its safetensors, answers each
    prompt with the greedy tokens transformers recorded for it when the fixtures were made (``hf_greedy.json``)."""
    qeff = qeff_fixtures()
    assert safetensors_files(str(qeff.hf)) == [qeff.hf / "model.safetensors"]
    settings = BackendSettings(engine="cpu", hf_model_name=str(qeff.hf))
    settings.compile["ctx_len"] = 128
    engine, description = build_engine(settings, progress=lambda m: None)
    assert isinstance(engine.session, CpuKVSession) and "session=llama-family" in description
    for prompt, tokens in qeff.reference.items():
        (seq,) = engine.generate([prompt], SamplingParams(max_tokens=len(tokens)))
        assert seq.tokens == tokens, prompt
