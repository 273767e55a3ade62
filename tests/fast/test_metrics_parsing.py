"""Metrics without a server: what the engine tells its meter, pages parsed by prometheus_client's parser, the
figures between two scrapes, where each kind of server keeps its metrics, and qaic-util's output as Qualcomm's
documentation shows it."""

from __future__ import annotations

import itertools
import types

import pytest
from transformers import AutoTokenizer

from backend_model.engine.loop import Engine
from backend_model.engine.metrics import Recorder, engine_gauges, publish
from backend_model.engine.sampling import SamplingParams
from backend_model.models import prepare_embedded
from console.bench.engine import ZeroCostSession, digit_tokens
from console.core.adapters import adapter_for
from console.metrics import MetricsError, Scrape, Window, metrics_endpoint, rows, window
from console.metrics.qaic import card_line, nsp_in_use, parse, power_w, query
from console.metrics.watch import locate

TRITON_PAGE = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{{model="m",version="1"}} {requests}
nv_inference_request_success{{model="other",version="1"}} 7
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{{model="m",version="1"}} {queue_us}
# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration in microseconds
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{{model="m",version="1"}} {compute_us}
# HELP qaic_generation_tokens_total Tokens generated.
# TYPE qaic_generation_tokens_total counter
qaic_generation_tokens_total{{model="m",version="1"}} {tokens}
# HELP qaic_decode_step_sequences_total Sequences decoded, summed over the decode steps.
# TYPE qaic_decode_step_sequences_total counter
qaic_decode_step_sequences_total{{model="m",version="1"}} {rows}
# HELP qaic_request_success_total Sequences that ended normally, by finished_reason.
# TYPE qaic_request_success_total counter
qaic_request_success_total{{finished_reason="eos",model="m",version="1"}} 3
qaic_request_success_total{{finished_reason="length",model="m",version="1"}} 4
# HELP qaic_num_requests_running Sequences in the engine's slots.
# TYPE qaic_num_requests_running gauge
qaic_num_requests_running{{model="m",version="1"}} {running}
# HELP qaic_slots Slots.
# TYPE qaic_slots gauge
qaic_slots{{model="m",version="1"}} 8
# HELP qaic_decode_step_seconds One decode step.
# TYPE qaic_decode_step_seconds histogram
qaic_decode_step_seconds_count{{model="m",version="1"}} {steps}
qaic_decode_step_seconds_sum{{model="m",version="1"}} {step_s}
qaic_decode_step_seconds_bucket{{model="m",version="1",le="0.01"}} 0
qaic_decode_step_seconds_bucket{{model="m",version="1",le="+Inf"}} {steps}
"""


def triton_page(at: float, **values: float) -> Scrape:
    base = dict(requests=0, queue_us=0, compute_us=0, tokens=0, rows=0, running=0, steps=0, step_s=0.0)
    return Scrape.parse(TRITON_PAGE.format(**{**base, **values}), "http://h:8002/metrics", at=at)


def test_a_page_reads_by_family_and_model_summed_over_other_labels() -> None:
    page = triton_page(1.0, requests=5, tokens=40, steps=10, step_s=0.25)
    assert page.models() == ["m", "other"]
    assert page.value("nv_inference_request_success", "m") == 5 and page.value("nv_inference_request_success",
                                                                               "other") == 7
    assert page.value("qaic_request_success", "m") == 7  # eos and length together
    assert page.histogram("qaic_decode_step_seconds", "m") == (0.25, 10)
    assert "qaic_generation_tokens_total" in page.names and "nv_inference_request_success" in page.names
    with pytest.raises(MetricsError, match="not Prometheus metrics text"):
        Scrape.parse("this is { not a page", "u")


def test_figures_between_two_scrapes_are_rates_means_and_per_request_times() -> None:
    before = triton_page(10.0, requests=2, queue_us=1000, compute_us=4000, tokens=20, rows=12, steps=4, step_s=0.1)
    after = triton_page(12.0, requests=6, queue_us=9000, compute_us=8000, tokens=60, rows=44, running=4, steps=12,
                        step_s=0.5)
    figures = Window(before, after, "m").figures()
    assert figures.seconds == 2.0 and figures.at == 12.0
    assert figures["requests_per_s"] == 2.0 and figures["tokens_per_s"] == 20.0
    assert figures["triton_queue_ms"] == 2.0 and figures["triton_compute_ms"] == 1.0  # (8000 us / 4 requests)
    assert figures["decode_step_ms"] == pytest.approx(50.0)  # 0.4 s over 8 steps
    assert figures["tokens_per_step"] == 4.0 and figures["mean_occupancy"] == 0.5
    assert figures.occupancy == 0.5 and figures["ttft_ms"] is None  # no such histogram on the page
    assert rows([figures])[0] == ["m", "2.0", "20.0", "4/8", "-", "2.0", "1.0", "-", "-", "-", "50.0"]
    later = triton_page(14.0, requests=1, tokens=5, steps=2, step_s=0.05)
    restarted = Window(after, later, "m").figures()  # counters went back: no figures rather than wrong ones
    assert restarted["requests_per_s"] is None and restarted["decode_step_ms"] is None
    lifetime = window(None, after)[0]  # one scrape: means since the start, no rates
    assert lifetime["requests_per_s"] is None and lifetime["decode_step_ms"] == pytest.approx(500 / 12)


def test_a_vllm_page_gives_the_same_figures_by_vllms_names() -> None:
    def page(at: float, tokens: float, ok: float, ttft_sum: float, ttft_count: float) -> Scrape:
        return Scrape.parse(f"""\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="llama"}} 3.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{model_name="llama"}} {tokens}
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{{finished_reason="stop",model_name="llama"}} {ok}
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{{model_name="llama"}} {ttft_sum}
vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="llama"}} {ttft_count}
vllm:time_to_first_token_seconds_count{{model_name="llama"}} {ttft_count}
""", at=at)

    figures = Window(page(0.0, 100, 2, 0.2, 2), page(4.0, 500, 6, 1.0, 6), "llama").figures()
    assert figures["tokens_per_s"] == 100.0 and figures["requests_per_s"] == 1.0
    assert figures["ttft_ms"] == pytest.approx(200.0) and figures["running"] == 3.0


def test_each_kind_of_server_says_where_its_metrics_are() -> None:
    triton = adapter_for("10.0.0.5:8000", grpc_url="10.0.0.5:8001")
    url, how = locate(triton)
    assert url == "http://10.0.0.5:8002/metrics" and "HTTP port + 2" in how and "--metrics-url" in how
    assert locate(triton, give="type it in the field")[1].endswith(": type it in the field if it is elsewhere")
    assert "--metrics-url" not in triton.metrics()[1], "a console says where to give it: its field, or the flag"
    given = adapter_for("10.0.0.5:8000", grpc_url="10.0.0.5:8001", metrics_url="10.0.0.5:9100")
    assert given.metrics() == ("http://10.0.0.5:9100/metrics", "")
    openai = adapter_for("http://10.0.0.5:8080/v1")
    assert openai.metrics()[0] == "http://10.0.0.5:8080/metrics"
    assert metrics_endpoint("https://h:1/custom/path") == "https://h:1/custom/path"
    assert metrics_endpoint(" h:1 ") == "http://h:1/metrics"


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))


def test_the_engine_tells_its_recorder_every_token_step_and_ending(tokenizer) -> None:
    from backend_model.sessions.protocol import Dims

    dims = Dims(batch_size=1, prefill_seq_len=4, ctx_len=128, vocab=len(tokenizer), full_batch_size=3)
    engine = Engine(ZeroCostSession(dims, digit_tokens(tokenizer)), tokenizer)
    engine.meter = recorder = Recorder()
    prompts = ["one two three four five six", "seven", "eight nine"]
    seqs = engine.generate(prompts, SamplingParams(max_tokens=5, ignore_eos=True))
    cancelled = engine.submit(engine.encode("ten"), SamplingParams(max_tokens=50))
    engine.cancel(cancelled)
    while not cancelled.finished:
        engine.step()
    counts, observed = recorder.take()
    assert counts[("qaic_prompt_tokens_total", "")] == sum(len(s.prompt_ids) for s in seqs)
    assert counts[("qaic_generation_tokens_total", "")] == 15
    assert counts[("qaic_decode_step_sequences_total", "")] == 12  # the first token of each comes from its prefill
    assert counts[("qaic_request_success_total", "length")] == 3 and counts[("qaic_request_cancelled_total", "")] == 1
    names = [name for name, _ in observed]
    assert names.count("qaic_time_to_first_token_seconds") == 3 and names.count("qaic_request_queue_time_seconds") == 3
    assert names.count("qaic_time_per_output_token_seconds") == 3
    assert names.count("qaic_prefill_chunk_seconds") == sum(-(-len(s.prompt_ids) // 4) for s in seqs)  # chunks of 4
    assert names.count("qaic_decode_step_seconds") == 4
    assert recorder.take() == ({}, [])  # handed over once
    gauges = engine_gauges(engine)
    assert gauges["qaic_slots"] == 3 and gauges["qaic_num_requests_running"] == 0 and gauges[
        "qaic_kv_cache_usage_perc"] == 0


def test_a_first_token_is_timed_when_its_own_prefill_ends(tokenizer) -> None:
    from backend_model.sessions.protocol import Dims

    dims = Dims(batch_size=1, prefill_seq_len=4, ctx_len=128, vocab=len(tokenizer), full_batch_size=3)
    engine = Engine(ZeroCostSession(dims, digit_tokens(tokenizer)), tokenizer)
    ticks = itertools.count()
    engine.meter = recorder = Recorder(clock=lambda: float(next(ticks)))  # every reading a tick later
    prompts = ["one two three four five six", "seven", "eight nine"]  # prefilled one by one, in this order
    seqs = engine.generate(prompts, SamplingParams(max_tokens=1, ignore_eos=True))  # each ends with its first token
    counts, observed = recorder.take()
    ttfts = [seconds for name, seconds in observed if name == "qaic_time_to_first_token_seconds"]
    left = [arrived + ttft for arrived, ttft in zip((0.0, 1.0, 2.0), ttfts)]  # queued at the first three ticks
    assert len(ttfts) == 3 and left == sorted(set(left)), "each first token leaves before the next prefill"
    assert counts[("qaic_request_success_total", "length")] == 3 and counts[("qaic_generation_tokens_total", "")] == 3
    assert counts[("qaic_prompt_tokens_total", "")] == sum(len(s.prompt_ids) for s in seqs)
    assert "qaic_time_per_output_token_seconds" not in {name for name, _ in observed}
    assert not recorder._arrived and not recorder._first, "nothing is kept for a sequence that ended"


def test_a_triton_without_the_metrics_api_serves_without_metrics_and_says_so_once() -> None:
    said: list[tuple[str, str]] = []
    engine = types.SimpleNamespace(meter=None)
    assert publish(types.SimpleNamespace(), engine, {"model": "m"}, lambda level, text: said.append((level, text))) \
        is None
    assert engine.meter is None and len(said) == 1 and "no custom metrics API" in said[0][1]


# Qualcomm's Cloud AI SDK documentation (System Management: Health, SoC Reset) shows qaic-util -q's layout with these
# lines; it shows no telemetry line. The Nsp lines below are the ones Qualcomm's own sample scripts grep for.
DOCUMENTED = """\
QID 0
        Status:Ready
        MHI ID:0
        PCI Address:0000:2d:00.0
