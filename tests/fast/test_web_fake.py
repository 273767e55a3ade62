"""The web console's chat behaviour in a real headless Chromium, on the fake server (``tests/fake_server.py``).

One page and one fake server for the module; each test clears the chat first where it counts replies. The web
console against a real tritonserver (started from its Server tab) stays in ``tests/e2e/test_web.py``.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_server import (
    FakeServer,
    bundled_info,
    embedding_info,
    hang,
    plain_info,
    registered,
    replies,
    reply,
    with_images,
)
from sizes import WINDOWS, artifacts, metrics_page, overlap
from web_page import WAIT_MS, LogWatch, Web, open_page

from console.clients import BY_NAME
from console.core.controller import ServerController
from console.core.controls import form_placeholder

pytestmark = pytest.mark.browser



@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServer]:
    """One fake server for the module: the three embedded samples' names and ``echo_llm`` (no controls);
    smollm2_decoupled also takes images (the bundled backend's image inputs)."""
    with pytest.MonkeyPatch.context() as mp:
        server = registered(FakeServer(), mp)
        server.serve(plain_info("echo_llm"), with_images(bundled_info("smollm2_decoupled")))
        yield server


@pytest.fixture(scope="module")
def web(fake: FakeServer) -> Iterator[Web]:
    """The web console connected to the fake server, open in Chromium once the chat template is loaded."""
    from console.web.handlers import WebConsole

    log = LogWatch()
    controller = ServerController(on_log=log.add)
    controller.connect(fake.url)
    try:
        with open_page(WebConsole(controller), log, ready="connected") as page:
            page.wait_text("#qc-model-note", "chat template ready")
            yield page
    finally:
        controller.stop()


def test_closing_a_tab_stops_its_message_on_the_server(web: Web, fake: FakeServer) -> None:
    other = Web(web.page.context.new_page(), web.console, web.log, web.served)  # another tab: the same cookie
    other.page.goto(web.page.url)
    other.wait_text("#qc-model-note", "chat template ready")
    other.fill("max-tokens", "300")
    fake.enqueue(reply(*[" word"] * 300, every=0.05))
    other.send("Tell me a long story about a brave knight.", until="streaming ·")
    running = other.request_id()
    other.page.close(run_before_unload=True)
    assert fake.saw_cancel(running, timeout=30), "the server saw the cancel"


def test_each_prompt_of_a_batch_ends_at_its_own_last_token(web: Web, fake: FakeServer) -> None:
    web.clear()
    web.mode("stream")
    web.fill("max-tokens", "48")
    fake.enqueue(replies(["4"], [" wave"] * 48, every=0.005, finish=("eos", "length")))
    done = web.send("What is 2+2? Answer with a number only.|Write a long poem about the sea.")
    assert "[1/2]" not in done and "tokens" not in done, done  # the figures are under each reply, said once
    answers = web.answers()
    short, long = (answer.splitlines()[-1] for answer in answers)
    assert short.startswith("— eos") and long.startswith("— length · 48 tokens"), answers

    def seconds(line: str) -> float:
        return float(re.search(r"· ([\d.]+) s$", line.strip()).group(1))

    assert seconds(short) < seconds(long)

    web.tab("Speed")
    web.wait_text("#qc-speed", "Write a long poem")
    rows = web.table("#qc-speed")
    assert [r[7] for r in rows] == ["eos", "length"]
    latency = [float(r[4]) for r in rows]
    assert latency[0] < latency[1] and all(abs(a - b * 1000) < 10 for a, b in zip(latency, map(seconds, (short, long))))
    web.tab("Chat")

    turn = web.export()["turns"][-1]
    replies_ = turn["replies"]
    assert ("prepared in" in answers[-1]) == (turn["prepare_ms"] >= 500), "said only when it matters"
    assert [r["finish_reason"] for r in replies_] == ["eos", "length"]
    assert replies_[0]["request_latency_ms"] < replies_[1]["request_latency_ms"]
    assert replies_[0]["output_tokens"] < replies_[1]["output_tokens"] == 48


def test_history_is_per_mode_and_never_sent_with_several_prompts(web: Web) -> None:
    web.clear()
    web.mode("stream")
    web.fill("max-tokens", "8")
    web.send("My name is Zorblax.")
    web.send("What is my name?")
    web.mode("batch")
    web.model("smollm2_kv")
    web.send("What is my name?")
    web.mode("stream")
    web.wait_value("#qc-model input", "smollm2_decoupled")
    web.send("What is my name?|Say hi.")
    turns = web.export()["turns"][-4:]
    sent = [[r["sent"] for r in t["replies"]] for t in turns]
    assert [t["mode"] for t in turns] == ["stream", "stream", "batch", "stream"]
    assert "Zorblax" in sent[1][0], "the stream history carries the earlier stream turn"
    assert "Zorblax" not in sent[2][0], "batch mode has its own history"
    assert not any("Zorblax" in s for s in sent[3]), "a|b prompts carry no history"


def test_each_mode_starts_on_its_own_default_model_and_keeps_the_one_picked(web: Web) -> None:
    """Batch starts on smollm2_kv, as the TUI's Batch pane, headless and bench do (not the stream model, which also
    answers batch); a model picked in a mode is that mode's again after the other mode."""
    def shown(name: str) -> None:
        web.wait_value("#qc-model input", name)

    web.mode("stream")
    shown("smollm2_decoupled")
    web.mode("batch")
    shown("smollm2_kv")
    web.model("smollm2_decoupled")  # the stream model answers batch too: picked by hand
    web.mode("stream")
    shown("smollm2_decoupled")
    web.mode("batch")
    shown("smollm2_decoupled")
    web.model("smollm2_kv")
    web.mode("stream")
    shown("smollm2_decoupled")


def test_a_send_while_the_reply_comes_is_refused_saying_so_and_the_next_goes(web: Web, fake: FakeServer) -> None:
    page, box = web.page, web.page.locator("#qc-input textarea")
    web.clear()
    web.mode("stream")
    fake.enqueue(hang("Once upon"))
    web.send("Tell me a story.", until="streaming ·")
    running, sent = web.request_id(), len(fake.requests)
    box.fill("And another one.")
    page.locator("#qc-send").click()
    assert "a reply is still coming: Stop ends it" in web.toast("still coming", timeout=30_000)
    web.wait_value("#qc-input textarea", "And another one.")  # the refused message is put back, after the toast
    assert web.request_id() == running and len(fake.requests) == sent, "nothing else went to the server"

    page.locator("#qc-stop").click()
    web.wait_text("#qc-live", "cancelled")
    assert fake.saw_cancel(running, timeout=30)
    web.send("And another one.")  # the tab is free as soon as the reply has ended
    turns = web.export()["turns"][-2:]
    assert [[r["prompt"] for r in t["replies"]] for t in turns] == [["Tell me a story."], ["And another one."]]


def test_controls_are_checked_zero_is_sent_and_ignored_ones_are_named(web: Web, fake: FakeServer) -> None:
    page = web.page
    web.clear()
    web.mode("batch")
    web.model("echo_llm")
    page.locator("#qc-chat-template input").uncheck()
    web.fill("top-p", "2")  # marked in its field as typed, saying why
    page.wait_for_function("document.querySelector('#qc-control-top-p').classList.contains('qc-invalid')",
                           timeout=WAIT_MS)
    assert "✖ Top p must be a number > 0 and <= 1, got 2" in web.text("#qc-control-top-p")
    page.locator("#qc-input textarea").fill("hello")
    page.locator("#qc-send").click()
    assert "Top p must be a number > 0 and <= 1, got 2" in web.toast("Top p")
    assert page.locator("#qc-chat .message").count() == 0, "nothing is sent when a control is invalid"

    web.fill("top-p", "")
    page.wait_for_function("!document.querySelector('#qc-control-top-p').classList.contains('qc-invalid')",
                           timeout=WAIT_MS)
    web.fill("seed", "0")
    fake.enqueue(reply("echo: hello", finish=""))
    web.send("hello")
    answer = web.answers()[-1]
    assert answer.startswith("echo: hello")
    assert "— echo_llm has no input for max_tokens, seed: not sent" in answer
    turn = web.export()["turns"][-1]
    assert turn["params"]["seed"] == 0 and "top_p" not in turn["params"]
    assert turn["ignored_controls"] == ["max_tokens", "seed"]
    web.fill("seed", "")
    page.locator("#qc-chat-template input").check()


def test_retry_sends_the_last_prompts_again(web: Web) -> None:
    web.clear()
    web.mode("stream")
    web.wait_value("#qc-model input", "smollm2_decoupled")
    web.fill("max-tokens", "4")
    web.send("Say hi.|Say bye.")
    old = web.request_id()
    web.page.locator("#qc-retry").click()
    web.page.wait_for_function("old => { const t = document.querySelector('#qc-live').innerText;"
                               " return !t.includes(old) && t.startsWith('done'); }", arg=old, timeout=WAIT_MS)
    turns = web.export()["turns"]
    assert len(turns) == 1 and [r["prompt"] for r in turns[0]["replies"]] == ["Say hi.", "Say bye."]
    assert turns[0]["request_id"] != old


def test_exported_transcripts_stay_in_the_private_folder(web: Web) -> None:
    """The files offered for download are Gradio's copies in the console's 0700 folder (not /tmp/gradio), served
    to the logged-in page only."""
    web.clear()
    web.mode("stream")
    web.fill("max-tokens", "4")
    web.send("Say hi.")
    web.export()
    links = web.page.evaluate("[...document.querySelectorAll('#qc-files a[href*=\"file=\"]')].map(a => a.href)")
    paths = [Path(urllib.parse.unquote(link.split("file=", 1)[1])) for link in links]
    folder = web.console.folder
    assert paths and all(p.is_relative_to(folder / "gradio") and p.is_file() for p in paths), (paths, folder)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert web.page.request.get(links[0]).ok  # the page's cookie fetches it
    fresh = web.page.context.browser.new_context()
    try:
        assert fresh.request.get(links[0]).status == 401
    finally:
        fresh.close()


BOX = "sel => [...document.querySelectorAll(sel)].map(e => { const r = e.getBoundingClientRect();" \
      " return [r.left, r.top, r.right, r.bottom]; })"
# the header cells, plots and tables that stick out of their block (none: nothing is cut)
CUT = """sel => [...document.querySelectorAll(sel)].flatMap(block => { const b = block.getBoundingClientRect();
  return [...block.querySelectorAll('[role=columnheader], .vega-embed svg')].filter(e => {
    const r = e.getBoundingClientRect(); return r.right > b.right + 0.5 || r.bottom > b.bottom + 0.5; })
    .map(e => `${block.id}: ${e.innerText || e.tagName} at ${e.getBoundingClientRect().right}x${
      e.getBoundingClientRect().bottom} in ${b.right}x${b.bottom}`); })"""


@pytest.mark.parametrize("size", WINDOWS, ids=[f"{w}x{h}" for w, h in WINDOWS])
def test_at_the_sizes_users_have_nothing_is_cut_and_no_toast_covers_the_status(web: Web, fake: FakeServer,
                                                                             size: tuple[int, int]) -> None:
    """Screenshots of each tab in the tests' artifacts; a warning's toast leaves the status line free and goes with
    its tab; the plots (one still empty, saying so), the tables and their header cells stay inside their blocks."""
    page, name = web.page, "x".join(map(str, size))
    page.set_viewport_size({"width": size[0], "height": size[1]})
    try:
        web.clear()
        web.mode("stream")
        web.fill("max-tokens", "4")
        web.send("Say hi.")  # a stream reply, no batch one: the batch plot says why it is empty
        page.locator("#qc-input textarea").fill("")
        page.locator("#qc-send").click()
        web.toast("empty")
        page.evaluate("window.scrollTo(0, 0)")
        status, toasts = page.evaluate(BOX, "#qc-status")[0], page.evaluate(BOX, ".toast-body")
        page.screenshot(path=artifacts() / f"web-chat-{name}.png")
        assert toasts and not any(overlap(status, toast) for toast in toasts), (status, toasts)

        web.tab("Speed")
        page.wait_for_function("!document.querySelector('.toast-body')", timeout=3_000)  # its toasts went with it
        web.wait_points("#qc-plot-ttft", 1)
        assert web.text("#qc-plot-latency").startswith("no batch replies yet")
        page.screenshot(path=artifacts() / f"web-speed-{name}.png", full_page=True)
        assert not page.evaluate(CUT, ".qc-plot, #qc-speed"), page.evaluate(CUT, ".qc-plot, #qc-speed")

        web.tab("Server")
        web.wait_text("#qc-metrics-note", "has no metrics page known here: type it in the Metrics page field")
        field = page.locator("#qc-metrics-url textarea, #qc-metrics-url input").first
        with metrics_page(list(fake.models)) as url:
            field.fill(url)
            page.wait_for_function("n => [...document.querySelectorAll('#qc-metrics .virtual-row')].length === n &&"
                                   " !document.querySelector('#qc-metrics').innerText.includes('-')",
                                   arg=len(fake.models), timeout=WAIT_MS)  # every figure, read twice
            page.screenshot(path=artifacts() / f"web-server-{name}.png", full_page=True)
            tables = "#qc-models, #qc-metrics, #qc-repo"
            assert not page.evaluate(CUT, tables), page.evaluate(CUT, tables)
        field.fill("")
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})
        web.tab("Chat")


