"""``eval embeddings`` on the fake server (a Triton embedding model at the adapter seam) and the front on a fake
upstream (an OpenAI-compatible server): the figures (cosine, top-1, Spearman) on vectors made to differ, the report,
and the golden record and compare."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from fake_server import FakeServer, embedding_info, fake_vector
from fake_upstream import FakeUpstream, front_on
from helpers import cli

from console.eval.embeddings import TEXTS, TextSet, compare, read_texts, spearman

SET = TextSet(["alpha", "beta"], ["q1", "q2"], ["d1", "d2", "d3"])


def test_the_figures_see_a_turned_vector_and_a_swapped_ranking() -> None:
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(len(SET.inputs), 8)).astype(np.float32)
    queries, documents = slice(2, 4), slice(4, 7)
    reference[queries] = reference[documents][[0, 1]] + 0.01  # q1 finds d1, q2 finds d2
    candidate = reference.copy()
    assert compare(SET, reference, candidate)["min_cosine"] == pytest.approx(1.0)
    candidate[1] = -reference[1]  # "beta" points the other way
    candidate[3] = reference[4] + 0.01  # q2 now finds d1
    got = compare(SET, reference, candidate)
    assert (got["min_cosine"], got["min_cosine_input"]) == (pytest.approx(-1.0), "beta")
    assert got["mean_cosine"] == pytest.approx((5 * 1.0 - 1.0 + got["cosines"][3]) / 7, abs=1e-5)
    assert got["top1_agreement"] == 0.5 and got["spearman"] < 1.0
    assert spearman(np.array([0, 1, 2]), np.array([2, 1, 0])) == -1.0
    with pytest.raises(ValueError, match="8 and 4 dimensions"):
        compare(SET, reference, reference[:, :4])


def test_the_shipped_set_reads_and_bad_sets_are_named(tmp_path: Path) -> None:
    shipped = read_texts(TEXTS)
    assert len(shipped.texts) >= 8 and len(shipped.queries) >= 4 and len(shipped.documents) > len(shipped.queries)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"texts": ["a", ""], "queries": [], "documents": []}))
    with pytest.raises(ValueError, match="'texts' must be a list of non-empty strings"):
        read_texts(bad)
    bad.write_text(json.dumps({"texts": [], "queries": ["q"], "documents": ["d"]}))
    with pytest.raises(ValueError, match="at least two documents"):
        read_texts(bad)


def test_a_served_model_against_an_openai_server_writes_the_report(fake_server: FakeServer, tmp_path: Path) -> None:
    fake_server.serve(embedding_info("minilm"))
    upstream = FakeUpstream(embedding_info("minilm"))
    with front_on(upstream) as front:
        result = cli("eval", "embeddings", "--reference", f"minilm@{fake_server.url}", "--candidate",
                     f"minilm@{front.base_url}", "-o", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    inputs = read_texts(TEXTS).inputs
    assert fake_server.embedded[1:] == [("minilm", inputs)] and upstream.embedded[1:] == [inputs]
    rows = list(csv.DictReader((tmp_path / "eval_embeddings.csv").open()))
    assert [r["kind"] for r in rows] == ["served", "served"]
    assert float(rows[1]["min_cosine"]) == pytest.approx(1.0) and float(rows[1]["top1_agreement"]) == 1.0
    assert float(rows[1]["spearman"]) == 1.0 and rows[1]["dimension"] == "8"
    document = json.loads((tmp_path / "eval_embeddings.json").read_text())
    assert document["reference"] == f"minilm@{fake_server.url}" and "vectors" not in document["paths"][
        document["reference"]]
    assert "mean cosine" in result.stdout and "top-1" in result.stdout


def test_record_then_compare_gates_on_the_recorded_vectors(fake_server: FakeServer, tmp_path: Path) -> None:
    fake_server.serve(embedding_info("minilm"))
    golden, spec = tmp_path / "golden.json", f"minilm@{fake_server.url}"
    assert cli("eval", "embeddings", "record", "--path", spec, "-o", str(golden), "-q").exit_code == 0
    data = json.loads(golden.read_text())
    first = read_texts(TEXTS).inputs[0]
    assert data["paths"][spec]["vectors"][0] == pytest.approx(fake_vector(first), abs=1e-6)
    passed = cli("eval", "embeddings", "compare", str(golden), "--candidate", spec, "-q")
    assert passed.exit_code == 0 and f"pass {spec}: min cosine 1.000000" in passed.stdout, passed.output
    data["paths"][spec]["vectors"][0] = [-v for v in data["paths"][spec]["vectors"][0]]  # the recording differs
    golden.write_text(json.dumps(data))
    failed = cli("eval", "embeddings", "compare", str(golden), "--candidate", spec, "-q")
    assert failed.exit_code == 1 and f"FAIL {spec}: min cosine -1.000000" in failed.stdout


def eval_error(*args: str) -> str:
    """The one error line of an eval that refused its input (exit code 2)."""
    result = cli("eval", "embeddings", *args, "-q")
    assert result.exit_code == 2 and result.output.count("\n") == 1 and result.output.startswith("error: "), \
        result.output
    return result.output


def test_bad_paths_and_files_are_one_error_line(fake_server: FakeServer, tmp_path: Path) -> None:
    fake_server.serve(embedding_info("minilm"))
    spec = f"minilm@{fake_server.url}"
    assert "'twin' is no embedding path" in eval_error("--reference", spec, "--candidate", "twin")
    assert "not an embedding model" in eval_error("--reference", spec, "--candidate", f"smollm2_kv@{fake_server.url}")
    not_golden = tmp_path / "x.json"
    not_golden.write_text("{}")
    assert "is not a qaic-console embeddings record" in eval_error("compare", str(not_golden), "--candidate", spec)
    assert [texts for _, texts in fake_server.embedded] == [["probe"]]  # the reference's, before the candidate's
