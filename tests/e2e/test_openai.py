"""An OpenAI-compatible server (llama.cpp's, on the embedded GGUF) through every front end but the browser:
headless, the core's cancel, the TUI (Pilot) and the bench beside the bundled backend on Triton.

Replies are greedy (temperature 0), so the console's answers are compared with the ``openai`` client's own
requests to the same server: the console sent to the right endpoint with the right messages.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import LLAMA_MODEL, LlamaServer, cli, greedy_answer, json_rows, wait_until
from tui_pilot import openai_app, run, table_rows, until

from console.cli import main
from console.clients import Cancelled, Failure, GenerationParams, TextDelta
from console.core.adapters import adapter_for
from console.core.request import Settings, prepare

pytestmark = pytest.mark.server

QUESTION = "What is the capital of France?"
SYSTEM = "You answer in one short sentence."


rows = json_rows


def direct(server, max_tokens: int, prompt: str | None = None, messages: list | None = None,
           model: str = LLAMA_MODEL) -> str:
    """The server's own greedy answer, asked through the ``openai`` client directly."""
    return greedy_answer(server.base_url, model, max_tokens, prompt, messages)


@pytest.fixture(params=["llama.cpp", "front"])
def openai_server(request):
    """(server, the model a console picks there): llama.cpp's, or this console's own front before Triton (the
    embedded stream sample is the default where it is served)."""
    if request.param == "front":
        return request.getfixturevalue("front"), "smollm2_decoupled"
    return request.getfixturevalue("llama_server"), LLAMA_MODEL


# --------------------------------------------------------------------------- headless


def test_chat_goes_to_the_servers_chat_template_and_raw_prompts_are_completed(llama_server) -> None:
    chat = rows(cli("--prompt", QUESTION, "--url", llama_server.base_url, "--chat", "--system", SYSTEM,
                    "--max-tokens", "12", "--temperature", "0", "--json"))
    assert len(chat) == 1 and chat[0]["model"] == LLAMA_MODEL  # the server's first model by default
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    assert chat[0]["text"] == direct(llama_server, 12, messages=messages)
    row = chat[0]
    assert 0 < row["time_to_first_token_ms"] <= row["request_latency_ms"] and row["inter_token_latency_ms"] > 0
    assert row["output_tokens_source"] == "chunks"  # llama.cpp sends no usage in streams: its chunks are counted
    raw = rows(cli("--prompt", QUESTION, "--url", llama_server.base_url, "--max-tokens", "12", "--temperature", "0",
                   "--json", "--raw"))
    assert raw[0]["text"] == direct(llama_server, 12, prompt=QUESTION) != chat[0]["text"]


def test_a_b_prompts_are_requests_of_their_own_answered_side_by_side(llama_server) -> None:
    prompts = ["My name is", "Maroon bells"]
    answered = rows(cli("--prompt", "|".join(prompts), "--url", llama_server.base_url, "--max-tokens", "8",
                        "--temperature", "0", "--json", "--raw"))
    assert [r["prompt"] for r in answered] == prompts
    assert [r["text"] for r in answered] == [direct(llama_server, 8, prompt=p) for p in prompts]
    assert all(r["finish_reason"] == "length" and r["output_tokens"] == 8 for r in answered)