QID 1
        Status:Ready
        MHI ID:1
QID 2
        Status:Error
"""


def test_qaic_util_output_as_documented_is_read_per_device() -> None:
    devices = parse("some banner\n" + DOCUMENTED)
    assert [(d.qid, d.status) for d in devices] == [(0, "Ready"), (1, "Ready"), (2, "Error")]
    assert devices[0].fields["PCI Address"] == "0000:2d:00.0" and devices[1].fields["MHI ID"] == "1"
    assert power_w(devices[0]) is None and nsp_in_use(devices[0]) is None  # nothing is made up
    scripted = parse("QID 0\n\tStatus:Ready\n\tNsp Total:16\n\tNsp Free:12\n")[0]
    assert nsp_in_use(scripted) == 0.25
    assert card_line([scripted], "qaic-util -q") == "QID 0 Ready · NSPs 25% (qaic-util -q)"


def test_without_qaic_util_the_card_is_said_absent() -> None:
    devices, note = query()
    assert devices == [] and note == "no card: qaic-util not found (on PATH or at /opt/qti-aic/tools/qaic-util)"
    assert card_line(devices, note) == note


def test_the_wait_before_a_prefill_is_split_into_slot_wait_and_step_wait(tokenizer) -> None:
    """Waiting for a slot (all taken) is told apart from waiting, a slot free, for the engine's current step."""
    from backend_model.sessions.protocol import Dims

    dims = Dims(batch_size=1, prefill_seq_len=4, ctx_len=64, vocab=len(tokenizer), full_batch_size=2)
    now = [0.0]

    class Timed(ZeroCostSession):
        def run(self, inputs):  # every run on the session takes one second
            now[0] += 1.0
            return super().run(inputs)

    engine = Engine(Timed(dims, digit_tokens(tokenizer)), tokenizer)
    engine.meter = recorder = Recorder(clock=lambda: now[0])
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    seqs = [engine.submit([100, 101, 102], params) for _ in range(3)]  # two slots: the third waits for one
    while not all(s.finished for s in seqs):
        engine.step()
    _, observed = recorder.take()
    waits = {name: [s for n, s in observed if n == name] for name in (
        "qaic_request_queue_time_seconds", "qaic_request_slot_wait_seconds", "qaic_request_step_wait_seconds")}
    # the first: admitted at once; the second: a slot free, it waits for the first's prefill (1 s); the third waits
    # for a slot until the first ends (its prefill, then a decode step: 3 s), then none for the engine
    assert waits["qaic_request_slot_wait_seconds"] == [0.0, 0.0, 3.0]
    assert waits["qaic_request_step_wait_seconds"] == [0.0, 1.0, 0.0]
    assert waits["qaic_request_queue_time_seconds"] == [0.0, 1.0, 3.0]
    assert not recorder._free, "nothing is kept for a sequence admitted"
