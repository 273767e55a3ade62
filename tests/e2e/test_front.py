"""The OpenAI-compatible front before a real tritonserver serving the embedded samples, driven by real clients: the
``openai`` SDK, raw HTTP (httpx) for the wire's details, and the console itself.

Replies are greedy unless a test samples, so what the front answers is compared with what the console's own gRPC
stream gets from the same model: the front sent the right prompt and controls, and read the answer whole.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from click.testing import CliRunner
from helpers import wait_for_log

from console.cli import main
from console.clients import GenerationParams, Reply, info_from_config, stream
from console.core.template import chat_prompts
from console.front import front_server
from console.front.errors import ModelError
from console.front.upstream import TritonUpstream
from console.server import free_port
from console.server.health import error_codes_safe
from console.server.serverlog import LOG_KEEP

pytestmark = pytest.mark.server

STREAM, BATCH = "smollm2_decoupled", "smollm2_kv"
QUESTION = "What is the capital of France?"
LONG = "Count from 1 to 1000: 1, 2, 3,"


@pytest.fixture(scope="module")
def sdk(front) -> openai.OpenAI:
    return openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)


def grpc_reply(server, model: str, prompt: str, **controls) -> Reply:
    """The model's answer to ``prompt`` through the console's gRPC stream (what the front must give)."""
    return stream(server.grpc_url, model, [prompt], GenerationParams(**controls)).replies()[0]


def grpc_text(server, model: str, prompt: str, **controls) -> str:
    return grpc_reply(server, model, prompt, **controls).text


def events(response: httpx.Response) -> list:
    """The server-sent events of a response, ``[DONE]`` as the string."""
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


# --------------------------------------------------------------------------- the answers


def test_models_lists_the_ready_llms_as_the_fronts_with_their_controls(sdk, embedded_server) -> None:
    listed = {m.id: m for m in sdk.models.list().data}
    ready = {name for name, (state, _) in embedded_server.handle.model_states().items() if state == "READY"}
    assert set(listed) == ready and {STREAM, BATCH} <= ready
    assert all(m.owned_by == "qaic-console" for m in listed.values())
    assert {"max_tokens", "temperature", "top_k", "stop", "repetition_penalty"} <= set(listed[STREAM].controls)
    assert sdk.models.retrieve(BATCH).id == BATCH


@pytest.mark.parametrize("model", [STREAM, BATCH])
def test_completions_streamed_or_not_are_the_models_greedy_answer_with_usage(sdk, embedded_server, model) -> None:
    want = grpc_text(embedded_server, STREAM, "My name is", max_tokens=12)
    whole = sdk.completions.create(model=model, prompt="My name is", max_tokens=12)
    assert whole.choices[0].text == want and whole.choices[0].finish_reason == "length"
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens, whole.usage.total_tokens) == (3, 12, 15)
    chunks = list(sdk.completions.create(model=model, prompt="My name is", max_tokens=12, stream=True,
                                         stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert all(c.usage is None for c in chunks[:-1])
    echoed = sdk.completions.create(model=model, prompt="My name is", max_tokens=12, echo=True)
    assert echoed.choices[0].text == "My name is" + want


def test_chat_applies_the_models_template_on_the_server(sdk, embedded_server) -> None:
    messages = [{"role": "system", "content": "You answer in one short sentence."},
                {"role": "user", "content": QUESTION}]
    info = info_from_config(STREAM, embedded_server.handle.model_config(STREAM))
    templated = chat_prompts([QUESTION], info, system=messages[0]["content"])[0]
    reply = grpc_reply(embedded_server, STREAM, templated, max_tokens=16)
    want = reply.text
    answer = sdk.chat.completions.create(model=STREAM, messages=messages, max_completion_tokens=16)
    assert answer.choices[0].message.content == want and answer.choices[0].message.role == "assistant"
    assert answer.object == "chat.completion" and answer.usage.completion_tokens == reply.stats.output_tokens
    assert answer.usage.prompt_tokens == reply.stats.input_tokens
    chunks = list(sdk.chat.completions.create(model=STREAM, messages=messages, max_tokens=16, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant" and all(c.object == "chat.completion.chunk" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want


def test_stop_is_not_in_the_text_and_a_seed_repeats_a_sampled_answer(sdk, embedded_server) -> None:
    greedy = grpc_text(embedded_server, STREAM, "My name is", max_tokens=16)
    stop = greedy.split()[3]
    cut = sdk.completions.create(model=STREAM, prompt="My name is", max_tokens=16, stop=[stop, "zzz"])
    assert cut.choices[0].text == greedy[:greedy.index(stop)] and cut.choices[0].finish_reason == "stop"
    sampled = [sdk.completions.create(model=STREAM, prompt="My name is", max_tokens=16, temperature=1.5,
                                      seed=seed).choices[0].text for seed in (7, 7, 8, 9)]
    assert sampled[0] == sampled[1] and {sampled[2], sampled[3]} != {sampled[0]}


def test_a_stream_ends_with_done_and_a_refused_one_gets_its_status(front) -> None:
    with httpx.Client(base_url=front.base_url, timeout=60) as http:
        with http.stream("POST", "/completions", json={"model": STREAM, "prompt": "Hi", "max_tokens": 4,
                                                        "stream": True}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            got = events(response)
        assert got[-1] == "[DONE]" and got[-2]["choices"][0]["finish_reason"] == "length"
        too_long = http.post("/completions", json={"model": STREAM, "prompt": "word " * 4000, "stream": True})
    assert too_long.status_code == 400 and "ctx_len" in too_long.json()["error"]["message"]


def test_a_refused_stream_reaches_the_front_as_the_models_error_and_tritonserver_lives(embedded_server) -> None:
    """The front asks for a model's error code (Triton's triton_grpc_error mode) only of a tritonserver where that mode
    cannot crash it; on an older one each error in the mode logs an [INTERNAL] HandleCancellation line, and now and
    then the server dies of SIGSEGV (Triton server PR #8708)."""

    async def refusal() -> ModelError:
        upstream = TritonUpstream(embedded_server.grpc_url)
        try:
            info = await upstream.info(STREAM)
            with pytest.raises(ModelError) as caught:
                async for _ in upstream.responses(info, ["word " * 4000], GenerationParams(), 60):
                    pass
            return caught.value
        finally:
            await upstream.close()

    error, handle = asyncio.run(refusal()), embedded_server.handle
    assert "ctx_len" in str(error) and error.refused is (True if error_codes_safe(handle.server_version()) else None)
    assert embedded_server.running and handle.is_ready(timeout=10)
    assert not [line for line in embedded_server.log_tail(LOG_KEEP) if "HandleCancellation called even" in line]


@pytest.mark.parametrize(("body", "status", "param", "words"), [
    ({"presence_penalty": 0.5}, 400, "presence_penalty", "only 0"),
    ({"max_tokens": -1}, 400, "max_tokens", "max_tokens must be an integer >= 0"),
    ({"temperature": "hot"}, 400, "temperature", "temperature must be a number"),
    ({"model": "nope"}, 404, "model", "is not served here (served: "),
    ({"model": None}, 400, "model", "model is required unless exactly one model is served (served: "),
    ({"prompt": [1, -2, 3]}, 400, "prompt", "list of token ids"),
    ({"frobnicate": 1}, 400, "frobnicate", "unrecognized request argument"),
    ({"stream_options": {"include_usage": True}}, 400, "stream_options", "only allowed when stream"),
    ({"ignore_eos": True}, 400, "ignore_eos", "needs max_tokens"),
    ({"n": 2, "best_of": 1}, 400, "best_of", "best_of must equal n"),
    ({"guided_choice": "yes"}, 400, "guided_choice", "guided_choice must be a list of strings"),
])
def test_bad_requests_get_one_line_in_openais_shape(front, body, status, param, words) -> None:
    response = httpx.post(f"{front.base_url}/completions", json={"model": BATCH, "prompt": "Hi", **body}, timeout=30)
    error = response.json()["error"]
    assert response.status_code == status and set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and words in error["message"] and "\n" not in error["message"]


def test_the_framework_errors_have_the_same_shape_and_the_server_keeps_serving(front, sdk) -> None:
    for method, path, content, status in (("GET", "/nothing", None, 404), ("GET", "/completions", None, 405),
                                          ("POST", "/completions", b"{not json", 400),
                                          ("POST", "/completions", b"[" * 100000, 400)):
        response = httpx.request(method, f"{front.base_url}{path}", content=content, timeout=30)
        assert response.status_code == status and response.json()["error"]["message"], (path, response.text)
    assert sdk.completions.create(model=BATCH, prompt="Hi", max_tokens=2).usage.completion_tokens == 2


# --------------------------------------------------------------------------- a server people rely on


def test_a_client_that_goes_away_cancels_its_triton_request(front, embedded_server) -> None:
    body = {"model": STREAM, "prompt": LONG, "max_tokens": 400}
    with httpx.Client(base_url=front.base_url, timeout=60) as http, \
            http.stream("POST", "/completions", json={**body, "stream": True}) as response:
        streamed_id = response.headers["x-request-id"]
        received = 0
        for line in response.iter_lines():
            received += line.startswith("data: ")
            if received == 5:
                break
    line = wait_for_log(embedded_server, f"request {streamed_id} ", 30)
    assert line is not None and "finish=cancelled" in line, line
    assert int(line.split("output_tokens=")[1].split()[0]) < 100, line  # stopped when the client left
    before = embedded_server.log_tail(500)
    with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=front.base_url, timeout=1.5) as http:
        http.post("/completions", json=body)  # not streamed: the client gives up waiting
    line = wait_for_log(embedded_server, "finish=", 30, before=before)
    assert line is not None and "finish=cancelled" in line, line