def test_batch_mode_counts_tokens_from_usage_and_llama_cpp_gets_its_extensions(llama_server) -> None:
    result = cli("--prompt", "My name is", "--url", llama_server.base_url, "--mode", "batch", "--max-tokens", "8",
                 "--temperature", "0", "--json", "--raw")
    (row,) = rows(result)
    assert row["time_to_first_token_ms"] is None and row["request_latency_ms"] > 0
    assert row["output_tokens"] == 8 and row["output_tokens_source"] == "usage" and row["input_tokens"] > 0
    counting = ("--prompt", "Count from 1 to 20: 1, 2, 3,", "--url", llama_server.base_url, "--mode", "batch",
                "--max-tokens", "12", "--temperature", "0", "--json", "--raw")
    penalised = cli(*counting, "--repetition-penalty", "2.0")  # llama.cpp's repeat_penalty (owned_by "me")
    assert "has no input" not in penalised.stderr
    assert rows(penalised)[0]["text"] != rows(cli(*counting))[0]["text"]
    echoed = cli("--prompt", "My name is", "--url", llama_server.base_url, "--mode", "batch", "--max-tokens", "8",
                 "--temperature", "0", "--echo", "-q", "--raw")
    assert echoed.exit_code == 0 and echoed.stdout.startswith("My name is" + row["text"])
    generate = cli("--prompt", "hi", "--url", llama_server.base_url, "--mode", "generate")
    assert generate.exit_code == 1 and "generate mode is Triton's" in generate.stderr
    listed = cli("models", "--url", llama_server.base_url)
    lines = listed.stdout.splitlines()
    assert listed.exit_code == 0 and lines[0] == f"OpenAI-compatible server at {llama_server.base_url}"
    assert lines[2].split() == [LLAMA_MODEL, "READY", "openai", "stream+batch", "-", "-"]  # every control goes


def test_timeouts_say_which_fired_and_close_the_stream(llama_server) -> None:
    slow = cli("--prompt", "Count from 1 to 1000: 1, 2, 3,", "--url", llama_server.base_url, "--max-tokens", "1500",
               "--timeout", "0.5", "--raw")
    assert slow.exit_code == 1
    assert f"error: network timeout: {LLAMA_MODEL} did not finish within 0.5 s; connection closed" in slow.stderr
    # the server notices a client that went before its first token only when it writes the next (seconds here)
    wait_until(lambda: answers(llama_server), 60, "llama.cpp's server to notice the client went away")
    # llama.cpp answers one request at a time: one prompt waits silently while the other streams (both long)
    idle = cli("--prompt", "Count from 1 to 1000: 1, 2, 3,|Count down from 1000: 1000, 999, 998,", "--url",
               llama_server.base_url, "--max-tokens", "300", "--temperature", "0", "--idle-timeout", "0.5", "--raw")
    assert idle.exit_code == 1
    assert f"error: stream idle timeout: no response from {LLAMA_MODEL} for 0.5 s" in idle.stderr
    assert "unreachable" not in llama_server.text().lower()


def test_a_batch_timeout_closes_the_connection_at_once_and_says_what_the_server_does(llama_server) -> None:
    """A request the console gave up on is cancelled on its own event loop, which closes its connection the moment
    the timeout fires, streamed or not (an unstreamed one used to stay open until the process exited);
    llama.cpp's server finishes an unstreamed request anyway, and the message says so."""
    settings = Settings(LLAMA_MODEL, mode="batch", timeout=1.0, params=GenerationParams(max_tokens=120,
                                                                                          temperature=0))
    wait_until(lambda: answers(llama_server), 120, "llama.cpp's server to be done with the streams before")
    call = prepare(adapter_for(llama_server.base_url), settings, ["Count from 1 to 1000: 1, 2, 3,"]).call
    before = connections_to(llama_server.port)
    events: list = []
    reader = threading.Thread(target=lambda: events.extend(call), daemon=True)
    reader.start()
    ours = new_connection(llama_server.port, before, "the request's connection")
    reader.join(30)
    (failure,) = events
    assert failure.kind == "timeout" and "llama.cpp's finishes an unstreamed request" in failure.message, failure
    wait_closed(llama_server.port, ours, 5, "the connection to close")
    wait_until(lambda: answers(llama_server), 120, "llama.cpp's server to finish what it was left with")


def answers(server) -> bool:
    """Whether the server lists its models within a second (llama.cpp's lists nothing while it generates)."""
    try:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=1):
            return True
    except OSError:
        return False


