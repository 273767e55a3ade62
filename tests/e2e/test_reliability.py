"""Reliability on a real tritonserver: load, cancellation, a killed server, and bad input.

Bounded by default (CI); ``QAIC_RELIABILITY_FULL=1`` runs the full sizes (200 requests, more
examples). Every wait is bounded by a client timeout or a deadline.
"""

from __future__ import annotations

import math
import os
import random
import signal
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from helpers import tritonserver_pid, wait_until
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from console.clients import (
    Call,
    Cancelled,
    Failure,
    GenerationParams,
    Reply,
    ServerFault,
    TextDelta,
    Timeout,
    Timeouts,
    Unreachable,
    infer,
    stream,
)
from console.server import TritonServer
from console.server.procs import group_members

pytestmark = pytest.mark.server
FULL = os.environ.get("QAIC_RELIABILITY_FULL") == "1"
LOAD_REQUESTS = 200 if FULL else 48
CLIENTS = 16
CANCELS = 20
EXAMPLES = 200 if FULL else 30
STREAM, BATCH = "smollm2_decoupled", "smollm2_kv"
TIMEOUTS = Timeouts(network=240, idle=120)
RSS_TOLERANCE_MB = 64  # per stub process, after a warm-up round
LONG_PROMPT = "Count from 1 to 1000: 1, 2, 3,"


def outcome(call: Call, stop_after: int | None = None) -> tuple[list[TextDelta], list[Reply], list[Failure]]:
    """All events of a call, checking their order: text, then one Reply per prompt or one Failure.

    ``stop_after``: cancel once that many text events came (0: before the request is sent).
    """
    deltas: list[TextDelta] = []
    replies: list[Reply] = []
    failures: list[Failure] = []
    if stop_after == 0:
        call.cancel()
    for event in call:
        assert not failures, f"an event after a Failure: {event}"
        if isinstance(event, TextDelta):
            assert not replies, "text after a reply"
            deltas.append(event)
            if stop_after is not None and len(deltas) == stop_after:
                call.cancel()
        elif isinstance(event, Reply):
            replies.append(event)
        else:
            failures.append(event)
    assert (len(failures) == 1 and not replies) or (not failures and len(replies) == len(call.prompts)), (
        f"not one final outcome: {len(replies)} replies, {len(failures)} failures"
    )
    assert [r.index for r in replies] in ([], list(range(len(call.prompts))))
    return deltas, replies, failures


def stub_rss_mb(server: TritonServer) -> dict[int, float]:
    """RSS (MB) of the server's Python backend stubs, found in its process group."""
    out = {}
    for pid in group_members(server.pid or 0):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if comm.startswith("triton_python"):
            kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            out[pid] = kb / 1024
    return out


def wait_for_lines(server: TritonServer, needles: Iterable[str], timeout: float = 60.0) -> dict[str, str]:
    """The log line of each needle (polling for at most ``timeout`` s); missing needles are absent."""
    wanted = set(needles)
    deadline = time.monotonic() + timeout
    found: dict[str, str] = {}
    while True:
        for line in server.log_tail(500):
            for needle in wanted - set(found):
                if needle in line:
                    found[needle] = line
        if len(found) == len(wanted) or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


# --------------------------------------------------------------------------- load


def load_call(server: TritonServer, i: int, tag: str) -> Call:
    """Request ``i`` of the mix: stream, batch over HTTP, batch over gRPC; one or two prompts."""
    prompts = [f"Tell me about number {i}."] + ([f"And {i + 1}?"] if i % 3 == 0 else [])
    params = GenerationParams(max_tokens=3 + i % 5, request_id=f"{tag}-{i}")
    kind = i % 4
    if kind in (0, 2):
        return stream(server.grpc_url, STREAM, prompts, params, TIMEOUTS)
    protocol = "http" if kind == 1 else "grpc"
    url = server.http_url if protocol == "http" else server.grpc_url
    return infer(url, BATCH, prompts, params, Timeouts(network=TIMEOUTS.network), protocol=protocol)


def run_load(server: TritonServer, count: int, tag: str) -> list[tuple[list[Reply], list[Failure]]]:
    def one(i: int) -> tuple[list[Reply], list[Failure]]:
        _, replies, failures = outcome(load_call(server, i, tag))
        return replies, failures

    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(one, range(count), timeout=TIMEOUTS.network + 60))


