"""Images from the consoles and the front to a served vision-language model, end to end: one tritonserver on a tiny
random-weight LLaVA the generator writes (as tests/e2e/test_images_served.py does), asked headless with ``--image``,
from the TUI (Ctrl+T), from the web page (an upload, in Chromium) and through the OpenAI-compatible front by the
``openai`` SDK and LangChain's ``ChatOpenAI`` with an ``image_url`` data URL; each answer must be transformers' greedy
one for the same image and prompt. ``bench --images`` through the front reads the backend's encoding time, and
``eval --images`` finds the served answers token-equal to the CPU engine's. The behaviours (limits, refusals,
fetching, the bench's and eval's sides) are the fast tier's: tests/fast/test_front_images.py, test_headless_fake.py,
test_tui_fake.py, test_web_fake.py, test_bench_images.py, test_eval_images.py; AIPerf's images are the peer tier's
(tests/peers/test_images_aiperf.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import SERVER_START, cli
from test_images_served import ASK, IMAGES, TINY_COMPILE, TOKENS, reference
from tiny_vlms import save_tiny_vlm
from transformers import AutoTokenizer

from backend_model.models import prepare_embedded
from console.clients.images import data_url
from repo_gen.spec import generate as generate_model

pytestmark = [pytest.mark.server]
FAMILY = "llava"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """(the tiny model's folder, the tritonserver serving it, the front before it)."""
    from console.front import front_server
    from console.server import TritonServer, free_port

    root = tmp_path_factory.mktemp("images_consoles")
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    (root / "tiny.json").write_text(json.dumps(TINY_COMPILE))
    folder = save_tiny_vlm(FAMILY, root / "model", tokenizer)
    generate_model(FAMILY, root / "repo", hf_model_name=str(folder), model_type="image_text_to_text",
                   decoupled=True, engine="cpu", max_images=2, compile_config_path=root / "tiny.json")
    server = TritonServer(root / "repo")
    server.start(timeout=SERVER_START)
    front = front_server(server.grpc_url, "127.0.0.1", free_port(), None, ())
    try:
        front.start()
        yield folder, server, front
    finally:
        front.stop()
        server.stop()


def test_headless_image_gets_the_transformers_answer(served, tmp_path: Path) -> None:
    folder, server, _ = served
    image = tmp_path / "one.png"
    image.write_bytes(IMAGES[0])
    result = cli("--url", server.http_url, "--grpc-url", server.grpc_url, "--model", FAMILY, "--image", str(image),
                 "--prompt", ASK, "--max-tokens", str(TOKENS), "--json", "-q")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["text"] == reference(folder, [IMAGES[0]])[0]


def test_the_sdks_image_url_gets_the_transformers_answer_and_counts_the_image_tokens(served) -> None:
    import openai

    folder, _, front = served
    sdk = openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)
    answer = sdk.chat.completions.create(model=FAMILY, max_tokens=TOKENS, temperature=0, messages=[
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(IMAGES[1])}},
                                     {"type": "text", "text": ASK}]}])
    assert answer.choices[0].message.content == reference(folder, [IMAGES[1]])[0]
    assert answer.usage is not None and answer.usage.prompt_tokens > len(ASK.split()) + 8  # the image's tokens


def test_langchains_image_url_message_gets_the_transformers_answer(served) -> None:
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    folder, _, front = served
    llm = ChatOpenAI(model=FAMILY, base_url=front.base_url, api_key="none", max_retries=0, temperature=0,
                     max_tokens=TOKENS)
    said = llm.invoke([HumanMessage(content=[{"type": "image_url", "image_url": {"url": data_url(IMAGES[0])}},
                                             {"type": "text", "text": ASK}])])
    assert said.content == reference(folder, [IMAGES[0]])[0]
    assert said.usage_metadata is not None and said.usage_metadata["input_tokens"] > len(ASK.split()) + 8