def test_concurrent_requests_stream_concurrently(sdk) -> None:
    times: dict[int, list[float]] = {}

    def one(i: int) -> None:
        for chunk in sdk.completions.create(model=STREAM, prompt=f"{i} {LONG}", max_tokens=24, stream=True):
            if chunk.choices and chunk.choices[0].text:
                times.setdefault(i, []).append(time.monotonic())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(times) == 4 and max(t[0] for t in times.values()) < min(t[-1] for t in times.values())


def test_an_api_key_is_asked_for_and_health_stays_open(embedded_server) -> None:
    keyed = front_server(embedded_server.grpc_url, "127.0.0.1", free_port(), "s3cret", ())
    keyed.start()
    try:
        with pytest.raises(openai.AuthenticationError) as refused:
            openai.OpenAI(base_url=keyed.base_url, api_key="wrong", max_retries=0).models.list()
        assert refused.value.body["code"] == "invalid_api_key"
        assert httpx.get(f"{keyed.base_url}/models").status_code == 401
        good = openai.OpenAI(base_url=keyed.base_url, api_key="s3cret", max_retries=0)
        assert good.completions.create(model=BATCH, prompt="Hi", max_tokens=2).usage.completion_tokens == 2
        assert httpx.get(keyed.base_url.removesuffix("/v1") + "/health").status_code == 200
    finally:
        keyed.stop()


