"""``qaic-console web`` in a real headless Chromium against the session's tritonserver."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.clients import Failure, Reply, ReplyStats
from console.server import free_port
from console.transcript import Turn
from console.web.app import Runs, launch
from console.web.backend import Backend
from console.web.chat import messages, speed_rows
from console.web.command import web

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 90_000
INJECTION = "<script>window.__pwned=1</script>|<img src=x onerror=window.__pwned=1>"


def live_text(page) -> str:
    return page.locator("#qc-live").inner_text()


def request_id(text: str) -> str:
    found = re.search(r"request (web-\w+)", text)
    return found.group(1) if found else ""


def wait_live(page, word: str, old: str = "") -> str:
    """Wait until the live panel shows ``word`` and no longer the request ``old``; its text."""
    page.wait_for_function("([w, old]) => { const t = document.querySelector('#qc-live')?.innerText ?? '';"
                           " return t.includes(w) && !(old && t.includes(old)); }", arg=[word, old],
                           timeout=WAIT_MS)
    return live_text(page)


def send(page, text: str) -> str:
    """Send ``text``; the id of the request the live panel showed before (to wait for the new one)."""
    old = request_id(live_text(page))
    page.locator("#qc-input textarea").fill(text)
    page.locator("#qc-send").click()
    return old


def wait_for_log(server, needle: str, timeout: float = 30.0) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [line for line in server.log_tail(500) if needle in line]
        if found:
            return found[-1]
        time.sleep(0.1)
    return None


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.skip("Debian's /usr/bin/chromium is missing (apt-get install chromium; scripts/setup.sh --test)")
    return CHROMIUM


@pytest.fixture(scope="module")
def page(chromium: Path, embedded_server) -> Iterator:
    """The web console connected to the session's tritonserver by URL, open in Chromium."""
    from playwright.sync_api import sync_playwright

    backend = Backend()
    backend.connect(embedded_server.http_url, embedded_server.grpc_url)
    demo = launch(backend, port=free_port(), block=False)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            tab.goto(demo.local_url)
            tab.wait_for_function("document.querySelector('#qc-status')?.innerText.includes('ready')",
                                  timeout=WAIT_MS)
            yield tab
            browser.close()
    finally:
        demo.close()


def test_binds_loopback_without_share_by_default() -> None:
    defaults = web.make_context("web", []).params
    assert defaults["host"] == "127.0.0.1" and defaults["share"] is False
    demo = launch(Backend(), port=free_port(), block=False)
    try:
        assert demo.server_name == "127.0.0.1"
        assert demo.local_url.startswith("http://127.0.0.1:")
        assert not demo.share and demo.share_url is None
    finally:
        demo.close()


def test_views_escape_markup_and_stop_before_the_call_cancels_it() -> None:
    stats = ReplyStats(0.1, 0.02, 0.03, 0.5, 20.0, 3, 10)
    turn = Turn("batch", "m", ["<b>a</b>", "b"], ["<b>a</b>", "b"], "web-1", {})
    turn.replies[0] = Reply(0, "<b>a</b>", "<b>a</b><script>x()</script>", "length", stats, includes_prompt=True)
    turn.failure = Failure("<i>gone</i>", "server")
    shown = [m["content"] for m in messages([turn])]
    assert shown[0] == "[1/2] &lt;b&gt;a&lt;/b&gt;\n[2/2] b"
    assert shown[1].startswith("[1/2] &lt;b&gt;a&lt;/b&gt;&lt;script&gt;x()&lt;/script&gt;\n\n— length · 10 tokens")
    assert shown[-1] == "✖ server: &lt;i&gt;gone&lt;/i&gt;" and "<" not in "".join(shown)
    assert speed_rows([turn]) == [[1, "batch", "m", "<b>a</b>", "length", 10, 100.0, 20.0, 20.0, 0.5]]

    class FakeCall:
        cancelled = False

        def cancel(self) -> None:
            self.cancelled = True

    runs, call = Runs(), FakeCall()
    runs.begin("tab")
    assert runs.stop("tab")  # Stop while the chat template is still being applied
    runs.attach("tab", call)  # type: ignore[arg-type]
    assert call.cancelled
    runs.end("tab")
    assert not runs.stop("tab")


@pytest.mark.browser
def test_stream_grows_and_stop_cancels_on_the_server(page, embedded_server) -> None:
    page.locator("#qc-max-tokens input").fill("200")
    send(page, "Tell me a long story about a brave dragon.")
    wait_live(page, "streaming")
    reply = page.locator("#qc-chat .message.bot").last
    first = reply.inner_text()
    page.wait_for_function("n => [...document.querySelectorAll('#qc-chat .message.bot')].pop().innerText.length > n",
                           arg=len(first), timeout=WAIT_MS)
    second = reply.inner_text()
    assert "streaming" in live_text(page), "the reply must still be running while its text grows"
    assert len(second) > len(first)
    assert re.search(r"ttft \d+ ms", live_text(page))
    streaming = request_id(live_text(page))

    page.locator("#qc-stop").click()
    assert "request cancelled on the server" in wait_live(page, "cancelled")
    line = wait_for_log(embedded_server, f"request {streaming} ")
    assert line is not None and "finish=cancelled" in line, line
    assert "✖ cancelled" in page.locator("#qc-chat .message.bot").last.inner_text()

    page.locator("#qc-max-tokens input").fill("8")
    done = wait_live(page, "done", send(page, "What is the capital of France?"))
    assert re.search(r"(eos|length) · \d+ tokens · ttft \d+ ms · itl \d+ ms", done), done
    assert "tok/s" in page.locator("#qc-chat .message.bot").last.inner_text()


@pytest.mark.browser
def test_batch_answers_each_prompt_and_markup_stays_text(page) -> None:
    page.get_by_label("Batch · HTTP, one response").check()
    page.wait_for_function("document.querySelector('#qc-model input').value === 'smollm2_kv'", timeout=WAIT_MS)
    page.locator("#qc-chat-template input").uncheck()
    page.locator("#qc-echo input").check()  # the reply starts with the prompt: markup in the model output
    page.locator("#qc-max-tokens input").fill("8")
    wait_live(page, "done", send(page, INJECTION))
    answers = [m.inner_text() for m in page.locator("#qc-chat .message.bot").all()][-2:]
    assert answers[0].startswith("[1/2] <script>window.__pwned=1</script>"), answers
    assert answers[1].startswith("[2/2] <img src=x onerror=window.__pwned=1>"), answers
    assert all("— length · 8 tokens" in a for a in answers)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#qc-chat script, #qc-chat img[src='x']").count() == 0

    page.get_by_role("tab", name="Speed").click()
    page.wait_for_function("document.querySelector('#qc-speed').innerText.includes('<img src=x onerror')",
                           timeout=WAIT_MS)
    assert page.locator("#qc-speed").inner_text().count("smollm2_kv") == 2
    page.get_by_role("tab", name="Chat").click()
    page.locator("#qc-export").click()
    files = page.locator("#qc-files")
    files.get_by_text(".json").first.wait_for(timeout=WAIT_MS)
    assert ".md" in files.inner_text()
    assert page.evaluate("window.__pwned") is None
