"""The generator weighs a compile config: weights + static KV cache from the model's config.json, refused when it
cannot fit where the model runs, said when it is tight."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from console.commands.repo import repo_group
from repo_gen import memory
from repo_gen.samples import SAMPLES
from repo_gen.spec import local_config
from repo_gen.writer import ModelSpec, RepoError

HUGE = {"ctx_len": 131072, "full_batch_size": 1024, "prefill_seq_len": 32}
BIG_MACHINE = (1e15, 1e15)


def kv_spec(**fields: object) -> ModelSpec:
    return dataclasses.replace(SAMPLES["smollm2_kv"], **fields)  # type: ignore[arg-type]


def test_the_huge_compile_config_is_refused_with_the_estimate(tmp_path: Path) -> None:
    config = tmp_path / "huge.json"
    config.write_text(json.dumps(HUGE))
    out = tmp_path / "out"
    result = CliRunner().invoke(repo_group, ["gen", "--model_name", "smollm2_kv", "--compile_config_path",
                                             str(config), "-o", str(out)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.startswith("error: compile config: ctx_len 131072 × full_batch_size 1024 needs about 6.2 TB "
                                    "on the CPU engine (weights 67 MB + static KV cache 6.2 TB, int4 weights, fp32 "
                                    "cache), more than this machine's ")
    assert result.stderr.rstrip().endswith(": lower ctx_len or full_batch_size")
    assert not out.exists()


def test_the_kv_cache_is_what_the_cpu_engine_allocates() -> None:
    """2 (K, V) × 30 layers × 3 KV heads × 64 × ctx_len × rows values of 4 bytes (2 at bf16); none for causal."""
    found = memory.estimate(kv_spec(compile={"ctx_len": 512, "full_batch_size": 8}), None)
    assert found is not None and found.kv_cache == 2 * 30 * 3 * 64 * 512 * 8 * 4
    bf16 = memory.estimate(kv_spec(precision="bf16", compile={"ctx_len": 512, "batch_size": 2}), None)
    assert bf16 is not None and bf16.kv_cache == 2 * 30 * 3 * 64 * 512 * 2 * 2 and bf16.rows == "batch_size"
    causal = memory.estimate(SAMPLES["smollm2_causal"], None)
    assert causal is not None and causal.kv_cache == 0
    # SmolLM2-135M: 134.5 M parameters (tied embeddings), 4 bytes each at fp32
    assert memory.estimate(kv_spec(precision="fp32"), None).weights == pytest.approx(134.5e6 * 4, rel=0.01)


def test_the_embedded_config_is_the_embedded_models() -> None:
    from backend_model.models import prepare_embedded

    real = json.loads((prepare_embedded(progress=lambda _: None) / "config.json").read_text())
    assert {key: real[key] for key in memory.EMBEDDED_CONFIG} == memory.EMBEDDED_CONFIG


def test_tight_is_said_and_too_big_refused_against_this_machine() -> None:
    spec = kv_spec(compile={"ctx_len": 2048, "full_batch_size": 8})  # 755 MB of cache + 67 MB of weights
    said: list[str] = []
    memory.check(spec, said.append, None, machine=(2e9, 1e9))
    assert said == []
    memory.check(spec, said.append, None, machine=(2e9, 0.5e9))
    assert said == ["warning: compile config: ctx_len 2048 × full_batch_size 8 needs about 822 MB on the CPU engine "
                    "(weights 67 MB + static KV cache 755 MB, int4 weights, fp32 cache), more than the 500 MB free "
                    "here now"]
    with pytest.raises(RepoError, match="more than this machine's 600 MB: lower ctx_len or full_batch_size"):
        memory.check(spec, said.append, None, machine=(0.6e9, 0.5e9))


def test_a_card_holds_32_gb_and_a_compiled_qpc_is_not_second_guessed(tmp_path: Path) -> None:
    card = kv_spec(engine="qaic", compile={"ctx_len": 131072, "full_batch_size": 16})  # fp16: 48 GB of cache
    with pytest.raises(RepoError, match=r"on a Cloud AI 100 card .*fp16 weights, fp16 cache\), more than the 32 GB "
                                        "of a Cloud AI 100 device"):
        memory.check(card, print, None, machine=BIG_MACHINE)
    said: list[str] = []
    tight = dataclasses.replace(card, compile={"ctx_len": 131072, "full_batch_size": 16, "mxint8_kv_cache": True})
    memory.check(tight, said.append, None)  # mxint8: 24.9 GB (8 bits and an 8-bit scale per 32 values)
    assert len(said) == 1 and ("static KV cache 24.9 GB, fp16 weights, mxint8 cache: 23.4 GB less than fp16), more "
                               "than the 16 GB of an AI 100 Standard") in said[0]
    qpc = dataclasses.replace(card, engine="auto", aic_binary_dir=str(tmp_path))
    memory.check(qpc, said.append, None)
    assert len(said) == 1


def test_a_model_whose_config_is_not_here_is_not_estimated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    mistral = SAMPLES["mistral_7b"]
    assert local_config(mistral.hf_model_name) is None and memory.estimate(mistral, None) is None
    memory.check(dataclasses.replace(mistral, compile=HUGE), print, None, machine=(1e9, 1e9))  # no error
    snapshot = tmp_path / "hub" / "models--mistralai--Mistral-7B-v0.1" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000}))
    found = memory.estimate(dataclasses.replace(mistral, engine="qaic"), local_config(mistral.hf_model_name))
    embedding = 32000 * 4096  # a Gather: fp16; the other 7.11 B parameters MatMul weights: mxfp6, 25/32 bytes each
    assert found is not None and found.weights == pytest.approx((7.24e9 - embedding) * 25 / 32 + embedding * 2,
                                                                rel=0.01)
    folder = tmp_path / "local"
    folder.mkdir()
    (folder / "config.json").write_text("[1]")  # not a config: no estimate, no error
    assert local_config(str(folder)) is None
    os.mkfifo(folder / "fifo")
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to(folder / "fifo")  # read, it would block: never read
    assert local_config(str(folder)) is None


def test_the_card_estimate_says_what_the_mx_formats_save() -> None:
    """The embedded SmolLM2 (tied): its 134.5 M parameters' MatMul weights are the layers' 106.2 M and the head's
    own 28.3 M (QEfficient's export holds it apart from the embedding, which stays fp16)."""
    both = kv_spec(engine="qaic", compile={"ctx_len": 512, "full_batch_size": 8, "mxfp6_matmul": True,
                                          "mxint8_kv_cache": True})
    found = memory.estimate(both, None)
    assert found is not None
    matmuls, embedding, cache = 106.2e6 + 28.3e6, 28.3e6, 2 * 30 * 3 * 64 * 512 * 8
    assert found.weights == pytest.approx(matmuls * 25 / 32 + embedding * 2, rel=0.01)
    assert found.kv_cache == cache * 33 / 32
    assert found.saved == pytest.approx(matmuls * (2 - 25 / 32) + cache * (2 - 33 / 32), rel=0.01)
    assert "(weights 162 MB + static KV cache 49 MB, mxfp6 weights, mxint8 cache: 210 MB less than fp16)" in str(found)
    plain = memory.estimate(kv_spec(engine="qaic", compile={"ctx_len": 512, "full_batch_size": 8}), None)
    assert plain is not None and plain.saved == 0 and plain.total - found.total == pytest.approx(found.saved)
    assert "less than fp16" not in str(plain)