def test_the_tuis_attached_image_gets_the_transformers_answer(served, tmp_path: Path) -> None:
    from textual.widgets import Input, Select
    from tui_pilot import run, say, stream_pane, until

    folder, server, _ = served
    image = tmp_path / "one.png"
    image.write_bytes(IMAGES[0])

    async def go() -> None:
        async with stream_pane(server.http_url, server.grpc_url, tmp_path, TOKENS) as (app, pilot, stream):
            stream.controls.query_one("#model", Select).value = FAMILY
            await until(pilot, lambda: stream.controls.settings().model == FAMILY, 30, "the model picked")
            await pilot.press("ctrl+t")
            stream.query_one(".attach", Input).value = str(image)
            await say(pilot, stream, ASK)
            turn = stream.turns[0]
            assert turn.failure is None and turn.images == [str(image)], turn.failure
            assert turn.text(0) == reference(folder, [IMAGES[0]])[0]

    run(go)


@pytest.mark.browser
def test_the_web_pages_uploaded_image_gets_the_transformers_answer(served) -> None:
    from web_page import WAIT_MS, LogWatch, open_page

    from console.core.controller import ServerController
    from console.web.handlers import WebConsole

    folder, server, _ = served
    image = folder.parent / "upload.png"
    image.write_bytes(IMAGES[1])
    log = LogWatch()
    controller = ServerController(on_log=log.add)
    controller.connect(server.http_url, server.grpc_url)
    try:
        with open_page(WebConsole(controller), log, ready="connected") as web:
            web.model(FAMILY)
            web.fill("max-tokens", str(TOKENS))
            web.page.locator("#qc-input input[type=file]").set_input_files(str(image))
            web.page.locator("#qc-input img").first.wait_for(timeout=WAIT_MS)
            web.send(ASK)
            expected = reference(folder, [IMAGES[1]])[0].strip()  # a bubble does not start with a space
            assert web.answers()[-1].startswith(f"{expected}\n\n— length · {TOKENS} tokens")
            assert web.page.locator("#qc-chat .message.user img").count() == 1
    finally:
        controller.stop()


def image_folder(tmp_path: Path) -> Path:
    """A folder of the test images, as bench --images and eval --images take them."""
    folder = tmp_path / "images"
    folder.mkdir()
    for i, data in enumerate(IMAGES):
        (folder / f"{i}.png").write_bytes(data)
    return folder


def test_bench_images_reports_the_image_run_beside_text_with_the_servers_encoding(served, tmp_path: Path) -> None:
    _, server, front = served
    images = image_folder(tmp_path)
    result = cli("bench", "--url", front.base_url, "--metrics-url", server.handle.metrics_url or "", "--model", FAMILY,
                 "--images", str(images), "--requests", "2", "--warmup", "0", "--output-tokens-mean", "4",
                 "--input-tokens-mean", "6", "--plots", "none", "--json", "-q", "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)["images"]
    assert row["vision_encode_ms"] > 0, "the backend's qaic_vision_encode_seconds, read from Triton's metrics page"
    assert row["input_tokens_images"] > row["input_tokens_text"], "an image's placeholders are prompt tokens"
    assert row["ttft_images_ms"] > row["vision_encode_ms"] and row["ttft_ratio"] is not None


def test_eval_images_finds_the_served_answers_token_equal_to_the_cpu_engines(served, tmp_path: Path) -> None:
    folder, server, _ = served
    images = image_folder(tmp_path)
    result = cli("eval", "--reference", f"{FAMILY}@{server.http_url},{server.grpc_url}", "--candidate", "cpu:fp32",
                 "--model", str(folder), "--images", str(images), "--max-tokens", str(TOKENS), "-q",
                 "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "out" / "eval.json").read_text())
    [row] = [r for r in document["summary"] if r["path"] == "cpu-fp32"]
    assert (row["exact"], row["prompts"], row["units"]) == (4, 4, ["token"]), document["paths"]["cpu-fp32"]

