"""Vision-language models served exactly: one tritonserver for the module on QEfficient's tiny LLaVA export fixture
and a tiny random-weight model of each family ``tests/tiny_vlms.py`` builds, written by the generator as
image_text_to_text models (engine cpu, continuous batching of two slots, decoupled), and the embedded vision sample;
the OpenAI-compatible front before it.

Every answer must be transformers' greedy one for the same image and prompt: the fixture's recorded
``hf_greedy.json``, else ``generate`` on the saved folder. Requests with different images go together on one
stream, so two of them share the decode steps (a mixed-image batch), each asked as a stream and as one answer
(``stream`` false). Bad images are refused with a message naming the input, and the server serves on (images to
a text model: tests/fast/test_images.py).

The consoles and the front ask the tiny LLaVA the same way, end to end: headless with ``--image``, the TUI (Ctrl+T),
the web page (an upload, in Chromium), the ``openai`` SDK and LangChain's ``ChatOpenAI`` with an ``image_url`` data
URL. ``bench --images`` through the front reads the backend's encoding time, and ``eval --images`` finds the served
answers token-equal to the CPU engine's. Their behaviours (limits, refusals, fetching, the bench's and eval's sides)
are the fast tier's: tests/fast/test_front_images.py, test_headless_fake.py, test_tui_fake.py, test_web_fake.py,
test_bench_images.py, test_eval_images.py; AIPerf's images are the peer tier's (tests/peers/test_images_aiperf.py).
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import queue
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
from helpers import cli, computed_key, front_before, kept
from PIL import Image
from tiny_vlms import FAMILIES, save_tiny_vlm
from transformers import AutoModelForImageTextToText, AutoProcessor, AutoTokenizer
from triton_wire import Stream, joined

from backend_model.models import prepare_embedded
from backend_model.vision.embedded import prepare_embedded_vision
from console.clients.images import data_url
from repo_gen.samples import VISION_SAMPLES, write_samples
from repo_gen.spec import generate as generate_model

pytestmark = [pytest.mark.server, pytest.mark.slow]
FIXTURE = Path("/work/shared/fixtures/qeff/tiny-llava")
FIXTURE_IMAGES = ["red.png", "noise.png", "gradient.png"]
ASK = "Describe the image."
TOKENS = 12
TINY_COMPILE = {"prefill_seq_len": 8, "ctx_len": 256, "full_batch_size": 2}
CONSOLES_FAMILY = "llava"  # the family the consoles and the front ask
LLAVA_COMPILE = {"prefill_seq_len": 32, "ctx_len": 1024, "full_batch_size": 2}


def png(seed: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A random RGB image, PNG-encoded."""
    pixels = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


IMAGES = [png(1), png(2)]


def chat(text: str = ASK) -> str:
    return json.dumps([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}])


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the tiny models' folders, the repository of their Triton models)."""
    root = tmp_path_factory.mktemp("images_served")
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    (root / "tiny.json").write_text(json.dumps(TINY_COMPILE))
    (root / "llava.json").write_text(json.dumps(LLAVA_COMPILE))
    for family in FAMILIES:
        save_tiny_vlm(family, root / "models" / family, tokenizer)
        generate_model(family, root / "repo", hf_model_name=str(root / "models" / family),
                       model_type="image_text_to_text", decoupled=True, engine="cpu", max_images=2,
                       compile_config_path=root / "tiny.json")
    write_samples(VISION_SAMPLES, root / "repo")  # the embedded vision sample, built here for the reference too
    prepare_embedded_vision(prepare_embedded(progress=lambda m: None), lambda m: None)
    generate_model("tiny_llava", root / "repo", hf_model_name=str(FIXTURE / "hf"), model_type="image_text_to_text",
                   decoupled=True, engine="cpu", compile_config_path=root / "llava.json")
    return root / "models", root / "repo"


@pytest.fixture(scope="module")
def server(repo):
    from console.server import TritonServer

    with TritonServer(repo[1]) as started:  # started (its models loaded), stopped on leaving
        yield started


@pytest.fixture(scope="module")
def front(server):
    """The OpenAI-compatible front (in this process, on a free loopback port, no key) before ``server``."""
    with front_before(server) as started:
        yield started


def ask(server, model: str, requests: dict[str, dict], stream: bool = True) -> dict[str, str]:
    """Every request's answer (id -> text, or "error: ..."), all sent at once on one gRPC stream."""
    wire = Stream(server)
    try:
        for request_id, inputs in requests.items():
            wire.send(model, None, request_id, max_tokens=TOKENS, stream=stream, exclude_input_in_output=True,
                      **inputs)
        got = wire.collect(count=len(requests))
    finally:
        wire.close()
    return {key: joined(value)[0] if key != "error" else value[0][2] for key, value in got.items()}