def test_off_loopback_the_key_is_on_by_default_and_a_taken_port_is_said_first(embedded_repo, front) -> None:
    taken = front.port
    for args, words in (
            (["serve", "--model-repository", str(embedded_repo), "--host", "0.0.0.0", "--openai-port", "9"],
             "off loopback: give --api-key"),
            (["openai", "--url", "127.0.0.1:1", "--host", "0.0.0.0"], "off loopback: give --api-key"),
            (["serve", "--model-repository", str(embedded_repo), "--openai-port", str(taken)], f"{taken} is in use"),
            (["openai", "--url", "127.0.0.1:1", "--port", str(taken)], f"{taken} is in use")):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and words in result.stderr and "starting" not in result.output, result.output


# --------------------------------------------------------------------------- the console through the front


def test_the_console_speaks_to_the_front_with_every_control_of_the_model(front, embedded_server) -> None:
    result = CliRunner().invoke(main, ["--prompt", "My name is", "--url", front.base_url, "--model", STREAM, "--raw",
                                       "--max-tokens", "12", "--repetition-penalty", "1.3", "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["text"] == grpc_text(embedded_server, STREAM, "My name is", max_tokens=12, repetition_penalty=1.3)
    assert row["output_tokens"] == 12 and row["output_tokens_source"] == "usage"
    assert "not sent" not in result.stderr and "repetition" not in result.stderr


def test_bench_loads_the_front_beside_straight_grpc(front, embedded_server, tmp_path) -> None:
    out = tmp_path / "side"
    result = CliRunner().invoke(main, [
        "bench", "--url", front.base_url, "--model", STREAM, "--compare-url", embedded_server.grpc_url,
        "--concurrency", "2", "--requests", "4", "--warmup", "1", "--input-tokens-mean", "16",
        "--output-tokens-mean", "8", "-o", str(out), "--plots", "none", "-q"])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "bench.json").read_text())
    assert [t["api"] for t in document["targets"]] == ["openai", "triton"]
    for target in document["targets"]:
        (level,) = target["levels"]
        assert level["request_count"] == 4 and level["error_count"] == 0
        assert level["output_sequence_length"]["avg"] == 8


