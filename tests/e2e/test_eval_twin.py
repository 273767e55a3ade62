"""``qaic-console eval`` on the card's twin: an exported QEfficient-style graph through the QAIC adapter on ONNX
Runtime, against the CPU engine at fp32: the same tokens, the same likelihood, no divergence (KL 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import cli

from repo_gen.onnx_export import export

PROMPTS = ["My name is", "def fibonacci(n):"]
CORPUS = "Four score and seven years ago our fathers brought forth on this continent a new nation.\n"  # < ctx_len


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("eval_twin")
    return export("embedded", folder, ctx_len=64, prefill_seq_len=8, full_batch_size=2, progress=lambda m: None).graph


def test_the_twin_is_the_cpu_engine(graph: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    result = cli("eval", "--reference", "cpu:fp32", "--candidate", f"twin:{graph}", "--prompts", str(prompts),
                 "--max-tokens", "10", "--corpus", str(corpus), "-o", str(tmp_path / "report"), "-q")
    assert result.exit_code == 0, result.output
    rows = {row["path"]: row for row in json.loads((tmp_path / "report" / "eval.json").read_text())["summary"]}
    twin = rows["twin"]
    assert twin["exact"] == len(PROMPTS) and twin["units"] == ["token"]
    assert twin["mean_nll"] == pytest.approx(rows["cpu-fp32"]["mean_nll"], abs=1e-3)
    assert twin["mean_kl"] < 1e-4
    assert twin["perplexity"] == pytest.approx(rows["cpu-fp32"]["perplexity"], rel=1e-4)  # the corpus fits its context
