"""Images in, without a server: prefix reuse never crosses different images (and does reuse the same image), the
refusals name the input, and the generator writes (or refuses) an image_text_to_text model as the backend reads it.
The answers themselves, four families against transformers, are tests/e2e/test_images_served.py's."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import engine_threads  # noqa: F401 (autouse: the engine's threads)
from PIL import Image
from tiny_vlms import save_tiny_vlm
from transformers import AutoTokenizer

from backend_model.build import BackendSettings, build_engine
from backend_model.contract import compile_config
from backend_model.contract.errors import BadRequest
from backend_model.engine.loop import Engine
from backend_model.engine.media import Media
from backend_model.engine.sampling import SamplingParams
from backend_model.models import prepare_embedded
from backend_model.sessions.protocol import Dims
from backend_model.triton.inputs import Inputs, image_prompt
from repo_gen.writer import ModelSpec, RepoError, write_model


def png(seed: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    return save_tiny_vlm("llava", tmp_path_factory.mktemp("vlm") / "llava", tokenizer)


def engine_on(folder: Path) -> Engine:
    compiled = compile_config.validate({"prefill_seq_len": 4, "ctx_len": 128, "full_batch_size": 2})
    settings = BackendSettings(hf_model_name=str(folder), engine="cpu", task="image_text_to_text", max_images=2,
                               compile=compiled)
    return build_engine(settings, progress=lambda m: None)[0]


class KeepingSession:
    """A session that keeps each slot's cache (as a card's language QPC does) and records what each run is fed."""

    keeps_prefix = True

    def __init__(self, dims: Dims) -> None:
        self.dims = dims
        self.runs: list[dict[str, np.ndarray]] = []

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.runs.append(inputs)
        return {"logits": np.zeros((len(inputs["input_ids"]), 1, self.dims.vocab), dtype=np.float32)}


def test_prefix_reuse_stops_at_different_images_and_goes_past_the_same_ones() -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    session = KeepingSession(Dims(batch_size=1, prefill_seq_len=4, ctx_len=64, vocab=tokenizer.vocab_size,
                                  full_batch_size=1))
    engine = Engine(session, tokenizer)
    image = 49000
    prompt = [10, 11, 12, 13, 14, 15, 16, 17, image, image, image, image, 20, 21, 22]  # text, one image, text

    def prefill(digest: str) -> tuple[int, list[int]]:
        """(the tokens reused, image_idx of each prefill chunk) of the prompt with an image of this digest."""
        seq = engine.prepare(prompt, SamplingParams(max_tokens=1), media=Media(np.ones((1, 4, 8)), image, digest))
        engine.enqueue([seq])
        session.runs.clear()
        while not seq.finished:
            engine.step()
        return seq.reused, [int(run["image_idx"][0, 0]) for run in session.runs if "vision_embeds" in run]

    assert prefill("a") == (0, [0, 0, 0, 4]), "from token 0: the image's four embeddings go in the third chunk"
    assert prefill("b") == (8, [0, 4]), "another image: only the text chunks before it are reused"
    assert prefill("b") == (12, [4]), "the same image: reused past it"


def test_refusals_name_the_input(folder: Path) -> None:
    engine = engine_on(folder)
    cases = {
        r"images\[1\] is not an image this model can open \(UnidentifiedImageError\)$": Inputs(
            prompts=["Look."], images=[png(1), b"GIF89a broken"]),
        "images takes at most 2 images": Inputs(prompts=["Look."], images=[png(1)] * 3),
        "the messages have 0 image parts but images holds 1": Inputs(
            chats=[[{"role": "user", "content": "Look."}]], images=[png(1)]),
    }
    for needle, inputs in cases.items():
        with pytest.raises(BadRequest, match=needle):
            image_prompt(engine, inputs)
    engine.images = None  # a text model
    with pytest.raises(BadRequest, match="this model reads text only: the input 'images'"):
        image_prompt(engine, Inputs(prompts=["Look."], images=[png(1)]))
    assert image_prompt(engine, Inputs(prompts=["Look."])) is None, "a prompt without images is text as before"


def test_the_generator_writes_what_the_backend_reads_and_refuses_what_it_would(folder: Path, tmp_path: Path) -> None:
    spec = ModelSpec("vlm", "image_text_to_text", True, hf_model_name=str(folder), engine="cpu", max_images=3,
                     compile={"full_batch_size": 2, "img_size": 56})
    written = write_model(spec, tmp_path)
    config = (written / "config.pbtxt").read_text()
    assert 'name: "images" data_type: TYPE_STRING dims: [ -1 ] optional: true' in config
    for key, value in {"task": "image_text_to_text", "max_images": "3", "image_size": "56",
                       "use_kv_cache": "true"}.items():
        assert f'key: "{key}" value: {{ string_value: {json.dumps(value)} }}' in config, key
    settings = BackendSettings.from_model_dir(written, {"task": "image_text_to_text", "max_images": "3"})
    assert settings.vision and settings.max_images == 3
    for compiled, engine, needle in (({"batch_size": 2}, "cpu", "prefills a prompt with images alone"),
                                     ({"full_batch_size": 2}, "onnx", "--engine onnx does not run")):
        with pytest.raises(RepoError, match=needle):
            write_model(ModelSpec("bad", "image_text_to_text", hf_model_name=str(folder), engine=engine,
                                  compile=compiled), tmp_path)


def test_the_meter_is_told_how_long_each_requests_images_took(folder: Path) -> None:
    from backend_model.engine.metrics import Recorder

    engine = engine_on(folder)
    engine.meter = recorder = Recorder()
    image_prompt(engine, Inputs(prompts=["Look."], images=[png(1), png(2)]))
    image_prompt(engine, Inputs(prompts=["Only text."]))
    with pytest.raises(BadRequest):
        image_prompt(engine, Inputs(prompts=["Look."], images=[b"not an image"]))
    observed = [(name, seconds) for name, seconds in recorder.take()[1] if name == "qaic_vision_encode_seconds"]
    assert len(observed) == 1 and observed[0][1] > 0, "one request with images encoded; text and refusals are not"
