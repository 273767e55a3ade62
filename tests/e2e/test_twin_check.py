"""``qaic-console check``: exact greedy agreement of HF full recompute, the CPU KV engine and the ONNX twin."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner
from twin_data import PROMPTS, VOCAB

from backend_model.contract import specializations
from console.cli import main
from console.commands.twin import report
from console.twin.agreement import Agreement, Divergence


def run_check(*args: str):
    return CliRunner().invoke(main, ["check", *args])


@pytest.fixture(scope="module")
def perturbed(graphs, reference, tmp_path_factory):
    """The exported graph with one token's lm_head column zeroed: HF's 3rd token for PROMPTS[0]."""
    import onnx
    from onnx import numpy_helper

    expected = reference(PROMPTS[0])
    token = expected[2]
    assert token not in expected[:2]
    model = onnx.load(str(graphs["regular"] / "model.onnx"))
    (head,) = [i for i in model.graph.initializer if list(i.dims) == [576, VOCAB]]
    weights = numpy_helper.to_array(head).copy()
    weights[:, token] = 0.0
    head.CopyFrom(numpy_helper.from_array(weights, head.name))
    folder = tmp_path_factory.mktemp("perturbed")
    onnx.save(model, str(folder / "model.onnx"))
    shutil.copy(graphs["regular"] / specializations.FILE, folder)
    yield folder, token
    shutil.rmtree(folder, ignore_errors=True)


def test_check_matches_on_the_embedded_model(graphs, reference):
    prompts = [PROMPTS[0], f"{PROMPTS[1]} | x"]  # a typed "\|" is a literal "|"
    typed = "|".join(p.replace("|", "\\|") for p in prompts)
    result = run_check("--onnx", str(graphs["regular"]), "--prompt", typed, "--max-tokens", "8", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {"prompts", "paths", "match"} and out["match"] is True
    assert out["prompts"] == prompts and set(out["paths"]) == {"hf", "cpu_kv", "onnx"}
    assert out["paths"]["hf"] == [reference(p)[:8] for p in prompts]
    assert out["paths"]["cpu_kv"] == out["paths"]["onnx"] == out["paths"]["hf"]
    assert "onnx: " in result.stderr and "tokens/s" in result.stderr  # each path's speed, on stderr


def test_an_empty_prompt_is_refused_before_any_work():
    result = run_check("--prompt", "My name is|")
    assert result.exit_code == 2 and "error: prompt 2 of 2 is empty" in result.stderr


def test_a_perturbed_graph_reports_its_first_divergence(perturbed, reference):
    folder, token = perturbed
    prompts = [PROMPTS[2], PROMPTS[0]]
    result = run_check("--onnx", str(folder / "model.onnx"), "--prompt", "|".join(prompts), "--max-tokens", "6")
    assert result.exit_code == 1, result.output
    rows = result.stdout.splitlines()
    assert rows[0].split() == ["PROMPT", "TOKENS", "hf", "cpu_kv", "onnx"]
    assert re.fullmatch(rf"{re.escape(PROMPTS[2])}\s+6\s+ok\s+ok\s+ok", rows[1])
    assert re.fullmatch(rf"{re.escape(PROMPTS[0])}\s+6\s+ok\s+ok\s+differs at 2", rows[2])
    assert rows[-1].startswith(f"first divergence: prompt 1 ({PROMPTS[0]!r}), position 2: hf {token} ")
    assert ", onnx " in rows[-1] and not rows[-1].endswith("(ended)")
    assert reference(PROMPTS[0])[2] == token


def test_the_earliest_divergence_is_reported_with_early_ends_and_extra_tokens():
    agreement = Agreement(["a", "b"], {"hf": [[1, 2, 3], [4, 5, 6]], "cpu_kv": [[1, 2, 3], [4, 5]],
                                       "onnx": [[1, 2, 3], [4, 9, 6]]})
    assert agreement.first_divergence() == Divergence(1, 1, "onnx", 5, 9)
    assert agreement.divergence(1, "cpu_kv") == Divergence(1, 2, "cpu_kv", 6, None)
    assert not agreement.match
    agreement.paths["onnx"][1] = [4, 5, 6, 7]
    assert agreement.divergence(1, "onnx") == Divergence(1, 3, "onnx", None, 7)
    same = Agreement(["a"], {"hf": [[1, 2]], "cpu_kv": [[1, 2]], "onnx": [[1, 2]]})
    assert same.match and report(same).splitlines()[-1] == "match: hf, cpu_kv, onnx agree on every token"
