"""The web console (Chromium) on the console's own OpenAI-compatible front before a real tritonserver: it connects
by the front's ``/v1`` URL, chats through the model's template applied on the front's side, and Stop cancels the
Triton request. (The TUI's test on the front is test_openai.py's, run on both OpenAI-compatible servers.)"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from helpers import wait_for_log
from web_page import WAIT_MS, Web, unconnected_console

pytestmark = pytest.mark.server
STREAM = "smollm2_decoupled"
QUESTION = "What is the capital of France?"


def direct(front, messages: list[dict[str, str]], max_tokens: int) -> str:
    client = openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)
    return client.chat.completions.create(model=STREAM, messages=messages, max_tokens=max_tokens,
                                          temperature=0).choices[0].message.content


@pytest.fixture(scope="module")
def web(front) -> Iterator[Web]:
    with unconnected_console() as page:
        yield page


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
    web.wait_value("#qc-model input", STREAM)  # the embedded stream sample is the default where it is served
    web.fill("max-tokens", "10")
    web.send(QUESTION)
    assert web.answers()[-1].startswith(direct(front, [{"role": "user", "content": QUESTION}], 10))
    before = embedded_server.log_tail(500)
    web.model(f"{STREAM}_fp32")  # several times slower than int4: its 512 positions outlast the click on Stop
    web.fill("max-tokens", "1500")
    web.page.locator("#qc-chat-template input").uncheck()  # a raw completion goes on counting
    web.send("Count from 1 to 1000: 1, 2, 3,", until="streaming ·")
    web.page.wait_for_function("() => /tok\\/s/.test(document.querySelector('#qc-live').innerText)",
                               timeout=WAIT_MS)
    web.page.locator("#qc-stop").click()
    web.wait_text("#qc-live", "cancelled")
    assert wait_for_log(embedded_server, "finish=cancelled", 30, before=before) is not None
