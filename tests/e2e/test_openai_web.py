"""The web console in Chromium on an OpenAI-compatible server (llama.cpp's, on the embedded GGUF): the Server
tab connects by its ``/v1`` URL, the Chat tab streams through the server's chat template, Stop closes it."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from helpers import LLAMA_MODEL, wait_until
from web_page import WAIT_MS, Web, unconnected_console

pytestmark = [pytest.mark.server, pytest.mark.browser]


@pytest.fixture(scope="module")
def web(llama_server) -> Iterator[Web]:
    with unconnected_console() as page:
        yield page


def test_connect_by_v1_url_and_chat_through_the_servers_template(web: Web, llama_server) -> None:
    page = web.page
    web.tab("Server")
    page.locator("#qc-http-url textarea, #qc-http-url input").first.fill(llama_server.base_url)
    page.locator("#qc-connect").click()
    status = web.wait_text("#qc-status", "connected", "OpenAI")
    assert llama_server.base_url in status and "gRPC" not in status
    web.wait_text("#qc-models", LLAMA_MODEL)
    assert web.table("#qc-models")[0][:3] == [LLAMA_MODEL, "READY", "openai"]
    assert "its log is where it runs" in page.locator("#qc-log textarea").input_value()
    web.tab("Chat")
    web.wait_value("#qc-model input", LLAMA_MODEL)
    assert "OpenAI-compatible" in web.text("#qc-model-note")
    web.fill("max-tokens", "10")
    web.fill("temperature", "0")
    live = web.send("What is the capital of France?")
    assert "figures under each reply" in live and "reading the model config" not in live
    answer = web.answers()[-1]
    assert "ttft" in answer, answer  # the reply's figures stand under it, not in the status
    expected = openai.OpenAI(base_url=llama_server.base_url, api_key="none", max_retries=0).chat.completions.create(
        model=LLAMA_MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}], max_tokens=10,
        temperature=0).choices[0].message.content
    assert answer.startswith(expected) and "tokens" in answer


def test_stop_closes_the_stream_on_the_server(web: Web, llama_server) -> None:
    gone = llama_server.text().count("Disconnected from client")
    web.fill("max-tokens", "1500")
    web.fill("temperature", "0")
    web.page.locator("#qc-chat-template input").uncheck()
    # greedy under the server's default repeat penalty, this raw prompt counts past 300 for all 1500 tokens
    # (measured); "Count from 1 to 1000: 1, 2, 3," ends by itself after 81 tokens, a race with the click
    web.send("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", until="streaming ·")  # text has come
    web.page.wait_for_function("() => /tok\\/s/.test(document.querySelector('#qc-live').innerText)",
                               timeout=WAIT_MS)
    web.page.locator("#qc-stop").click()
    live = web.wait_text("#qc-live", "cancelled")
    assert "connection closed" in live
    wait_until(lambda: llama_server.text().count("Disconnected from client") > gone, 10,
               "llama.cpp's server to see the client go")