def test_stop_closes_the_stream_and_the_server_stops_generating(llama_server) -> None:
    endpoint = adapter_for(llama_server.base_url)
    settings = Settings(LLAMA_MODEL, params=GenerationParams(max_tokens=1900, temperature=0))  # ~15 s at best
    call = prepare(endpoint, settings, ["Count from 1 to 1000: 1, 2, 3,"]).call
    gone = llama_server.text().count("Disconnected from client")
    events = iter(call)
    assert isinstance(next(events), TextDelta)
    call.cancel()
    rest = list(events)
    assert isinstance(rest[-1], Failure) and rest[-1].error is Cancelled, rest[-1]
    assert "connection closed" in rest[-1].message
    wait_until(lambda: llama_server.text().count("Disconnected from client") > gone, 10,
             "llama.cpp's server to notice the client went away")
    # it serves one request at a time: had it gone on with its 1,900 tokens, this one would wait for them
    short = prepare(endpoint, Settings(LLAMA_MODEL, params=GenerationParams(max_tokens=4, temperature=0)),
                    ["Hi"]).call.replies()
    assert short[0].stats.time_to_first_token < 10.0, short[0].stats


def connections_to(port: int) -> set[str]:
    """The local ends of this machine's ESTABLISHED TCP connections to ``port`` (their remote end). A request's
    connection is told by its local end, not by a count: a pooled one (a listing's) may close meanwhile."""
    ends = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if int(remote.rsplit(":", 1)[1], 16) == port and state == "01":
            ends.add(local)
    return ends


def new_connection(port: int, before: set[str], what: str) -> set[str]:
    """The connections to ``port`` opened since ``before`` was read, once there is one."""
    wait_until(lambda: connections_to(port) - before, 10, what)
    return connections_to(port) - before


def wait_closed(port: int, ours: set[str], timeout: float, what: str) -> None:
    """Until none of ``ours`` is open any more."""
    wait_until(lambda: not ours & connections_to(port), timeout, what)


def test_stop_closes_a_queued_stream_at_once(llama_server) -> None:
    """A request waiting behind another (llama.cpp answers one at a time) receives nothing to wake its reader:
    Stop shuts its connection down at once, while the other one still streams."""
    endpoint = adapter_for(llama_server.base_url)
    settings = Settings(LLAMA_MODEL, params=GenerationParams(max_tokens=1500, temperature=0))
    running = prepare(endpoint, settings, ["Count from 1 to 1000: 1, 2, 3,"]).call
    first = iter(running)
    assert isinstance(next(first), TextDelta)
    queued = prepare(endpoint, settings, ["Hi"], info=running.info).call  # it lists no model while it generates
    waiting = iter(queued)
    before = connections_to(llama_server.port)
    try:
        threading.Thread(target=lambda: list(waiting), daemon=True).start()
        ours = new_connection(llama_server.port, before, "the queued request's connection")
        queued.cancel()
        wait_closed(llama_server.port, ours, 10, "the queued request's connection to close")
        assert isinstance(next(first), TextDelta)  # the other request still streams
    finally:
        running.cancel()
        list(first)


def test_the_controller_follows_the_server_without_listing_its_models_again(tmp_path: Path) -> None:
    """A listing is a request: a llama.cpp server started with its defaults cuts the stream in flight short
    for it, so polls only check that the server answers."""
    from console.core.controller import ServerController

    server = LlamaServer(tmp_path / "server.log")
    server.start()
    controller = ServerController()
    try:
        snap = controller.connect(server.base_url)
        assert snap.phase == "connected" and snap.server.kind == "openai" and set(snap.infos) == {LLAMA_MODEL}
        listings = server.text().count("GET /v1/models")
        for _ in range(3):
            assert controller.poll().phase == "connected"
        assert server.text().count("GET /v1/models") == listings
        server.stop()
        snap = controller.poll()
        assert snap.phase == "unreachable" and "the OpenAI-compatible server" in snap.message
    finally:
        controller.stop()
        server.stop()


# --------------------------------------------------------------------------- the TUI


