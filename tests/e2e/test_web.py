"""``qaic-console web`` in a real headless Chromium, on a tritonserver the page itself starts.

One page and one server for the module: the first test starts the server from the Server tab
(the embedded samples, two of its models plus two small Python models ticked), a later one kills
it. The tests in between stream from it, stop a reply on it and draw the Speed tab's plots. The chat's other
behaviour runs on the fake server in ``tests/fast/test_web_fake.py``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ECHO_LLM
from web_page import WAIT_MS, LogWatch, Web, open_page

from console.core.controller import ServerController
from console.server.logparse import NOISE_NOTE

pytestmark = [pytest.mark.server, pytest.mark.browser]

START_MS = 600_000
INJECTION = "<script>window.__pwned=1</script>|<img src=x onerror=window.__pwned=1>"
LOADED = ("smollm2_decoupled", "smollm2_kv", "echo_llm", "echo")


@pytest.fixture(scope="module")
def web_repo(tmp_path_factory: pytest.TempPathFactory, echo_repo: Path, python_model) -> Path:
    """Three embedded samples, a Python model with the prompt/text_output interface and no controls, and the
    FP32 ``echo`` model (an interface the console does not speak). The stream sample holds 2048 positions, not
    512: a reply Stop must cut lasts half a minute on a fast CPU, not six seconds a loaded browser can miss."""
    from repo_gen.samples import EMBEDDED_KV, SAMPLES, write_samples
    from repo_gen.writer import write_model

    repo = tmp_path_factory.mktemp("web_repo")
    write_samples(("smollm2_kv", "smollm2_causal"), repo)
    long_context = {**EMBEDDED_KV, "ctx_len": 2048, "full_batch_size": 2}
    write_model(dataclasses.replace(SAMPLES["smollm2_decoupled"], compile=long_context), repo)
    python_model(repo, "echo_llm", ECHO_LLM, llm=True)
    shutil.copytree(echo_repo / "echo", repo / "echo")
    return repo


@pytest.fixture(scope="module")
def web(web_repo: Path) -> Iterator[Web]:
    """The web console (no server yet; its embedded samples are ``web_repo``) open in Chromium."""
    from console.web.handlers import WebConsole

    log = LogWatch()
    controller = ServerController(on_log=log.add)
    with pytest.MonkeyPatch.context() as mp:
        for where in ("console.core.controller", "console.server.embedded"):
            mp.setattr(f"{where}.embedded_repo", lambda progress: web_repo)
        try:
            with open_page(WebConsole(controller), log) as page:
                yield page
        finally:
            controller.stop()


def test_server_tab_starts_chosen_models_and_shows_the_served_repository(web: Web, web_repo: Path) -> None:
    page = web.page
    # the chat's controls start folded (blank: the model's defaults), their hints without the wire's limits
    assert not page.locator("#qc-control-seed textarea, #qc-control-seed input").first.is_visible()
    assert "9223372036854775807" not in page.content() and "2147483647" not in page.content()
    web.tab("Server")
    assert "primary" in page.locator("#qc-start").get_attribute("class")
    web.wait_text("#qc-repo", "echo_llm", "smollm2_causal")  # listed when the page opens: the embedded samples

    # a repository that is not there: said beside the buttons, no toast over them
    repo_box = page.locator("#qc-repo-path textarea, #qc-repo-path input").first
    repo_box.fill("/nonexistent/repository")
    page.locator("#qc-list").click()
    assert "✖" in web.wait_text("#qc-server-note", "/nonexistent/repository")
    assert page.locator(".toast-body").count() == 0
    assert page.evaluate("""() => { const b = document.querySelector('#qc-list').getBoundingClientRect();
        const hit = document.elementFromPoint(b.x + b.width / 2, b.y + b.height / 2);
        return document.querySelector('#qc-list').contains(hit); }"""), "something covers List models"
    assert "echo_llm" in web.text("#qc-repo"), "the listing stays"
    repo_box.fill("")
    load = page.locator("#qc-load")
    for name in LOADED:
        load.get_by_label(name, exact=True).check()
    assert not load.get_by_label("smollm2_causal", exact=True).is_checked()
    page.locator("#qc-start").click()
    web.wait_text("#qc-status", "starting")
    page.wait_for_function("document.querySelector('#qc-start').disabled", timeout=WAIT_MS)
    status = web.wait_text("#qc-status", "ready", "HTTP 127.0.0.1:", timeout=START_MS)
    snap = web.console.controller.snapshot
    assert snap.http_url in status and snap.grpc_url in status

    # the Repository box shows what is served; the Start button is no longer the highlighted one
    web.wait_value("#qc-repo-path textarea, #qc-repo-path input", str(web_repo))
    start = page.locator("#qc-start")
    page.wait_for_function("!document.querySelector('#qc-start').classList.contains('primary')", timeout=WAIT_MS)
    assert "secondary" in start.get_attribute("class") and start.is_disabled()
    assert page.locator("#qc-server-stop").is_enabled()

    # each model's interface; the unticked one is not loaded
    web.wait_text("#qc-models", "echo_llm", "unsupported")
    rows = {row[0]: row for row in web.table("#qc-models")}
    assert rows["smollm2_decoupled"][1:4] == ["READY", "qaic-console", "stream/batch, KV cache"]
    assert rows["echo_llm"][1:4] == ["READY", "qaic-console", "batch, KV cache"]
    assert rows["echo"][1:3] == ["READY", "unsupported"]
    assert rows["smollm2_causal"][1] == "not loaded"

    # the URL fields say where it answers
    for field, url in (("#qc-http-url", snap.http_url), ("#qc-grpc-url", snap.grpc_url)):
        web.wait_value(f"{field} textarea, {field} input", url)

    # the log: harmless GPU noise hidden (said once), condensed (no tables), scrolled to its last line
    log = page.locator("#qc-log textarea")
    web.wait_log_tail("successfully loaded 'smollm2_kv'")
    shown = log.input_value()
    assert web.text("#qc-log").count(NOISE_NOTE) == 1 and web.text("#qc-log").count("(CUDA") == 1
    raw = web.console.controller.server.log_tail(500)
    assert any("NVML" in line or "CudaDriverHelper" in line for line in raw), "the server logged no GPU noise"
    assert "NVML" not in shown and "CudaDriverHelper" not in shown
    assert any(line.startswith("+---") for line in raw) and "+---" not in shown and "| Model" not in shown
    page.locator("#qc-raw-log input").check()  # the raw log, tables and all
    page.wait_for_function("document.querySelector('#qc-log textarea').value.includes('+---')", timeout=WAIT_MS)
    page.locator("#qc-raw-log input").uncheck()
    page.wait_for_function("!document.querySelector('#qc-log textarea').value.includes('+---')", timeout=WAIT_MS)
    web.wait_log_tail()

    # the chat template was loaded when the models arrived, before any message
    web.tab("Chat")
    web.wait_text("#qc-model-note", "chat template ready")


def test_the_login_is_the_printed_token_then_a_cookie(web: Web) -> None:
    """The page was opened as a user opens it (the printed address, with its token); the browser then holds a
    cookie scripts cannot read, which carries the session; a browser without the token is refused."""
    page, served = web.page, web.served
    assert served.login.token and "token=" not in page.url  # sent on to the address without it
    (cookie,) = [c for c in page.context.cookies() if c["name"] == served.login.cookie]
    assert cookie["value"] == served.login.token and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert served.login.cookie not in page.evaluate("document.cookie")
    again = page.context.new_page()  # the same browser, no token in the address: the cookie logs it in
    try:
        assert again.goto(served.demo.local_url).status == 200
        again.wait_for_function("document.querySelector('#qc-status')?.innerText.includes('ready')", timeout=WAIT_MS)
    finally:
        again.close()
    fresh = page.context.browser.new_context()  # another browser profile: no cookie
    try:
        other = fresh.new_page()
        refused = other.goto(served.demo.local_url)
        assert refused.status == 401 and "log in first" in other.inner_text("body")
        assert other.goto(f"{served.demo.local_url}?token=guess").status == 401
        assert other.locator("#qc-status").count() == 0
    finally:
        fresh.close()


def test_stream_grows_live_and_stop_cancels_on_the_server(web: Web) -> None:
    page = web.page
    web.clear()
    web.mode("stream")
    web.fill("max-tokens", "1500")
    web.send("Tell me a long story about a brave dragon.", until="streaming ·")
    reply = page.locator("#qc-chat .message.bot").last
    page.wait_for_function("() => /tok\\/s/.test(document.querySelector('#qc-live').innerText)", timeout=WAIT_MS)
    first = reply.inner_text()
    page.wait_for_function("n => [...document.querySelectorAll('#qc-chat .message.bot')].pop().innerText.length > n",
                           arg=len(first), timeout=WAIT_MS)
    live = web.text("#qc-live")
    assert live.startswith("streaming") and re.search(r"ttft \d+ ms · itl \d+ ms", live), live
    assert re.search(r"prepared in \d+ ms", live), live
    streaming = web.request_id()

    page.locator("#qc-stop").click()
    stopped = web.wait_text("#qc-live", "cancelled")
    assert "request cancelled on the server" in stopped
    line = web.log.wait_for(f"request {streaming} ")
    assert "finish=cancelled" in line, line
    web.tab("Server")  # the log grew while its tab was hidden: it opens at its tail
    web.wait_log_tail(f"request {streaming} ")
    web.tab("Chat")
    (answer,) = web.answers()  # one bubble: the text that came, how it stopped (one line), its figures
    assert re.search(r"\n— ■ stopped · \d+ tokens · ttft \d+ ms .*· cancelled after", answer), answer
    assert answer.count("■") == 1 and "✖" not in answer, answer
    exported = web.export()["turns"][-1]
    assert exported["request_id"] == streaming and exported["error_kind"] == "cancelled"
    assert exported["replies"][0]["time_to_first_token_ms"] > 0, "a stopped reply keeps its figures"
    assert exported["replies"][0]["status"] == "■ stopped" and exported["replies"][0]["cut_short"]


def test_batch_markup_stays_text_and_speed_shows_latency_apart(web: Web) -> None:
    page = web.page
    web.clear()
    web.mode("batch")
    web.model("smollm2_kv")
    page.locator("#qc-chat-template input").uncheck()
    page.locator("#qc-echo input").check()  # the reply starts with the prompt: markup in the model output
    web.fill("max-tokens", "8")
    web.send(INJECTION)
    answers = web.answers()[-2:]
    assert answers[0].startswith("[1/2] <script>window.__pwned=1</script>"), answers
    assert answers[1].startswith("[2/2] <img src=x onerror=window.__pwned=1>"), answers
    assert all("— length · 8 tokens · one response" in a and "latency" in a for a in answers)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#qc-chat script, #qc-chat img[src='x'], #qc-speed img").count() == 0

    web.tab("Speed")
    web.wait_text("#qc-speed", "<img src=x onerror")
    rows = web.table("#qc-speed")
    assert [r[1] for r in rows] == ["batch", "batch"] and all(r[2] == "" for r in rows), "batch: no TTFT"
    summary = web.text("#qc-summary")
    assert "Batch" in summary and "latency ms" in summary and "TTFT" not in summary and "Stream" not in summary
    # the latency plot draws both replies as points, the x axis counts whole replies
    web.wait_points("#qc-plot-latency", 2)
    assert web.x_labels("#qc-plot-latency") == ["1", "2"]
    page.locator("#qc-plot-ttft").scroll_into_view_if_needed()
    assert page.locator("#qc-plot-ttft .mark-symbol path").count() == 0
    assert "no stream replies yet" in page.locator("#qc-plot-ttft").text_content()  # an empty plot says why
    headers = page.evaluate("[...document.querySelectorAll('#qc-speed thead th')].map(h => h.innerText.trim())")
    assert [h for h in headers if h][:6] == ["reply", "mode", "TTFT ms", "ITL ms", "latency ms", "tokens/s"], headers

    web.tab("Chat")
    page.locator("#qc-echo input").uncheck()
    page.locator("#qc-chat-template input").check()
    web.mode("stream")
    page.wait_for_function("document.querySelector('#qc-model input').value === 'smollm2_decoupled'", timeout=WAIT_MS)
    web.send("Hi!")
    web.tab("Speed")
    web.wait_points("#qc-plot-ttft", 1)  # a series of one point is drawn
    summary = web.wait_text("#qc-summary", "Stream")
    assert summary.index("Batch") < summary.index("Stream") and "TTFT ms" in summary.split("Stream")[1]
    assert page.evaluate("window.__pwned") is None
    web.tab("Chat")


def test_connect_by_url_instead_of_starting(web: Web) -> None:
    from console.commands.web import begin

    served = web.console.controller.snapshot
    other = ServerController()
    said = begin(other, served.http_url, served.grpc_url, None, (), None)
    try:
        assert other.server is None and other.snapshot.phase == "connected" and "connected" in said
        assert other.snapshot.server.addresses() == served.server.addresses()[:2]  # HTTP and gRPC (no metrics)
        assert set(other.snapshot.infos) == set(served.infos)
    finally:
        other.stop()
    assert web.console.controller.snapshot.phase == "ready"


def test_stop_says_stopped_keeps_the_log_and_start_serves_again(web: Web) -> None:
    page = web.page
    web.tab("Server")
    urls = "#qc-http-url textarea, #qc-http-url input"
    page.wait_for_function("([sel, url]) => document.querySelector(sel).value === url",
                           arg=[urls, web.console.controller.snapshot.http_url], timeout=WAIT_MS)  # where it answers
    page.locator("#qc-server-stop").click()
    status = web.wait_text("#qc-status", "stopped")
    page.wait_for_function("sel => document.querySelector(sel).value === ''", arg=urls,
                           timeout=WAIT_MS)  # no dead server's address left to connect to
    assert "exit code" not in status, status  # a normal stop, even when the models outlast Triton's exit timeout
    web.wait_log_tail("All models are stopped")  # the log of the server that stopped stays readable
    load = page.locator("#qc-load")
    for name in ("smollm2_decoupled", "smollm2_kv"):  # a quick start: the two small Python models only
        load.get_by_label(name, exact=True).uncheck()
    page.locator("#qc-start").click()
    web.wait_text("#qc-status", "ready", "HTTP 127.0.0.1:", timeout=START_MS)
    web.wait_text("#qc-models", "echo_llm")
    web.tab("Chat")


def test_a_dead_tritonserver_is_reported_with_how_to_restart(web: Web) -> None:
    page = web.page
    served = web.console.controller.snapshot
    os.killpg(web.console.controller.server.pid, signal.SIGKILL)
    status = web.wait_text("#qc-status", "failed", "exited")
    assert "killed by SIGKILL" in status and "Server tab → Start tritonserver" in status
    assert "127.0.0.1:" not in status and "HTTP" not in status, f"the dead server's addresses: {status}"
    assert served.http_url and served.http_url not in web.text("body")
    page.wait_for_function("document.querySelector('#qc-start').classList.contains('primary')"
                           " && !document.querySelector('#qc-start').disabled", timeout=WAIT_MS)
    page.locator("#qc-input textarea").fill("Hello?")
    page.locator("#qc-send").click()
    assert "start it again" in web.toast("no server to send to")


def test_connecting_to_other_llm_interfaces_and_chatting(web: Web, llm_server) -> None:
    """After the Server tab connects to a server of vLLM / TensorRT-LLM stand-ins, their interfaces show and answer."""
    page = web.page
    web.tab("Server")
    page.locator("#qc-http-url input, #qc-http-url textarea").first.fill(llm_server.http_url)
    page.locator("#qc-grpc-url input, #qc-grpc-url textarea").first.fill(llm_server.grpc_url)
    page.locator("#qc-connect").click()
    web.wait_text("#qc-status", "connected")
    web.wait_text("#qc-models", "vllm_model", "tensorrt-llm")
    rows = {row[0]: row for row in web.table("#qc-models")}
    assert "vllm" in rows["vllm_model"] and "tensorrt-llm" in rows["ensemble"] and "text" in rows["text_model"]
    web.tab("Chat")
    web.mode("stream")
    web.model("vllm_model")
    page.locator("#qc-chat-template input").uncheck()
    web.fill("max-tokens", "6")
    web.send("My name is|Maroon bells")
    answers = web.answers()[-2:]
    assert "MY NAME" in answers[0] and "MAROON BELLS" in answers[1], answers