def reference(folder: Path, images: list[bytes], messages: str = chat()) -> list[str]:
    """transformers' greedy answer to the messages with each image, as text (each computed once a module: the
    consoles ask the tiny LLaVA what the families' test asked it)."""
    missing = [image for image in images if (folder, image, messages) not in ANSWERS]
    if missing:
        processor = AutoProcessor.from_pretrained(folder)
        model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
        text = processor.apply_chat_template(json.loads(messages), add_generation_prompt=True)
        for image in missing:
            inputs = processor(text=[text], images=[Image.open(io.BytesIO(image)).convert("RGB")],
                               return_tensors="pt")
            with torch.inference_mode():
                out = model.generate(**inputs, max_new_tokens=TOKENS, do_sample=False)
            ANSWERS[folder, image, messages] = processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :],
                                                                          skip_special_tokens=True)
    return [ANSWERS[folder, image, messages] for image in images]


ANSWERS: dict[tuple[Path, bytes, str], str] = {}  # reference's answers by (folder, image, messages)


def test_the_qefficient_llava_export_answers_what_transformers_recorded(server) -> None:
    recorded = json.loads((FIXTURE / "hf_greedy.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(FIXTURE / "hf")
    expected = {name: tokenizer.decode(recorded["greedy_new_token_ids"][name][:TOKENS], skip_special_tokens=True)
                for name in FIXTURE_IMAGES}
    requests = {name: {"messages": [chat()], "images": [(FIXTURE / name).read_bytes()]} for name in FIXTURE_IMAGES}
    assert ask(server, "tiny_llava", requests) == expected, "stream"
    assert ask(server, "tiny_llava", requests, stream=False) == expected, "one answer"


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_answers_what_generate_does_for_each_image_in_one_batch(repo, server, family: str) -> None:
    expected = dict(zip(("first", "second"), reference(repo[0] / family, IMAGES)))
    assert expected["first"] != expected["second"], "the images must lead to different answers"
    requests = {"first": {"messages": [chat()], "images": [IMAGES[0]]},
                "second": {"messages": [chat()], "images": [IMAGES[1]]}}
    assert ask(server, family, requests) == expected, "stream"
    assert ask(server, family, requests, stream=False) == expected, "one answer"


def kept_reference(folder: Path, images: list[bytes]) -> list[str]:
    """``reference`` on a folder named by its content (the embedded vision sample: 135M parameters, the slow one),
    kept in the console's cache under a key of the folder, the images, the prompt and this code (``kept``)."""
    key = computed_key(folder.name, *(hashlib.sha256(image).hexdigest() for image in images), chat(), str(TOKENS),
                       inspect.getsource(reference))

    def make(out: Path) -> None:
        (out / "answers.json").write_text(json.dumps(reference(folder, images)))

    return json.loads((kept("vision-reference", key, make) / "answers.json").read_text())


def test_the_vision_sample_answers_what_transformers_does(server) -> None:
    folder = prepare_embedded_vision(prepare_embedded(progress=lambda m: None), lambda m: None)
    expected = dict(zip(("first", "second"), kept_reference(folder, IMAGES)))
    requests = {"first": {"messages": [chat()], "images": [IMAGES[0]]},
                "second": {"messages": [chat()], "images": [IMAGES[1]]}}
    assert ask(server, "smollm2_vision", requests) == expected


def test_a_plain_prompt_takes_its_images_before_its_text(repo, server) -> None:
    folder = repo[0] / "llava"
    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    pictures = [Image.open(io.BytesIO(i)).convert("RGB") for i in IMAGES]
    inputs = processor(text=["<image><image>Compare them."], images=pictures, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=TOKENS, do_sample=False)
    expected = processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    answer = ask(server, "llava", {"two": {"text_input": "Compare them.", "images": IMAGES}})
    assert answer == {"two": expected}


def test_bad_images_are_refused_naming_the_input_and_the_server_serves_on(repo, server) -> None:
    refused = {
        "not an image": ("llava", {"messages": [chat()], "images": [b"not a picture"]}, "images[0] is not an image"),
        "too many": ("llava", {"messages": [chat()], "images": IMAGES + IMAGES[:1]},
                     "images takes at most 2 images per request"),
        "parts and images": ("llava", {"messages": [chat()], "images": IMAGES}, "the messages have 1 image part but"),
    }
    for what, (model, inputs, needle) in refused.items():
        answer = ask(server, model, {what: inputs})
        assert needle in answer.get("error", ""), (what, answer)
    expected = reference(repo[0] / "llava", IMAGES[:1])
    assert ask(server, "llava", {"again": {"messages": [chat()], "images": IMAGES[:1]}}) == {"again": expected[0]}


def test_the_stream_reports_prompt_tokens_with_the_image_placeholders(server) -> None:
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        from triton_wire import inputs

        client.async_stream_infer("tiny_llava", inputs(grpcclient, None, messages=[chat()], max_tokens=2,
                                                       images=[(FIXTURE / "red.png").read_bytes()]),
                                  request_id="count", enable_empty_final_response=True)
        while True:
            result, error = answers.get(timeout=300)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        recorded = json.loads((FIXTURE / "hf_greedy.json").read_text())["prompt_tokens"]
        assert result.as_numpy("input_tokens").tolist() == [recorded]
    finally:
        client.stop_stream()
        client.close()


def test_headless_image_gets_the_transformers_answer(repo, server, tmp_path: Path) -> None:
    folder = repo[0] / CONSOLES_FAMILY
    image = tmp_path / "one.png"
    image.write_bytes(IMAGES[0])
    result = cli("--url", server.http_url, "--grpc-url", server.grpc_url, "--model", CONSOLES_FAMILY, "--image",
                 str(image), "--prompt", ASK, "--max-tokens", str(TOKENS), "--json", "-q")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["text"] == reference(folder, [IMAGES[0]])[0]


def test_the_sdks_image_url_gets_the_transformers_answer_and_counts_the_image_tokens(repo, front) -> None:
    import openai

    folder = repo[0] / CONSOLES_FAMILY
    sdk = openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)
    answer = sdk.chat.completions.create(model=CONSOLES_FAMILY, max_tokens=TOKENS, temperature=0, messages=[
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(IMAGES[1])}},
                                     {"type": "text", "text": ASK}]}])
    assert answer.choices[0].message.content == reference(folder, [IMAGES[1]])[0]
    assert answer.usage is not None and answer.usage.prompt_tokens > len(ASK.split()) + 8  # the image's tokens