def test_the_tui_connects_by_v1_url_and_chats_with_history(openai_server, tmp_path: Path) -> None:
    from console.tui.widgets.chat_pane import SERVER_TEMPLATE

    server, model = openai_server

    async def go() -> None:
        async with openai_app(server.base_url, tmp_path, 30) as (app, pilot, pane):
            assert app.sub_title == f"OpenAI {server.base_url}"
            row = table_rows(app.server_pane.query_one("#models"))[model]
            assert row[3:5] == ("stream/batch", "openai")
            assert not app.server_pane.query_one("#server-log").display  # no log of a server reached by URL
            for name, value in (("max_tokens", "10"), ("temperature", "0"), ("chat", "true")):
                pane.controls.set_value(name, value)
            pane.show_status()
            status = str(pane.query_one(".status").render())
            assert "OpenAI stream (SSE)" in status and SERVER_TEMPLATE in status
            for text in (QUESTION, "And of Italy?"):
                assert pane.submit(text)
                await until(pilot, lambda: pane.exchange is None, 120, f"the reply to {text!r}")
            first, second = pane.turns
            assert first.failure is None and first.text(0) == direct(
                server, 10, messages=[{"role": "user", "content": QUESTION}], model=model)
            sent = json.loads(second.sent[0])  # the history went to the server as messages
            assert [m["role"] for m in sent] == ["user", "assistant", "user"]
            assert sent[1]["content"] == first.text(0) and second.replies[0].ok
            assert "ttft" in pane.blocks[0].figures_text

    run(go)


# --------------------------------------------------------------------------- the bench, side by side


@pytest.mark.parametrize("through", ["grpc", "front"])
def test_bench_puts_triton_and_llama_cpp_side_by_side_with_ratios(embedded_server, llama_server, request, through,
                                                                  tmp_path: Path) -> None:
    """The embedded model straight over gRPC, or through this console's OpenAI-compatible front, beside llama.cpp."""
    url, kind = (embedded_server.grpc_url, "Triton") if through == "grpc" else \
        (request.getfixturevalue("front").base_url, "OpenAI")
    out = tmp_path / "side"
    result = CliRunner().invoke(main, [
        "bench", "--url", url, "--model", "smollm2_decoupled", "--compare-url", llama_server.base_url,
        "--concurrency", "1,2", "--requests", "4", "--warmup", "1", "--input-tokens-mean", "16",
        "--output-tokens-mean", "8", "--temperature", "0", "-o", str(out), "--plots", "html", "-q"])
    assert result.exit_code == 0, result.output
    names = [f"{kind} smollm2_decoupled", f"OpenAI {LLAMA_MODEL}"]
    assert f"side by side (ratios to {names[0]})" in result.stdout and f"{names[1]} / {names[0]}" in result.stdout
    document = json.loads((out / "bench.json").read_text())
    assert [t["name"] for t in document["targets"]] == names
    assert [t["api"] for t in document["targets"]] == [kind.lower(), "openai"]
    assert document["levels"] == document["targets"][0]["levels"]  # a single run's readers see the first server
    for target in document["targets"]:
        assert [lv["concurrency"] for lv in target["levels"]] == [1, 2]
        assert all(lv["request_count"] == 4 and lv["error_count"] == 0 for lv in target["levels"])
    ratios = {(r["level"], r["metric"]): r for r in document["comparison"]}
    ttft = ratios[("c=2", "TTFT avg ms")]
    assert ttft["ratios"][1] == pytest.approx(ttft["values"][1] / ttft["values"][0], rel=1e-2)
    summary = (out / "bench_summary.csv").read_text().splitlines()
    assert summary[0].startswith("target,") and sum(line.startswith(tuple(names)) for line in summary) == 4
    compared = (out / "bench_comparison.csv").read_text().splitlines()
    assert compared[0] == f"level,metric,{names[0]},{names[1]},{names[1]} / {names[0]}"
    page = (out / "bench.html").read_text()
    assert all(name in page for name in names) and "Side by side (ratios to" in page


def test_several_urls_of_different_kinds_ask_for_compare_url(embedded_server, llama_server) -> None:
    result = cli("bench", "--url", embedded_server.grpc_url, "--url", llama_server.base_url, "--requests", "1")
    assert result.exit_code == 1 and "--compare-url" in result.stderr

