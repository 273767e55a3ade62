"""The console's own front ends on its OpenAI-compatible front (before a real tritonserver): the TUI (Pilot) and
the web console (Chromium) connect by the front's ``/v1`` URL, chat through the model's template applied on the
front's side, and Stop cancels the Triton request."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from helpers import wait_for_log
from tui_pilot import SIZE, run, table_rows, until
from web_page import WAIT_MS, LogWatch, Web, open_page

from console.core.controller import ServerController

pytestmark = pytest.mark.server
STREAM = "smollm2_decoupled"
QUESTION = "What is the capital of France?"


def direct(front, messages: list[dict[str, str]], max_tokens: int) -> str:
    client = openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)
    return client.chat.completions.create(model=STREAM, messages=messages, max_tokens=max_tokens,
                                          temperature=0).choices[0].message.content


def test_the_tui_chats_through_the_front_with_history(front, tmp_path) -> None:
    from console.tui.app import QaicConsoleApp

    async def go() -> None:
        app = QaicConsoleApp(http_url=front.base_url, export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.chat("stream")
            await until(pilot, lambda: pane.serving and pane.infos, 30, "the connection")
            assert app.server_pane.snapshot.server.kind == "openai"
            assert STREAM in table_rows(app.server_pane.query_one("#models"))
            for name, value in (("max_tokens", "10"), ("chat", "true")):
                pane.controls.set_value(name, value)
            for text in (QUESTION, "And of Italy?"):
                assert pane.submit(text)
                await until(pilot, lambda: pane.exchange is None, 120, f"the reply to {text!r}")
            first, second = pane.turns
            assert first.failure is None and first.text(0) == direct(front, [{"role": "user", "content": QUESTION}],
                                                                     10)
            sent = json.loads(second.sent[0])  # the history went to the front as messages
            assert [m["role"] for m in sent] == ["user", "assistant", "user"] and second.replies[0].ok

    run(go)


@pytest.fixture(scope="module")
def web(front) -> Iterator[Web]:
    from console.web.handlers import WebConsole

    controller = ServerController()
    try:
        with open_page(WebConsole(controller), LogWatch()) as page:
            yield page
    finally:
        controller.stop()


@pytest.mark.browser
def test_the_web_console_chats_through_the_front_and_stop_cancels_on_triton(web: Web, front,
                                                                            embedded_server) -> None:
    page = web.page
    web.tab("Server")
    page.locator("#qc-http-url textarea, #qc-http-url input").first.fill(front.base_url)
    page.locator("#qc-connect").click()
    web.wait_text("#qc-status", "connected", "OpenAI")
    web.wait_text("#qc-models", STREAM)
    web.tab("Chat")
    page.wait_for_function("n => document.querySelector('#qc-model input').value === n", arg=STREAM,
                           timeout=WAIT_MS)  # the embedded stream sample is the default where it is served
    web.fill("max-tokens", "10")
    web.send(QUESTION)
    assert web.answers()[-1].startswith(direct(front, [{"role": "user", "content": QUESTION}], 10))
    before = embedded_server.log_tail(500)
    web.fill("max-tokens", "1500")
    web.page.locator("#qc-chat-template input").uncheck()  # a raw completion goes on counting
    web.send("Count from 1 to 1000: 1, 2, 3,", until="streaming ·")
    web.page.wait_for_function("() => /tok\\/s/.test(document.querySelector('#qc-live').innerText)",
                               timeout=WAIT_MS)
    web.page.locator("#qc-stop").click()
    web.wait_text("#qc-live", "cancelled")
    assert wait_for_log(embedded_server, "finish=cancelled", 30, before=before) is not None
