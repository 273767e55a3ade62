"""Under load, every answer is the prompt's answer alone: the samples' precisions through a real tritonserver.

Hundreds of greedy requests with repeated prompts, all in flight together, against the embedded samples
at their precisions: int4 (``smollm2_decoupled`` over gRPC streams; ``smollm2_kv`` over HTTP infer, with
one or two prompts, and the generate endpoint) and fp32 (``smollm2_decoupled_fp32``: streams and the
generate endpoint with ``stream: false``). The reference is each prompt's answer alone, sent before the
load with nothing else running. None may be lost or doubled (one final response per stream request and
nothing after it, every generate id answered once) and every answer must equal its reference: whichever
rows shared its steps, how many, which slot it had, and whether it came by stream, batch or generate.
The causal samples run batch_size 1 (a row alone by construction) and recompute slowly: not loaded here.
"""

from __future__ import annotations

import itertools
import queue
from concurrent.futures import ThreadPoolExecutor

import pytest
from triton_wire import Stream, generate, http_infer, joined

from console.bench.engine import BENCH_PROMPTS

pytestmark = [pytest.mark.server, pytest.mark.slow]
PROMPTS = BENCH_PROMPTS[:8]  # eight lengths, each repeated many times
TOKENS = {"int4": 24, "fp32": 16}
STREAM_MODEL = {"int4": "smollm2_decoupled", "fp32": "smollm2_decoupled_fp32"}
BATCH_MODEL = "smollm2_kv"  # int4
STREAMS, STREAM_REQUESTS = 4, {"int4": 24, "fp32": 8}  # per gRPC stream
HTTP_REQUESTS, GENERATE_REQUESTS = 32, {"int4": 48, "fp32": 16}
WAIT = 900.0  # only a broken server waits this long


def prompt_cycle(start: int = 0):
    return itertools.islice(itertools.cycle(PROMPTS), start, None)


def alone(server, precision: str, prompt: str) -> str:
    stream = Stream(server)
    try:
        stream.send(STREAM_MODEL[precision], [prompt], "alone", max_tokens=TOKENS[precision])
        return joined(stream.collect(timeout=WAIT)["alone"])[0]
    finally:
        stream.close()


def run_streams(server, index: int) -> tuple[dict[str, tuple[str, str]], dict[str, list], list]:
    """One gRPC stream carrying int4 and fp32 requests at once: ({id: (precision, prompt)}, responses, extras)."""
    sent: dict[str, tuple[str, str]] = {}
    stream = Stream(server)
    try:
        prompts = prompt_cycle(index)
        for precision, count in STREAM_REQUESTS.items():
            for n in range(count):
                request_id = f"s{index}-{precision}-{n}"
                sent[request_id] = (precision, next(prompts))
                stream.send(STREAM_MODEL[precision], [sent[request_id][1]], request_id, max_tokens=TOKENS[precision])
        got = stream.collect(count=len(sent), timeout=WAIT)
    finally:
        stream.close()
    extras = []  # anything after the finals: a doubled response
    while True:
        try:
            extras.append(stream.events.get_nowait())
        except queue.Empty:
            return sent, got, extras


def run_http(server, n: int) -> tuple[list[str], list[str]]:
    """One HTTP infer on the int4 batch model: every other request carries two prompts."""
    prompts = list(itertools.islice(prompt_cycle(n), 1 + n % 2))
    result = http_infer(server, BATCH_MODEL, prompts, max_tokens=TOKENS["int4"], exclude_input_in_output=True)
    return prompts, [t.decode() for t in result["text_output"]]


def run_generate(server, precision: str, n: int) -> tuple[str, str, dict]:
    prompt = PROMPTS[n % len(PROMPTS)]
    model = BATCH_MODEL if precision == "int4" else STREAM_MODEL[precision]
    body = {"prompt": prompt, "id": f"g-{precision}-{n}", "max_tokens": TOKENS[precision],
            "exclude_input_in_output": True, "stream": False}
    return f"g-{precision}-{n}", prompt, generate(server, model, body)


def test_hundreds_of_mixed_requests_each_get_the_answer_of_their_prompt_alone(embedded_server) -> None:
    reference = {(precision, p): alone(embedded_server, precision, p) for precision in TOKENS for p in PROMPTS}
    assert len(set(reference.values())) == len(reference)  # the prompts' answers differ from each other
    with ThreadPoolExecutor(max_workers=40) as pool:
        streams = [pool.submit(run_streams, embedded_server, i) for i in range(STREAMS)]
        https = [pool.submit(run_http, embedded_server, n) for n in range(HTTP_REQUESTS)]
        generates = [pool.submit(run_generate, embedded_server, precision, n)
                     for precision, count in GENERATE_REQUESTS.items() for n in range(count)]
        wrong, answered = [], 0
        for future in streams:
            sent, got, extras = future.result(timeout=WAIT)
            assert extras == [] and set(got) == set(sent), "a stream request was lost, doubled or unknown"
            for request_id, responses in got.items():
                assert [final for _, final, _ in responses].count(True) == 1 and responses[-1][1], request_id
                assert all(error is None for _, _, error in responses), responses
                precision, prompt = sent[request_id]
                answered += 1
                if joined(responses)[0] != reference[precision, prompt]:
                    wrong.append(("stream", precision, prompt, joined(responses)[0]))
        for future in https:
            prompts, texts = future.result(timeout=WAIT)
            assert len(texts) == len(prompts)
            answered += len(prompts)
            wrong += [("http", "int4", p, t) for p, t in zip(prompts, texts) if t != reference["int4", p]]
        ids = []
        for future in generates:
            request_id, prompt, reply = future.result(timeout=WAIT)
            ids.append(reply["id"])
            precision = request_id.split("-")[1]
            answered += 1
            if reply["text_output"] != reference[precision, prompt]:
                wrong.append(("generate", precision, prompt, reply["text_output"]))
        assert sorted(ids) == sorted(f"g-{p}-{n}" for p, count in GENERATE_REQUESTS.items() for n in range(count))
    expected = (STREAMS * sum(STREAM_REQUESTS.values()) + HTTP_REQUESTS + HTTP_REQUESTS // 2
                + sum(GENERATE_REQUESTS.values()))
    assert answered == expected
    assert wrong == [], f"{len(wrong)} of {answered} answers differ from their prompt's answer alone: {wrong[:3]}"
