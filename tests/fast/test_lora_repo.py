"""The generator's ``--lora NAME=PATH``: PEFT adapter folders checked against the base model before any write
(rank, target modules, base name and sizes), copied into the model's folder, named by config.pbtxt's
``lora_adapters``/``max_loras`` and the compile config's ``lora_adapters``; the backend's settings read them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from backend_model.build import BackendSettings
from backend_model.contract import adapters as lora
from backend_model.contract.errors import SessionError
from repo_gen.command import main
from repo_gen.spec import generate
from repo_gen.writer import RepoError

BASE = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100}


def adapter(folder: Path, rank: int = 4, targets: tuple[str, ...] = ("q_proj", "v_proj"), base: str = "tiny",
            layers: int = 2, hidden: int = 64, **extra) -> Path:
    """A PEFT adapter folder (zero factors) for a base of ``hidden`` size with 4 heads of which 2 key/value."""
    outputs = {"q_proj": hidden, "k_proj": hidden // 2, "v_proj": hidden // 2, "o_proj": hidden, "gate_proj": 128}
    tensors = {}
    for layer in range(layers):
        for target in targets:
            tensors[lora.weight_name(layer, target, "A")] = torch.zeros(rank, hidden)
            tensors[lora.weight_name(layer, target, "B")] = torch.zeros(outputs[target], rank)
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / lora.WEIGHTS_FILE))
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(targets),
              "base_model_name_or_path": base, "bias": "none", **extra}
    (folder / lora.CONFIG_FILE).write_text(json.dumps(config))
    return folder


@pytest.fixture
def base(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(BASE))
    return folder


def test_adapters_are_copied_and_named_in_both_configs(tmp_path: Path, base: Path):
    a, b = adapter(tmp_path / "a"), adapter(tmp_path / "b")
    code = main(["--model_name", "m", "--hf_model_name", str(base), "--engine", "cpu", "-o", str(tmp_path / "repo"),
                 "--lora", f"alpha={a}", "--lora", f"beta={b}", "--max-loras", "1"])
    assert code == 0
    model = tmp_path / "repo" / "m"
    assert sorted(p.name for p in (model / "adapters" / "alpha").iterdir()) == [lora.CONFIG_FILE, lora.WEIGHTS_FILE]
    config = (model / "config.pbtxt").read_text()
    assert 'key: "lora_adapters" value: { string_value: "{\\"alpha\\": \\"adapters/alpha\\", \\"beta\\": ' in config
    assert 'key: "max_loras" value: { string_value: "1" }' in config
    assert '{ name: "lora_name" data_type: TYPE_STRING dims: [ 1 ] optional: true }' in config
    compiled = json.loads((model / "compile_config.json").read_text())
    assert compiled["lora_adapters"] == ["alpha", "beta"]
    params = {"lora_adapters": json.dumps({"alpha": "adapters/alpha", "beta": "adapters/beta"}), "max_loras": "1"}
    settings = BackendSettings.from_model_dir(model, params)
    assert settings.adapters == {"alpha": model / "adapters/alpha", "beta": model / "adapters/beta"}
    assert settings.max_loras == 1


@pytest.mark.parametrize(("make", "message"), [
    (lambda t: adapter(t / "x", rank=8), "differs from alpha .* share their rank and target modules"),
    (lambda t: adapter(t / "x", targets=("q_proj", "k_proj")), "differs from alpha"),
    (lambda t: adapter(t / "x", targets=("gate_proj",)), "target_modules must be among q_proj"),
    (lambda t: adapter(t / "x", base="org/other-model"), "trained on org/other-model, not on .*tiny"),
    (lambda t: adapter(t / "x", hidden=32), "maps 32 -> 32, the base model's 64 -> 64: an adapter of another"),
    (lambda t: adapter(t / "x", layers=3), "adapts layer 2, but the base model has 2 layers"),
    (lambda t: adapter(t / "x", use_dora=True), "use_dora is set"),
    (lambda t: t / "missing", "no adapter_config.json"),
])
def test_an_adapter_that_does_not_fit_the_base_is_refused_before_any_write(tmp_path: Path, base: Path, make,
                                                                           message: str):
    good, bad = adapter(tmp_path / "alpha"), make(tmp_path)
    with pytest.raises(RepoError, match=message):
        generate("m", tmp_path / "repo", hf_model_name=str(base), engine="cpu",
                 lora_adapters=[f"alpha={good}", f"beta={bad}"])
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize(("entries", "message"), [
    (["noequals"], "give NAME=PATH"), (["../x=/tmp"], "unsafe adapter name"), (["a=/x", "a=/y"], "given twice"),
])
def test_bad_lora_flags_are_named(tmp_path: Path, base: Path, entries: list[str], message: str):
    with pytest.raises(RepoError, match=message):
        generate("m", tmp_path / "repo", hf_model_name=str(base), lora_adapters=entries)


@pytest.mark.parametrize(("params", "message"), [
    ({"lora_adapters": "[1]"}, "must be a JSON object"),
    ({"lora_adapters": '{"a": "../elsewhere"}'}, "must be a path inside the model's folder"),
    ({"lora_adapters": '{"a": "/etc"}'}, "adapter folder '/etc' is not inside the model's folder"),
    ({"lora_adapters": '{"a": "adapters/a"}', "max_loras": "2"}, "max_loras must be an integer from 1 to 1"),
])
def test_the_backend_refuses_bad_adapter_parameters(tmp_path: Path, params: dict, message: str):
    with pytest.raises(SessionError, match=message):
        BackendSettings.from_model_dir(tmp_path, params)


def test_adapters_are_read_from_inside_the_models_folder_only(tmp_path: Path):
    """A folder named absolute is served when it is inside the model's folder; a link out of it is not."""
    (tmp_path / "adapters" / "a").mkdir(parents=True)
    (tmp_path / "adapters" / "out").symlink_to(tmp_path.parent)
    inside = json.dumps({"a": str(tmp_path / "adapters" / "a"), "b": "adapters/a"})
    settings = BackendSettings.from_model_dir(tmp_path, {"lora_adapters": inside})
    assert settings.adapters == {"a": tmp_path.resolve() / "adapters" / "a", "b": tmp_path.resolve() / "adapters" / "a"}
    with pytest.raises(SessionError, match="adapter folder 'adapters/out' is not inside the model's folder"):
        BackendSettings.from_model_dir(tmp_path, {"lora_adapters": '{"a": "adapters/out"}'})


def test_a_model_without_adapters_writes_no_adapter_parameters(tmp_path: Path, base: Path):
    spec, model = generate("m", tmp_path / "repo", hf_model_name=str(base), engine="cpu")
    assert "lora_adapters" not in (model / "config.pbtxt").read_text()
    assert not (model / "adapters").exists() and spec.adapters == {}
