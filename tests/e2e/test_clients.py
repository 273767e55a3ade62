"""console.clients against a real tritonserver serving the embedded samples (no mocks)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from helpers import SERVER_START, wait_for_log

from console.clients import (
    Cancelled,
    ClientError,
    Failure,
    GenerationParams,
    IdleTimeout,
    NotServed,
    Refused,
    Reply,
    ServerFault,
    TextDelta,
    Timeout,
    Timeouts,
    Unreachable,
    generate,
    infer,
    model_info,
    stream,
)

PROMPTS = ["My name is", "Maroon bells"]
GREEDY16 = GenerationParams(max_tokens=16)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(call) -> tuple[list[TextDelta], list[Reply], Failure | None]:
    deltas, replies, failure = [], [], None
    for event in call:
        assert failure is None, "nothing may follow a Failure"
        if isinstance(event, TextDelta):
            assert not replies, "text after a reply"
            deltas.append(event)
        elif isinstance(event, Reply):
            replies.append(event)
        else:
            failure = event
    return deltas, replies, failure


# --------------------------------------------------------------------------- against the server


def test_model_info(embedded_server) -> None:
    kv = model_info(embedded_server.grpc_url, "smollm2_decoupled")
    assert kv.decoupled and kv.use_kv_cache and kv.embedded and kv.default_timeout == 600
    causal = model_info(embedded_server.http_url, "smollm2_causal", protocol="http")
    assert not causal.decoupled and not causal.use_kv_cache and causal.default_timeout == 6000
    with pytest.raises(ClientError) as info:
        model_info(embedded_server.http_url, "nope", protocol="http")
    assert isinstance(info.value, NotServed) and "nope" in str(info.value)


def test_stream_batch_and_generate_agree(embedded_server) -> None:
    deltas, streamed, failure = run(stream(embedded_server.grpc_url, "smollm2_decoupled", PROMPTS, GREEDY16))
    assert failure is None and [r.index for r in streamed] == [0, 1]
    for reply in streamed:
        mine = [d for d in deltas if d.index == reply.index]
        assert mine and mine[0].first and not any(d.first for d in mine[1:])
        assert "".join(d.text for d in mine) == reply.text
        assert reply.finish_reason == "length" and reply.stats.output_tokens == 16
        assert 0 < reply.stats.time_to_first_token <= reply.stats.request_latency
        assert reply.stats.inter_token_latency > 0 and reply.stats.output_token_throughput > 0
    texts = [r.text for r in streamed]
    assert all(texts)
    for call in (
        infer(embedded_server.http_url, "smollm2_kv", PROMPTS, GREEDY16),
        infer(embedded_server.grpc_url, "smollm2_kv", PROMPTS, GREEDY16, protocol="grpc"),
        generate(embedded_server.http_url, "smollm2_kv", PROMPTS, GREEDY16),
    ):
        deltas, replies, failure = run(call)
        assert failure is None and not deltas
        assert [r.text for r in replies] == texts
        assert all(r.stats.output_tokens == 16 and r.stats.time_to_first_token is None for r in replies)
        assert all(r.stats.request_latency > 0 and r.stats.output_token_throughput > 0 for r in replies)
    new_only = infer(embedded_server.http_url, "smollm2_kv", PROMPTS[:1], GenerationParams(max_tokens=16)).replies()
    assert new_only[0].text == texts[0]  # the backend echoes a batch answer unless told: the console always tells it


def test_causal_models_stream_and_batch(embedded_server) -> None:
    params = GenerationParams(max_tokens=6)
    streamed = stream(embedded_server.grpc_url, "smollm2_causal_decoupled", PROMPTS[:1], params).replies()
    batch = infer(embedded_server.http_url, "smollm2_causal", PROMPTS[:1],
                  GenerationParams(max_tokens=6)).replies()
    assert streamed[0].text == batch[0].text and streamed[0].stats.output_tokens == 6


@pytest.mark.parametrize("protocol", ["stream", "grpc"])
def test_timeout_cancels_on_the_server(embedded_server, protocol: str) -> None:
    rid = f"t-timeout-{protocol}"
    params = GenerationParams(max_tokens=400, request_id=rid)
    if protocol == "stream":
        call = stream(embedded_server.grpc_url, "smollm2_decoupled", PROMPTS[:1], params, Timeouts(network=0.3))
    else:
        call = infer(embedded_server.grpc_url, "smollm2_kv", PROMPTS[:1], params, Timeouts(network=0.3), "grpc")
    t0 = time.monotonic()
    _, replies, failure = run(call)
    assert not replies and failure is not None and failure.error is Timeout
    assert time.monotonic() - t0 < 5
    assert "network timeout" in failure.message and "0.3 s" in failure.message
    assert "cancelled on the server" in failure.message
    line = wait_for_log(embedded_server, f"request {rid} ")
    assert line is not None and "finish=cancelled" in line, line
    again = stream(embedded_server.grpc_url, "smollm2_decoupled", PROMPTS[:1], GenerationParams(max_tokens=4))
    assert again.replies()[0].stats.output_tokens == 4


def test_http_timeout_says_the_server_goes_on(embedded_server) -> None:
    params = GenerationParams(max_tokens=40, request_id="t-timeout-http")
    failure = run(infer(embedded_server.http_url, "smollm2_kv", PROMPTS[:1], params, Timeouts(network=0.2)))[2]
    assert failure is not None and failure.error is Timeout
    assert "0.2 s" in failure.message and "cannot cancel HTTP" in failure.message
    line = wait_for_log(embedded_server, "request t-timeout-http ", timeout=120)
    assert line is not None and "finish=length" in line  # Triton cannot cancel an HTTP request


def test_idle_timeout_and_cancel(embedded_server) -> None:
    params = GenerationParams(max_tokens=400, request_id="t-idle")
    call = stream(embedded_server.grpc_url, "smollm2_decoupled", PROMPTS[:1], params,
                  Timeouts(network=60, idle=0.01))  # the first response needs a prefill: longer than 10 ms
    failure = run(call)[2]
    assert failure is not None and failure.error is IdleTimeout
    assert "stream idle timeout" in failure.message and "0.01 s" in failure.message
    assert "finish=cancelled" in (wait_for_log(embedded_server, "request t-idle ") or "")

    call = stream(embedded_server.grpc_url, "smollm2_decoupled", PROMPTS, GenerationParams(max_tokens=400,
                  request_id="t-cancel"))
    seen = []
    for event in call:
        seen.append(event)
        if isinstance(event, TextDelta):
            call.cancel()  # a UI's stop key, here from the consuming thread
    assert isinstance(seen[-1], Failure) and seen[-1].error is Cancelled
    assert "finish=cancelled" in (wait_for_log(embedded_server, "request t-cancel ") or "")


def test_abandoned_iteration_cancels(embedded_server) -> None:
    call = stream(embedded_server.grpc_url, "smollm2_decoupled", PROMPTS[:1],
                  GenerationParams(max_tokens=400, request_id="t-abandon"))
    events = iter(call)
    assert isinstance(next(events), TextDelta)
    events.close()
    assert "finish=cancelled" in (wait_for_log(embedded_server, "request t-abandon ") or "")


def test_errors_are_failures(embedded_server) -> None:
    failure = run(stream(embedded_server.grpc_url, "nope", PROMPTS))[2]
    assert failure is not None and failure.error is NotServed and "nope" in failure.message
    failure = run(stream(embedded_server.grpc_url, "smollm2_decoupled", ["   "]))[2]
    assert failure is not None and failure.error is ServerFault and "empty" in failure.message
    # a decoupled model with a stream switch answers a batch call once (the generate endpoint, stream=false)
    _, replies, failure = run(infer(embedded_server.http_url, "smollm2_decoupled", PROMPTS[:1],
                                    GenerationParams(max_tokens=4)))
    assert failure is None and replies[0].finish_reason == "length" and replies[0].stats.time_to_first_token is None
    failure = run(generate(embedded_server.http_url, "smollm2_kv", ["   "]))[2]
    assert failure is not None and failure.error is Refused and "HTTP 400" in failure.message
    with pytest.raises(ClientError, match="no prompt"):
        stream(embedded_server.grpc_url, "smollm2_decoupled", [])


def test_unreachable_server() -> None:
    url = f"127.0.0.1:{closed_port()}"
    for call in (
        stream(url, "m", PROMPTS, timeouts=Timeouts(network=10)),
        infer(url, "m", PROMPTS, timeouts=Timeouts(network=10)),
        infer(url, "m", PROMPTS, timeouts=Timeouts(network=10), protocol="grpc"),
        generate(url, "m", PROMPTS, timeouts=Timeouts(network=10)),
    ):
        t0 = time.monotonic()
        failure = run(call)[2]
        assert failure is not None and failure.error is Unreachable, failure
        assert url in failure.message and time.monotonic() - t0 < 10
    with pytest.raises(ClientError) as info:
        model_info(url, "m")
    assert isinstance(info.value, Unreachable)


def test_server_dying_mid_stream(tmp_path: Path) -> None:
    from console.server import TritonServer
    from repo_gen.samples import write_samples

    write_samples(("smollm2_decoupled",), tmp_path)
    server = TritonServer(tmp_path)
    server.start(timeout=SERVER_START)
    try:
        call = stream(server.grpc_url, "smollm2_decoupled", PROMPTS, GenerationParams(max_tokens=400),
                      Timeouts(network=120, idle=30))
        events = []
        killed_at = None
        for event in call:
            events.append(event)
            if isinstance(event, TextDelta) and killed_at is None:
                server.stop(grace=0)
                killed_at = time.monotonic()
        assert killed_at is not None and time.monotonic() - killed_at < 30
        failure = events[-1]
        assert isinstance(failure, Failure) and failure.error is Unreachable, failure
        assert failure.message.startswith(f"lost the connection to tritonserver at {server.grpc_url}")
        assert not any(isinstance(e, Reply) for e in events)
    finally:
        server.stop(grace=0)


def test_each_prompt_of_a_stream_ends_at_its_own_last_token(embedded_server) -> None:
    quick = "<|im_start|>user\nReply with one word: yes.<|im_end|>\n<|im_start|>assistant\n"
    replies = stream(embedded_server.grpc_url, "smollm2_decoupled", [quick, "Once upon a time"],
                     GenerationParams(max_tokens=48)).replies()
    early, late = replies
    assert early.finish_reason == "eos" and late.finish_reason == "length", replies
    assert early.stats.output_tokens < late.stats.output_tokens
    assert early.stats.request_latency < late.stats.request_latency
    assert early.stats.output_token_throughput > early.stats.output_tokens / late.stats.request_latency
