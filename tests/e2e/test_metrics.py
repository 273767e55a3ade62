"""The backend's metrics on a real tritonserver's metrics port, read back by ``qaic-console metrics``, every bench
level and the Grafana dashboard: the page as ``curl`` gets it, and values that move with the load (each test
polls until a counter moved, never a clock)."""

from __future__ import annotations

import csv
import json
import queue
import re
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from click.testing import CliRunner
from helpers import wait_until

from backend_model.engine.metrics import METRICS
from console.cli import main
from console.metrics import Scrape, Window, scrape
from console.server import free_port
from console.server.ports import port_in_use

pytestmark = pytest.mark.server
ROOT = Path(__file__).resolve().parents[2]
STREAM, BATCH = "smollm2_decoupled", "smollm2_kv"
WAIT = 60.0


def page(server) -> str:
    """The metrics page as ``curl http://host:port/metrics`` prints it."""
    with urllib.request.urlopen(server.handle.metrics_url, timeout=10) as response:
        return response.read().decode()


def window(server, before: Scrape, model: str) -> Window:
    return Window(before, scrape(server.handle.metrics_url), model)


def infer(server, prompts: list[str], max_tokens: int) -> dict[str, list[int]]:
    """One HTTP request to the batch model: the input and output token counts it reports."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300)
    try:
        prompt = httpclient.InferInput("prompt", [len(prompts)], "BYTES")
        prompt.set_data_from_numpy(np.array([p.encode() for p in prompts], dtype=np.object_))
        limit = httpclient.InferInput("max_tokens", [1], "INT64")
        limit.set_data_from_numpy(np.array([max_tokens], dtype=np.int64))
        result = client.infer(BATCH, [prompt, limit])
        return {name: result.as_numpy(name).tolist() for name in ("input_tokens", "output_tokens")}
    finally:
        client.close()


# a model without LoRA adapters publishes no adapter series (tests/e2e/test_generated_served.py reads them live)
SERVED = [spec for spec in METRICS if spec.name not in ("qaic_lora_requests_total", "qaic_max_loras")]


def test_the_metrics_port_lists_the_backends_metrics_with_help_and_type_lines(embedded_server) -> None:
    text = page(embedded_server)
    lines = set(text.splitlines())
    for spec in SERVED:
        assert f"# HELP {spec.name} {spec.help}" in lines, spec.name
        assert f"# TYPE {spec.name} {spec.kind.lower()}" in lines, spec.name
    for model in (STREAM, BATCH):  # each served model has its series, labelled like Triton's own, and its instance
        assert f'qaic_slots{{instance="0",model="{model}",version="1"}} 8' in lines
        assert f'nv_inference_request_success{{model="{model}",version="1"}}' in text


def test_counts_and_timings_move_with_the_load_and_match_what_the_model_answered(embedded_server) -> None:
    before = scrape(embedded_server.handle.metrics_url)
    answered = infer(embedded_server, ["My name is", "The capital of France is"], max_tokens=6)
    prompts, generated = sum(answered["input_tokens"]), sum(answered["output_tokens"])

    def moved() -> bool:
        return (window(embedded_server, before, BATCH).counter("qaic_request_success") or 0) >= 2

    wait_until(moved, WAIT, "the backend's counters to count the two sequences")
    now = window(embedded_server, before, BATCH)
    assert now.counter("qaic_prompt_tokens") == prompts
    assert now.counter("qaic_generation_tokens") == generated
    assert now.counter("nv_inference_request_success") == 1  # Triton counts the request, the backend its prompts
    for family, count in (("qaic_request_queue_time_seconds", 2), ("qaic_time_to_first_token_seconds", 2),
                          ("qaic_time_per_output_token_seconds", 2), ("qaic_prefill_chunk_seconds", 2)):
        total, observed = now.histogram(family)
        assert observed == count and total > 0, family
    slot, step = now.histogram("qaic_request_slot_wait_seconds"), now.histogram("qaic_request_step_wait_seconds")
    assert slot[1] == step[1] == 2 and step[0] > 0, "the second prompt waited for the first one's prefill"
    assert slot[0] + step[0] == pytest.approx(now.histogram("qaic_request_queue_time_seconds")[0])
    steps = now.histogram("qaic_decode_step_seconds")[1]
    assert steps >= max(answered["output_tokens"]) - 1  # one decode step per token after the first
    assert now.counter("qaic_decode_step_sequences") == generated - 2  # the first tokens come from the prefill
    figures = now.figures()
    assert figures["tokens_per_step"] == pytest.approx((generated - 2) / steps)
    assert figures["ttft_ms"] > 0 and figures["decode_step_ms"] > 0 and figures["triton_queue_ms"] is not None


def test_a_stream_shows_in_the_gauges_then_counts_as_cancelled_and_a_bad_request_as_rejected(embedded_server) -> None:
    before = scrape(embedded_server.handle.metrics_url)
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(embedded_server.grpc_url)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    prompt = grpcclient.InferInput("prompt", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([b"1, 2, 3, 4,"], dtype=np.object_))
    limit = grpcclient.InferInput("max_tokens", [1], "INT64")
    limit.set_data_from_numpy(np.array([2000], dtype=np.int64))
    client.async_stream_infer(STREAM, [prompt, limit], request_id="long")
    try:
        wait_until(lambda: (scrape(embedded_server.handle.metrics_url).value("qaic_num_requests_running", STREAM)
                            or 0) >= 1, WAIT, "the running gauge to show the stream")
        used = scrape(embedded_server.handle.metrics_url).value("qaic_kv_cache_used_positions", STREAM)
        assert used and used > 0
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    wait_until(lambda: window(embedded_server, before, STREAM).counter("qaic_request_cancelled") == 1, WAIT,
               "the cancelled counter")
    body = json.dumps({"prompt": "hi", "temperature": -1}).encode()
    request = urllib.request.Request(f"http://{embedded_server.http_url}/v2/models/{STREAM}/generate", data=body)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 400
    wait_until(lambda: window(embedded_server, before, STREAM).counter("qaic_request_rejected") == 1, WAIT,
               "the rejected counter")
    wait_until(lambda: scrape(embedded_server.handle.metrics_url).value("qaic_num_requests_running", STREAM) == 0,
               WAIT, "the running gauge back at 0")


def test_the_grafana_dashboard_names_only_metrics_the_server_exports(embedded_server) -> None:
    dashboard = json.loads((ROOT / "assets" / "grafana" / "qaic-console.json").read_text())
    exported = scrape(embedded_server.handle.metrics_url).names
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs.append(dashboard["templating"]["list"][1]["query"]["query"])
    assert len(exprs) > 10
    named = set()
    for expr in exprs:
        found = set(re.findall(r"\b(?:nv_inference|qaic)_\w+", expr))
        assert found, expr
        named |= found
    assert named <= exported, sorted(named - exported)
    assert {spec.name for spec in SERVED} <= {n.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
                                               for n in named}  # every backend metric has a panel


def test_the_metrics_command_prints_each_model_and_says_where_it_read(embedded_server) -> None:
    result = CliRunner().invoke(main, ["metrics", "--url", embedded_server.http_url, "--metrics-url",
                                       embedded_server.handle.metrics_url, "--interval", "0.3"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"metrics: {embedded_server.handle.metrics_url}"
    assert lines[1].split()[:5] == ["model", "req/s", "tok/s", "slots", "waiting"]
    for model in (STREAM, BATCH):  # idle over the window: no requests, every slot free
        row = next(line.split() for line in lines if line.startswith(f"{model} "))
        assert row[1:5] == ["0.0", "0.0", "0/8", "0"], row
    assert lines[-1] == "card: no card: qaic-util not found (on PATH or at /opt/qti-aic/tools/qaic-util)"
    guessed = CliRunner().invoke(main, ["metrics", "--url", embedded_server.http_url, "--interval", "0.3"])
    port = int(embedded_server.http_url.rsplit(":", 1)[1]) + 2
    if not port_in_use(port):  # the guess (Triton's layout) points at nothing here: said, with the way out
        assert guessed.exit_code == 1
        assert f"no metrics at http://127.0.0.1:{port}/metrics" in guessed.output
        assert "guessed at the HTTP port + 2" in guessed.output and "--metrics-url" in guessed.output


def test_every_bench_level_carries_the_servers_side(embedded_server, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["bench", "--url", embedded_server.grpc_url, "--metrics-url",
                                       embedded_server.handle.metrics_url, "--concurrency", "1,2", "--requests", "3",
                                       "--warmup", "1", "--input-tokens-mean", "8", "--output-tokens-mean", "6",
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "server side" in result.output and f"metrics: {embedded_server.handle.metrics_url}" in result.output
    document = json.loads((out / "bench.json").read_text())
    for level in document["levels"]:
        server = level["server"]
        # the server counted what the client received: the same tokens over the same wall time
        assert server["tokens_per_s"] == pytest.approx(level["output_token_throughput"]["avg"], rel=1e-3)
        assert server["ttft_ms"] > 0 and server["decode_step_ms"] > 0 and server["prefill_ms"] > 0
        assert 0 < server["mean_occupancy"] <= 1 and server["tokens_per_step"] >= 1
        parts = server["ttft_breakdown_ms"]
        assert parts["queue"] >= 0 and parts["prefill"] > 0 and parts["network"] >= 0
        assert sum(parts.values()) >= level["time_to_first_token"]["avg"] - 2e-3  # 3 parts, each rounded to 1e-3
        assert level["card"]["note"] == "no card: qaic-util not found (on PATH or at /opt/qti-aic/tools/qaic-util)"
        assert level["card"]["tokens_per_joule"] is None
    with (out / "bench_summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [float(r["server_tokens_per_s"]) for r in rows] == [lv["server"]["tokens_per_s"]
                                                               for lv in document["levels"]]
    assert (out / "ttft_breakdown.png").stat().st_size > 0
    page_text = (out / "bench.html").read_text()
    assert "<h3>Server side</h3>" in page_text and f"metrics: {embedded_server.handle.metrics_url}" in page_text


def test_a_bench_on_a_server_without_metrics_says_so(embedded_server, tmp_path: Path) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    result = CliRunner().invoke(main, ["bench", "--url", embedded_server.http_url, "--metrics-url", nowhere,
                                       "--mode", "batch", "--requests", "2", "--warmup", "0", "--output-tokens-mean",
                                       "3", "--plots", "none", "-o", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    level = json.loads(result.stdout)["levels"][0]
    assert level["server"] == {"note": f"no metrics at http://{nowhere}/metrics (connection refused)"}


def test_an_openai_server_without_a_metrics_page_is_said_to_have_none(embedded_server, llama_server) -> None:
    page_url = f"{llama_server.base_url.removesuffix('/v1')}/metrics"
    result = CliRunner().invoke(main, ["metrics", "--url", llama_server.base_url, "--interval", "0.2"])
    assert result.exit_code == 1
    assert f"error: no metrics at {page_url} (HTTP 404); guessed at /metrics beside /v1" in result.output
    run = CliRunner().invoke(main, ["bench", "--url", embedded_server.grpc_url, "--metrics-url",
                                    embedded_server.handle.metrics_url, "--compare-url", llama_server.base_url,
                                    "--requests", "2", "--warmup", "0", "--input-tokens-mean", "8",
                                    "--output-tokens-mean", "3", "--plots", "none", "-q", "--json", "-o",
                                    str(Path(llama_server.log).parent / "bench")])
    assert run.exit_code == 0, run.output
    ours, theirs = (target["levels"][0]["server"] for target in json.loads(run.stdout)["targets"])
    assert ours["ttft_ms"] > 0 and ours["note"] == f"metrics: {embedded_server.handle.metrics_url}"
    assert theirs == {"note": f"no metrics at {page_url} (HTTP 404)"}
