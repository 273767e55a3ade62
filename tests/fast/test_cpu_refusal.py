"""A model the CPU engine refuses is named when its repository is written, by the rule the backend applies at
load (``cpu_support``, on the folder's config.json): engine cpu refuses it and writes nothing, engine auto
warns (a card may serve it), ``repo list`` marks it. A model the CPU serves is written without a word."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers
from tiny_models import TINY

from repo_gen import command
from repo_gen.inspection import list_models
from repo_gen.writer import ModelSpec, write_model


def tiny_config(name: str, folder: Path) -> Path:
    """A folder holding only the tiny model's config.json: all the generator reads."""
    class_name, kwargs = TINY[name]
    getattr(transformers, class_name)(**kwargs).save_pretrained(folder)
    return folder


def generate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = command.main(["--model_name", "m", *args])
    return code, capsys.readouterr().err


def test_engine_cpu_refuses_a_model_it_cannot_serve_and_writes_nothing(tmp_path: Path, capsys) -> None:
    source, out = tiny_config("gpt2", tmp_path / "gpt2"), tmp_path / "repo"
    code, err = generate(capsys, "--hf_model_name", str(source), "--engine", "cpu", "--precision", "int4",
                         "-o", str(out))
    assert code == 2 and not out.exists()
    assert err.splitlines() == [f"error: the CPU engine would refuse {source}: precision int4 on the CPU is the "
                                "Llama-family session's (llama, mistral, qwen2); a gpt2 model runs in fp32 or bf16, "
                                "not int4"]


def test_engine_auto_writes_it_with_a_warning(tmp_path: Path, capsys) -> None:
    source, out = tiny_config("llama_rope_dynamic_short", tmp_path / "llama"), tmp_path / "repo"
    code, err = generate(capsys, "--hf_model_name", str(source), "--model_type", "kv_cache", "-o", str(out))
    assert code == 0 and (out / "m" / "config.pbtxt").is_file()
    assert "warning: without a QAIC card (engine auto runs the CPU then) this model is refused: rope_parameters " \
           "rope_type 'dynamic' rescales positions past max_position_embeddings 32" in err


def test_a_model_the_cpu_serves_is_written_without_a_word(tmp_path: Path, capsys) -> None:
    for name in ("gpt2", "mistral_window"):
        source = tiny_config(name, tmp_path / name)
        out = tmp_path / name / "repo"
        code, err = generate(capsys, "--hf_model_name", str(source), "--engine", "cpu", "-o", str(out))
        assert (code, err) == (0, ""), name


def test_a_hub_name_is_read_from_the_hugging_face_cache(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    tiny_config("falcon", tmp_path / "hub" / "models--org--tiny" / "snapshots" / "0123abc")
    code, err = generate(capsys, "--hf_model_name", "org/tiny", "--engine", "cpu", "--precision", "int8",
                         "-o", str(tmp_path / "repo"))
    assert code == 2 and "a falcon model runs in fp32 or bf16, not int8" in err
    code, err = generate(capsys, "--hf_model_name", "org/elsewhere", "--engine", "cpu", "-o", str(tmp_path / "repo"))
    assert (code, err) == (0, "")  # not on this machine: nothing to read, the backend decides at load


def test_repo_list_marks_a_model_the_cpu_engine_refuses(tmp_path: Path) -> None:
    source = tiny_config("gpt_neox", tmp_path / "neox")
    write_model(ModelSpec("m", "kv_cache", hf_model_name=str(source), engine="cpu", precision="int4"), tmp_path / "r")
    (model,) = list_models(tmp_path / "r")
    assert model.problems == ["the CPU engine refuses it: precision int4 on the CPU is the Llama-family session's "
                              "(llama, mistral, qwen2); a gpt_neox model runs in fp32 or bf16, not int4"]