@pytest.mark.slow
def test_mixed_load_every_request_answered_once_and_memory_stable(embedded_server) -> None:
    run_load(embedded_server, CLIENTS, "warm")  # every stub allocates its working set first
    before = stub_rss_mb(embedded_server)
    assert len(before) >= 2, "no Python backend stubs found in the server's process group"
    results = run_load(embedded_server, LOAD_REQUESTS, "load")
    after = stub_rss_mb(embedded_server)
    failed = [f[0].message for _, f in results if f]
    assert not failed, failed[:3]
    assert all(r.finish_reason in ("length", "eos") and r.stats.output_tokens for replies, _ in results
               for r in replies)
    # the server saw each request exactly once (its one log line per finished request). A stub's log line reaches
    # tritonserver's output on its own path, after the reply may have: so the lines are awaited, then counted.
    if LOAD_REQUESTS <= 150:  # the full run's lines may scroll out of the kept tail
        lines = [f"request load-{i} " for i in range(LOAD_REQUESTS)]

        def missing() -> list[str]:
            log = "\n".join(embedded_server.log_tail(500))
            return [line for line in lines if line not in log]

        wait_until(lambda: not missing(), 30, "each request's log line", lambda: f"missing: {missing()}")
        log = "\n".join(embedded_server.log_tail(500))
        for line in lines:
            assert log.count(line) == 1, line
    for pid, mb in before.items():
        assert pid in after, f"stub {pid} is gone"
        assert after[pid] - mb <= max(RSS_TOLERANCE_MB, mb * 0.1), f"stub {pid}: {mb:.0f} -> {after[pid]:.0f} MB"


# --------------------------------------------------------------------------- cancel


def test_streams_cancelled_at_random_points_free_their_slots(embedded_server) -> None:
    rng = random.Random(20240917)
    points = [rng.randrange(0, 6) for _ in range(CANCELS)]

    def one(i: int) -> tuple[int, list[Failure], list[Reply]]:
        params = GenerationParams(max_tokens=200, request_id=f"cancel-{i}")
        deltas, replies, failures = outcome(stream(embedded_server.grpc_url, STREAM, [LONG_PROMPT], params,
                                                   TIMEOUTS), stop_after=points[i])
        return len(deltas), failures, replies

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(CANCELS), timeout=TIMEOUTS.network + 60))
    for i, (_, failures, replies) in enumerate(results):
        assert not replies and failures[0].error is Cancelled, (i, failures, replies)
    # later requests fill all 8 slots and complete
    with ThreadPoolExecutor(8) as pool:
        later = list(pool.map(lambda i: outcome(stream(embedded_server.grpc_url, STREAM, [f"Hello {i}"],
                                                       GenerationParams(max_tokens=4), TIMEOUTS)),
                              range(8), timeout=TIMEOUTS.network + 60))
    assert all(replies and replies[0].ok for _, replies, _ in later)
    # the server finished each cancelled request early and says so
    sent = [i for i in range(CANCELS) if points[i] > 0]  # cancelled before sending: the server may not see it
    assert sent
    lines = wait_for_lines(embedded_server, [f"request cancel-{i} " for i in sent])
    for i in sent:
        line = lines.get(f"request cancel-{i} ")
        assert line is not None and "finish=cancelled" in line, (i, line)
        assert int(line.split("output_tokens=")[1].split()[0]) < 200
    log = embedded_server.log_tail(500)
    unsent = [line for i in range(CANCELS) if points[i] == 0 for line in log if f"request cancel-{i} " in line]
    assert all("finish=cancelled" in line for line in unsent)


# --------------------------------------------------------------------------- faults


@pytest.mark.slow
def test_a_killed_server_fails_its_streams_quickly_and_a_new_one_starts(embedded_repo) -> None:
    def small_server() -> TritonServer:
        server = TritonServer(embedded_repo, models=(STREAM,))
        return server.start(timeout=300)

    server = small_server()
    timeouts = Timeouts(network=120, idle=60)
    started = [threading.Event() for _ in range(3)]
    results: list[tuple[float, list[Failure], list[Reply]] | None] = [None] * 3
    killed_at = [0.0]

    def one(k: int) -> None:
        deltas: list[TextDelta] = []
        replies: list[Reply] = []
        failures: list[Failure] = []
        for event in stream(server.grpc_url, STREAM, [LONG_PROMPT], GenerationParams(max_tokens=400), timeouts):
            if isinstance(event, TextDelta):
                deltas.append(event)
                started[k].set()
            elif isinstance(event, Reply):
                replies.append(event)
            else:
                failures.append(event)
        started[k].set()
        results[k] = (time.monotonic() - killed_at[0], failures, replies)

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(3)]
    try:
        for thread in threads:
            thread.start()
        assert all(event.wait(120) for event in started), "the streams did not start"
        killed_at[0] = time.monotonic()
        os.kill(tritonserver_pid(server), signal.SIGKILL)  # tritonserver itself, mid-stream
        for thread in threads:
            thread.join(timeouts.network + 30)
        assert not any(t.is_alive() for t in threads), "a client hangs after the server died"
        for result in results:
            assert result is not None
            after, failures, replies = result
            assert not replies and len(failures) == 1, result
            assert issubclass(failures[0].error, (Unreachable, ServerFault)), failures[0]
            assert after < 30, f"a client took {after:.1f} s to notice"
        _, _, failures = outcome(stream(server.grpc_url, STREAM, ["hi"], GenerationParams(max_tokens=2),
                                        Timeouts(network=30)))
        assert failures and failures[0].error is Unreachable
    finally:
        server.stop(grace=5)
    assert not server.running and not group_members(server.pid or 0)
    again = small_server()
    try:
        assert again.handle.is_ready()
        _, replies, failures = outcome(stream(again.grpc_url, STREAM, ["My name is"], GenerationParams(max_tokens=4),
                                              timeouts))
        assert not failures and replies[0].ok
    finally:
        again.stop()