def test_qaic_console_openai_serves_a_running_tritonserver(embedded_server) -> None:
    import subprocess
    import sys
    from pathlib import Path

    port = free_port()
    command = [str(Path(sys.executable).with_name("qaic-console")), "openai", "--url", embedded_server.http_url,
               "--grpc-url", embedded_server.grpc_url, "--port", str(port)]
    process = subprocess.Popen(command,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        said = next((line for line in process.stdout if "press Ctrl-C to stop" in line), "")
        assert f"OpenAI-compatible API at http://127.0.0.1:{port}/v1" in said
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        assert client.models.list().data  # the address it says answers at once: it is said once the front listens
        assert client.completions.create(model=BATCH, prompt="Hi", max_tokens=3).usage.completion_tokens == 3
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert process.returncode is not None


# --------------------------------------------------------------------------- other Triton LLM interfaces


@pytest.fixture(scope="module")
def others(llm_server) -> Iterator[openai.OpenAI]:
    """The front before the stand-ins of vLLM's backend, TensorRT-LLM's ensemble and a one-string model."""
    server = front_server(llm_server.grpc_url, "127.0.0.1", free_port(), None, ())
    server.start()
    yield openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
    server.stop()


@pytest.mark.parametrize("model", ["vllm_model", "vllm_legacy", "ensemble", "ensemble_batch", "text_model"])
def test_every_interface_is_served_as_the_console_speaks_to_it(others, llm_server, model) -> None:
    controls = {} if model == "text_model" else {"max_tokens": 6}
    want = grpc_text(llm_server, model, "tell me more", **controls)
    whole = others.completions.create(model=model, prompt="tell me more", **controls)
    assert whole.choices[0].text == want and set(whole.usage.model_dump()) >= {"prompt_tokens", "completion_tokens"}
    chunks = list(others.completions.create(model=model, prompt="tell me more", stream=True, **controls))
    assert "".join(c.choices[0].text for c in chunks) == want
    two = others.completions.create(model=model, prompt=["tell me more", "tell me more"], **controls)  # a request each
    assert [c.text for c in two.choices] == [want, want]


def test_the_controls_a_model_lacks_are_named_in_the_error(others) -> None:
    interface_name = {"vllm_model": "vllm", "ensemble": "tensorrt-llm"}
    with pytest.raises(openai.BadRequestError) as refused:
        others.completions.create(model="text_model", prompt="hi", temperature=0.5, extra_body={"top_k": 3})
    error = refused.value.body
    assert error["message"] == "model text_model (text interface) has no input for temperature, top_k"
    assert error["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as refused:
        others.completions.create(model="ensemble", prompt="hi", max_tokens=4, extra_body={"min_tokens": 2})
    assert "has no input for min_tokens" in refused.value.body["message"]
    for model in ("vllm_model", "ensemble"):  # vLLM's sampling_parameters would carry them: nothing enforces them
        with pytest.raises(openai.BadRequestError) as refused:
            others.completions.create(model=model, prompt="hi", max_tokens=4, logprobs=2)
        assert refused.value.body["message"] == f"model {model} ({interface_name[model]} interface) returns no " \
            "logprobs here" and refused.value.body["param"] == "logprobs"
        with pytest.raises(openai.BadRequestError) as refused:  # scoring a prompt needs logprobs too
            others.completions.create(model=model, prompt="hi", max_tokens=0, echo=True, logprobs=1)
        assert "returns no logprobs" in refused.value.body["message"] and refused.value.body["param"] == "logprobs"
        with pytest.raises(openai.BadRequestError) as refused:
            others.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                           response_format={"type": "json_object"})
        assert refused.value.body["message"] == f"model {model} ({interface_name[model]} interface) has no " \
            "structured-output input for response_format"


def test_serve_with_openai_port_serves_the_repository_and_stops_with_it(tmp_path) -> None:
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from repo_gen.samples import write_samples

    write_samples((BATCH,), tmp_path)  # a repository of its own: serve refuses one another server serves
    port = free_port()
    command = [str(Path(sys.executable).with_name("qaic-console")), "serve", "--model-repository", str(tmp_path),
               "--model", BATCH, "--openai-port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        for line in process.stdout:
            lines.append(line)
            if "press Ctrl-C" in line or "error:" in line:
                break
        assert lines[-1] == "press Ctrl-C to stop\n", "".join(lines[-20:])  # said last, after every address
        assert f"OpenAI  http://127.0.0.1:{port}/v1" in lines[-2], "".join(lines[-20:])
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        assert [m.id for m in client.models.list().data] == [BATCH]
        chat = client.chat.completions.create(model=BATCH, messages=[{"role": "user", "content": QUESTION}],
                                              max_tokens=4)
        assert chat.usage.completion_tokens == 4 and chat.choices[0].message.content
        unnamed = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "Hi", "max_tokens": 2},
                             timeout=60)  # one model served: a request that names none goes to it
        assert unnamed.status_code == 200 and unnamed.json()["model"] == BATCH, unnamed.text
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0 and "stopped" in rest, rest[-2000:]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health")


