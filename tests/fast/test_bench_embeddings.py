"""``bench --endpoint embeddings`` on the fake server (a Triton embedding model at the adapter seam) and the front on a
fake upstream (an OpenAI-compatible ``/v1/embeddings``): the sweep, its figures, the side-by-side ratios and the
exports; the batch sizes read from Triton's counters."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from fake_server import FakeServer, embedding_info, fake_tokens
from fake_upstream import FakeUpstream, front_on
from helpers import assert_one_line_error, cli

from console.bench.server_view import batch_size
from console.metrics import Scrape
from console.metrics.figures import Window

SWEEP = ("--concurrency", "1,2", "--requests", "4", "--warmup", "1", "--input-tokens-mean", "6", "--plots", "html")


def test_a_sweep_sends_batches_of_texts_and_reports_inputs_per_second(fake_server: FakeServer, tmp_path: Path) -> None:
    fake_server.serve(embedding_info("minilm", batch=8))
    result = cli("bench", "--endpoint", "embeddings", "--batch-size", "3", "--url", fake_server.url, *SWEEP,
                 "-o", str(tmp_path), "--json", "-q")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["config"]["endpoint"] == "embeddings" and body["config"]["batch_size"] == 3
    sent = fake_server.embedded
    assert len(sent) == 1 + 1 + 4 + 4  # the probe, the warm-up, two levels of four requests
    assert all(model == "minilm" and len(texts) == 3 for model, texts in sent[1:])
    assert len({text for _, texts in sent[1:] for text in texts}) > 3  # synthetic texts, not one repeated
    for level, concurrency in zip(body["levels"], (1, 2)):
        assert (level["concurrency"], level["request_count"], level["error_count"]) == (concurrency, 4, 0)
        assert level["inputs_per_request"] == 3
        assert level["input_throughput"]["avg"] == pytest.approx(3 * level["request_throughput"]["avg"], rel=1e-3)
        assert {"avg", "p50", "p90", "p99"} <= set(level["request_latency"])
        assert not {"time_to_first_token", "output_token_throughput", "output_sequence_length"} & set(level)
    texts = sent[-1][1]
    assert body["levels"][-1]["input_sequence_length"]["max"] >= sum(fake_tokens(t) for t in texts)
    summary = list(csv.DictReader((tmp_path / "bench_summary.csv").open()))
    assert [row["input_throughput"] for row in summary] == [str(lv["input_throughput"]["avg"]) for lv in body["levels"]]
    page = (tmp_path / "bench.html").read_text()
    assert "embeddings, 3 texts a request" in page and "inputs/s" in page and "out tok/s" not in page


def test_compare_url_puts_an_openai_server_beside_with_ratios(fake_server: FakeServer, tmp_path: Path) -> None:
    fake_server.serve(embedding_info("minilm"))
    upstream = FakeUpstream(embedding_info("minilm"))
    with front_on(upstream) as front:
        result = cli("bench", "--endpoint", "embeddings", "--batch-size", "2", "--url", fake_server.url,
                     "--compare-url", front.base_url, *SWEEP, "--plots", "none", "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert len(upstream.embedded) == 1 + 1 + 4 + 4 and all(len(items) == 2 for items in upstream.embedded[1:])
    document = json.loads((tmp_path / "bench.json").read_text())
    names = [t["name"] for t in document["targets"]]
    assert [t["api"] for t in document["targets"]] == ["fake", "openai"]
    rows = {(r["level"], r["metric"]): r for r in document["comparison"]}
    throughput = rows[("c=2", "inputs/s")]
    ours, theirs = (next(lv for lv in t["levels"] if lv["concurrency"] == 2)["input_throughput"]["avg"]
                    for t in document["targets"])
    assert throughput["values"] == [ours, theirs] and throughput["ratios"][1] == round(theirs / ours, 3)
    assert ("c=1", "latency p99 ms") in rows and not any(m == "TTFT avg ms" for _, m in rows)
    assert f"side by side (ratios to {names[0]})" in result.stdout and "inputs/s" in result.stdout
    comparison = (tmp_path / "bench_comparison.csv").read_text().splitlines()
    assert comparison[0].startswith("level,metric") and any(",inputs/s," in line for line in comparison)


def test_bad_embeddings_runs_fail_before_any_load(fake_server: FakeServer) -> None:
    fake_server.serve(embedding_info("minilm"), embedding_info("other"))
    url = fake_server.url
    assert_one_line_error(cli("bench", "--endpoint", "embeddings", "--url", url, "--model", "smollm2_kv"),
                          "not an embedding model")
    assert_one_line_error(cli("bench", "--endpoint", "embeddings", "--url", url, "--turns", "2"), "--turns")
    assert_one_line_error(cli("bench", "--endpoint", "embeddings", "--url", url, "--batch-size", "0"),
                          "--batch-size must be >= 1")
    assert_one_line_error(cli("bench", "--url", url, "--batch-size", "4"), "--endpoint embeddings")
    assert_one_line_error(cli("bench", "--endpoint", "embeddings"), "needs --url")
    assert fake_server.embedded == []


PAGE = """# TYPE nv_inference_count counter
nv_inference_count{{model="minilm",version="1"}} {count}
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{{model="minilm",version="1"}} {runs}
"""


def test_the_batch_size_is_the_inputs_over_the_executions_triton_counted() -> None:
    before, after = (Scrape.parse(PAGE.format(count=c, runs=r), "http://h:8002/metrics") for c, r in ((10, 10),
                                                                                                       (58, 22)))
    assert batch_size(Window(before, after, "minilm")) == pytest.approx(4.0)
    assert batch_size(Window(after, after, "minilm")) is None  # nothing ran
    assert batch_size(Window(before, after, "other")) is None  # not this model's counters