def test_a_blank_field_says_what_it_sends_as_the_tui_does(web: Web) -> None:
    field = web.page.locator("#qc-control-stop input, #qc-control-stop textarea").first
    assert field.get_attribute("placeholder") == form_placeholder(BY_NAME["stop"]) == "a|b (blank: none)"


def test_the_embeddings_tab_draws_the_similarity_heat_map(web: Web, fake: FakeServer) -> None:
    fake.serve(embedding_info("minilm_web"))
    try:
        web.tab("Embeddings")
        web.page.locator("#qc-embed-input textarea").fill("a cat sat|a cat sits|zzz")
        web.page.locator("#qc-embed-send").click()
        heat = web.wait_text("#qc-embed-heat", "cosine similarity", "minilm_web")
        assert web.page.locator("#qc-embed-heat td").count() == 9 and heat.count("1.0000") == 3
        assert "3 vectors from minilm_web" in web.text("#qc-embed-status")
        assert fake.embedded[-1] == ("minilm_web", ["a cat sat", "a cat sits", "zzz"])
    finally:
        del fake.models["minilm_web"]
        web.tab("Chat")


def test_an_image_uploaded_in_the_box_goes_with_the_message_only_and_shows_in_its_bubble(
        web: Web, fake: FakeServer, tmp_path: Path) -> None:
    from PIL import Image

    image = tmp_path / "red.png"
    Image.new("RGB", (16, 16), (220, 20, 20)).save(image)
    web.clear()
    web.page.locator("#qc-input input[type=file]").set_input_files(str(image))
    web.page.locator("#qc-input img").first.wait_for(timeout=WAIT_MS)  # uploaded: its thumbnail in the box
    web.send("What is in the picture?")
    assert fake.requests[-1].params.images == (image.read_bytes(),)
    bubble = web.page.locator("#qc-chat .message.user img")
    bubble.first.wait_for(timeout=WAIT_MS)  # the chat shows the turn after the live panel says done
    assert bubble.count() == 1  # the image in the user's bubble
    web.page.locator("#qc-input img").first.wait_for(state="detached", timeout=WAIT_MS)  # the box let it go
    web.send("And now?")
    assert fake.requests[-1].params.images == ()  # it went with its message only