def test_a_front_whose_tritonserver_is_gone_says_so_with_503() -> None:
    gone = front_server(f"127.0.0.1:{free_port()}", "127.0.0.1", free_port(), None, ())
    gone.start()
    try:
        assert httpx.get(gone.base_url.removesuffix("/v1") + "/health", timeout=30).status_code == 503
        for response in (httpx.get(f"{gone.base_url}/models", timeout=30),
                         httpx.post(f"{gone.base_url}/completions", json={"model": BATCH, "prompt": "Hi"}, timeout=30)):
            assert response.status_code == 503, response.text
            assert "cannot reach tritonserver" in response.json()["error"]["message"]
    finally:
        gone.stop()


# --------------------------------------------------------------------------- the report's front section


def test_the_reports_front_section_measures_each_ratio(monkeypatch) -> None:
    from console.bench import front_report
    from console.bench.report import Report, format_report

    monkeypatch.delenv("QAIC_AIPERF", raising=False)
    monkeypatch.setattr(front_report, "aiperf_binary", lambda: None)
    report = Report()
    front_report.grpc_and_front(report, repeats=1, tokens=8, progress=lambda message: None)
    front_report.zero_cost_front(report, repeats=1, tokens=200, progress=lambda message: None)
    for n in (1, 16):
        for key in ("ttft", "itl", "tokens_per_s"):
            assert report.ratios[f"front_over_grpc_{key}_{n}"] > 0
        assert set(report.context[f"front_{n}"]) == {"grpc", "front"}
    assert report.ratios["front_zero_cost_16_tokens_per_s"] > 0  # None unless every token arrived, in order
    assert report.ratios["aiperf_over_bench_ttft"] is None and "not installed" in report.context["aiperf"]
    assert "front ttft ÷ gRPC, 16 streams" in format_report(report)
    assert Report(ratios={"aiperf_over_bench_itl": 1.08}).passed("aiperf_over_bench_itl")
    assert not Report(ratios={"aiperf_over_bench_itl": 0.85}).passed("aiperf_over_bench_itl")