# --------------------------------------------------------------------------- bad input

WORDS = ["hello", "Привет", "你好", "مرحبا", "שלום", "🙂", "\u200b", "e\u0301", "\ufeff", "\x00", "\t", "\r\n"]
PROMPTS = st.one_of(
    st.sampled_from(["", " ", "\n\t", "\x00", "\x1b[31m"]),
    st.text(max_size=40),
    st.text(alphabet=st.characters(categories=("Cc", "Cf", "Zs", "Zl", "Zp")), min_size=1, max_size=20),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join),
    st.builds(lambda piece, n: piece * n, st.sampled_from(["lorem ", "ж", "🙂", "\x01"]), st.integers(300, 4000)),
)
NUMBERS = {
    "max_tokens": [-(2**31), -1, 0, 1, 3, 2**31 - 1],
    "temperature": [math.nan, math.inf, -math.inf, -1.0, 0.0, 0.7, 1e30, 1e-30, 1e-45],
    "top_p": [math.nan, -0.5, 0.0, 1e-9, 0.5, 1.0, 2.0],
    "top_k": [-1, 0, 1, 5, 2**31 - 1],
    "seed": [-1, 0, 2**63 - 1],
    "repetition_penalty": [math.nan, -1.0, 0.0, 1e-30, 1.0, 1.3, 1e30],
}
CONTROLS = st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in NUMBERS.items()})
VALID_END = ("eos", "stop", "length", "ctx_len", "cancelled")  # the backend's finish reasons


def unchecked(controls: dict[str, object]) -> GenerationParams:
    """Parameters the console would refuse, sent anyway: the server must refuse them by itself."""
    params = GenerationParams()
    params.values.update(controls)
    return params


def check_answer_or_error(call: Call, deltas_before_cancel: int | None) -> None:
    deltas, replies, failures = outcome(call, stop_after=deltas_before_cancel)
    if failures:
        error = failures[0].error  # refused (a bad request, the server's answer), never lost, timed out or cancelled
        cancelled_by_us = error is Cancelled and deltas_before_cancel is not None and deltas
        assert not issubclass(error, (Unreachable, Timeout, Cancelled)) or cancelled_by_us, failures[0]
    else:
        assert all(r.finish_reason in VALID_END for r in replies), replies


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not FULL)
@given(prompt=PROMPTS, controls=CONTROLS, batch=st.booleans())
def test_bad_prompts_and_controls_get_an_error_or_an_answer(embedded_server, prompt, controls, batch) -> None:
    params = unchecked(controls)
    limit = params.max_tokens
    long_run = limit is None or limit == 0 or limit > 3  # negative limits are rejected at once
    if batch and not long_run:
        call: Call = infer(embedded_server.http_url, BATCH, [prompt], params, Timeouts(network=120))
        check_answer_or_error(call, None)
    else:  # a long valid answer is cut short once it has started
        call = stream(embedded_server.grpc_url, STREAM, [prompt], params, Timeouts(network=120, idle=60))
        check_answer_or_error(call, 3 if long_run else None)
    assert embedded_server.handle.is_ready()


def raw_infer(server: TritonServer, prompts: list[bytes]) -> tuple[list[str] | None, str | None]:
    """Bytes prompts as tritonclient sends them (np.object_ of bytes): (texts, error)."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    try:
        data = np.array(prompts, dtype=np.object_)
        prompt = httpclient.InferInput("prompt", [len(prompts)], "BYTES")
        prompt.set_data_from_numpy(data)
        limit = httpclient.InferInput("max_tokens", [1], "INT64")
        limit.set_data_from_numpy(np.array([2], dtype=np.int64))
        try:
            result = client.infer(BATCH, [prompt, limit])
        except InferenceServerException as exc:
            return None, exc.message()
        return [t.decode("utf-8", errors="replace") for t in result.as_numpy("text_output")], None
    finally:
        client.close()


@pytest.mark.slow
@settings(max_examples=max(EXAMPLES // 2, 15), deadline=None, database=None, derandomize=not FULL)
@given(prompts=st.lists(st.one_of(st.binary(max_size=48), st.text(max_size=24).map(str.encode)), min_size=1,
                        max_size=3))
def test_random_bytes_prompts_are_rejected_cleanly_or_answered(embedded_server, prompts) -> None:
    texts, error = raw_infer(embedded_server, prompts)
    valid = all(_utf8(p) and _utf8(p).strip() for p in prompts)
    if error is not None:
        assert not valid or "ctx_len" in error, error
        assert "UTF-8" in error or "empty" in error or "ctx_len" in error, error
    else:
        assert valid and texts is not None and len(texts) == len(prompts)
    assert embedded_server.handle.is_ready()


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_the_server_still_serves_after_the_bad_input(embedded_server) -> None:
    assert embedded_server.handle.is_ready()
    _, replies, failures = outcome(stream(embedded_server.grpc_url, STREAM, ["My name is"],
                                          GenerationParams(max_tokens=4), TIMEOUTS))
    assert not failures and replies[0].ok and replies[0].stats.output_tokens == 4