def test_langchains_image_url_message_gets_the_transformers_answer(repo, front) -> None:
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    folder = repo[0] / CONSOLES_FAMILY
    llm = ChatOpenAI(model=CONSOLES_FAMILY, base_url=front.base_url, api_key="none", max_retries=0, temperature=0,
                     max_tokens=TOKENS)
    said = llm.invoke([HumanMessage(content=[{"type": "image_url", "image_url": {"url": data_url(IMAGES[0])}},
                                             {"type": "text", "text": ASK}])])
    assert said.content == reference(folder, [IMAGES[0]])[0]
    assert said.usage_metadata is not None and said.usage_metadata["input_tokens"] > len(ASK.split()) + 8


def test_the_tuis_attached_image_gets_the_transformers_answer(repo, server, tmp_path: Path) -> None:
    from textual.widgets import Input, Select
    from tui_pilot import run, say, stream_pane, until

    folder = repo[0] / CONSOLES_FAMILY
    image = tmp_path / "one.png"
    image.write_bytes(IMAGES[0])

    async def go() -> None:
        async with stream_pane(server.http_url, server.grpc_url, tmp_path, TOKENS) as (app, pilot, stream):
            stream.controls.query_one("#model", Select).value = CONSOLES_FAMILY
            await until(pilot, lambda: stream.controls.settings().model == CONSOLES_FAMILY, 30, "the model picked")
            await pilot.press("ctrl+t")
            stream.query_one(".attach", Input).value = str(image)
            await say(pilot, stream, ASK)
            turn = stream.turns[0]
            assert turn.failure is None and turn.images == [str(image)], turn.failure
            assert turn.text(0) == reference(folder, [IMAGES[0]])[0]

    run(go)


@pytest.mark.browser
def test_the_web_pages_uploaded_image_gets_the_transformers_answer(repo, server, tmp_path: Path) -> None:
    from web_page import WAIT_MS, LogWatch, open_page

    from console.core.controller import ServerController
    from console.web.handlers import WebConsole

    folder = repo[0] / CONSOLES_FAMILY
    image = tmp_path / "upload.png"
    image.write_bytes(IMAGES[1])
    log = LogWatch()
    controller = ServerController(on_log=log.add)
    controller.connect(server.http_url, server.grpc_url)
    try:
        with open_page(WebConsole(controller), log, ready="connected") as web:
            web.model(CONSOLES_FAMILY)
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


def test_bench_images_reports_the_image_run_beside_text_with_the_servers_encoding(server, front,
                                                                                   tmp_path: Path) -> None:
    images = image_folder(tmp_path)
    result = cli("bench", "--url", front.base_url, "--metrics-url", server.handle.metrics_url or "", "--model",
                 CONSOLES_FAMILY, "--images", str(images), "--requests", "2", "--warmup", "0", "--output-tokens-mean",
                 "4", "--input-tokens-mean", "6", "--plots", "none", "--json", "-q", "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)["images"]
    assert row["vision_encode_ms"] > 0, "the backend's qaic_vision_encode_seconds, read from Triton's metrics page"
    assert row["input_tokens_images"] > row["input_tokens_text"], "an image's placeholders are prompt tokens"
    assert row["ttft_images_ms"] > row["vision_encode_ms"] and row["ttft_ratio"] is not None


def test_eval_images_finds_the_served_answers_token_equal_to_the_cpu_engines(repo, server, tmp_path: Path) -> None:
    folder = repo[0] / CONSOLES_FAMILY
    images = image_folder(tmp_path)
    result = cli("eval", "--reference", f"{CONSOLES_FAMILY}@{server.http_url},{server.grpc_url}", "--candidate",
                 "cpu:fp32", "--model", str(folder), "--images", str(images), "--max-tokens", str(TOKENS), "-q",
                 "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "out" / "eval.json").read_text())
    [row] = [r for r in document["summary"] if r["path"] == "cpu-fp32"]
    assert (row["exact"], row["prompts"], row["units"]) == (4, 4, ["token"]), document["paths"]["cpu-fp32"]
