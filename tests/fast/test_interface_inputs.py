"""Interfaces without a server: detection from real configs, the inputs each model gets, and what comes back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from console.clients import GenerationParams, ModelInfo, info_from_config, interface_of
from console.server import version_note
from repo_gen.writer import TEMPLATES, ModelSpec, render_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llm_interfaces"
PARAMS = GenerationParams(max_tokens=8, temperature=0.5, top_k=3, seed=7, stop=("\n", "END"))


def info(name: str, text: str | None = None) -> ModelInfo:
    """ModelInfo from a config.pbtxt, through the JSON Triton's config endpoint gives."""
    config = text_format.Parse(text or (FIXTURES / f"{name}.pbtxt").read_text(), model_config_pb2.ModelConfig())
    return info_from_config(name, json_format.MessageToDict(config, preserving_proto_field_name=True))


def sent(model: ModelInfo, prompts: list[str], params: GenerationParams, streaming: bool) -> dict:
    """{input name: (datatype, shape, values)} of one request."""
    out = {}
    for item in interface_of(model).inputs(grpcclient, prompts, params, streaming):
        tensor = item._get_tensor()
        raw = item._get_content()
        out[item.name()] = (item.datatype(), list(tensor.shape), raw)
    return out


def test_each_interface_is_detected_with_its_modes() -> None:
    bundled = info("smollm2_decoupled", render_config(ModelSpec("smollm2_decoupled", decoupled=True)))
    expected = {"vllm_model": ("vllm", ("stream", "batch")), "vllm_legacy": ("vllm", ("stream", "batch")),
                "ensemble": ("tensorrt-llm", ("stream", "batch")), "ensemble_batch": ("tensorrt-llm", ("batch",)),
                "text_model": ("text", ("batch",))}
    for name, (kind, modes) in expected.items():
        model = info(name)
        assert (interface_of(model).name, model.modes) == (kind, modes), name
    # the bundled backend takes the vLLM backend's ``stream`` switch too: a decoupled model also answers once
    assert (interface_of(bundled).name, bundled.modes) == ("qaic-console", ("stream", "batch"))
    assert (TEMPLATES / "config.pbtxt.tmpl").is_file()


def test_vllm_gets_its_controls_as_sampling_parameters() -> None:
    model = info("vllm_model")
    wire = sent(model, ["My name is"], PARAMS, streaming=True)
    assert list(wire) == ["text_input", "sampling_parameters", "stream", "exclude_input_in_output",
                          "return_finish_reason", "return_num_input_tokens", "return_num_output_tokens"]
    assert wire["text_input"][:2] == ("BYTES", [1]) and wire["stream"][:2] == ("BOOL", [1])
    sampling = json.loads(interface_of(model).generate_body(["x"], PARAMS, "1")["sampling_parameters"])
    assert sampling == {"max_tokens": 8, "temperature": 0.5, "top_k": 3, "seed": 7, "stop": ["\n", "END"]}
    assert interface_of(model).generate_body(["x"], PARAMS, "1")["stream"] is False
    assert interface_of(model).ignored(PARAMS) == []
    legacy = info("vllm_legacy")
    assert list(sent(legacy, ["x"], PARAMS, streaming=True)) == ["text_input", "sampling_parameters", "stream"]
    # vLLM samples unless told otherwise: the consoles' greedy default goes as temperature 0
    body = interface_of(model).generate_body(["x"], GenerationParams(max_tokens=4), "1")
    unset = json.loads(body["sampling_parameters"])
    assert unset == {"max_tokens": 4, "temperature": 0.0}


def test_older_vllm_streams_the_prompt_and_all_text_so_far() -> None:
    legacy, current = interface_of(info("vllm_legacy")), interface_of(info("vllm_model"))
    so_far = ""
    for piece in ("My name is John", "My name is John and", "My name is John and I"):
        new = legacy.new_text("My name is", so_far, piece)
        so_far += new
    assert so_far == " John and I"
    assert current.new_text("My name is", "abc", " and") == " and"  # current versions send new text
    assert current.counts_are_deltas(streaming=True) and not legacy.counts_are_deltas(streaming=False)


def test_tensorrt_llm_gets_a_batch_dimension_and_its_own_names() -> None:
    old, new = info("ensemble"), info("ensemble_batch")
    wire = sent(old, ["x"], GenerationParams(seed=7, stop=("a", "b")), streaming=True)
    assert wire["text_input"][:2] == ("BYTES", [1, 1])
    assert wire["max_tokens"][:2] == ("INT32", [1, 1])  # required: the console's default when unset
    assert wire["random_seed"][:2] == ("UINT64", [1, 1]) and wire["stop_words"][:2] == ("BYTES", [1, 2])
    assert "seed" not in wire and "exclude_input_in_output" not in wire
    wire = sent(new, ["x"], PARAMS, streaming=True)
    assert wire["seed"][:2] == ("UINT64", [1, 1]) and "exclude_input_in_output" in wire
    assert wire["stream"][2] == b"\x00"  # not decoupled: never asked to stream
    assert interface_of(old).ignored(PARAMS) == []


def test_a_plain_text_model_gets_the_prompt_only() -> None:
    model = info("text_model")
    interface = interface_of(model)
    assert list(sent(model, ["x"], PARAMS, streaming=False)) == ["INPUT_TEXT"]
    assert interface.ignored(PARAMS) == ["max_tokens", "temperature", "top_k", "seed", "stop"]
    assert interface.parse_generate({"OUTPUT_TEXT": "hi"}, 1)["text_output"] == ["hi"]


def test_an_echo_the_model_was_not_told_about_is_cut_for_new_text_only() -> None:
    untold, told = interface_of(info("vllm_legacy")), interface_of(info("vllm_model"))
    assert untold.finish("My name is", "My name is Bob") == " Bob"
    assert untold.finish("My name is", " Bob") == " Bob"
    assert told.finish("My name is", "My name is Bob") == "My name is Bob"  # told: what it says is new text


def test_version_note_for_servers_older_than_24_06() -> None:
    assert "older than 2.47" in version_note("2.46.0") and "stream" in version_note("2.29.0")
    assert version_note("2.47.0") == "" and version_note("2.51.0") == "" and version_note("") == ""


def test_zero_tokens_means_up_to_the_context_on_every_server_or_says_which_default_applies() -> None:
    """``max_tokens`` 0: the bundled backend takes 0 itself; vLLM and TensorRT-LLM cannot be asked, and the note says
    what applies instead (vLLM's 16 tokens, the console's 128)."""
    whole = GenerationParams(max_tokens=0)

    def values(model: ModelInfo) -> dict:
        return {w.name: w.values for w in interface_of(model).request(["a"], whole, True)}

    bundled = info_from_config("m", {"input": [{"name": "prompt", "data_type": "TYPE_STRING", "dims": [-1]},
                                               {"name": "max_tokens", "data_type": "TYPE_INT64", "dims": [1],
                                                "optional": True}],
                                     "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}]})
    assert values(bundled)["max_tokens"] == (0,) and not interface_of(bundled).notes(whole)
    vllm = interface_of(info("vllm_model"))
    assert json.loads(values(info("vllm_model"))["sampling_parameters"][0]) == {"temperature": 0.0}  # no max_tokens
    assert vllm.notes(whole) == ["max_tokens 0 (up to the context) cannot be asked of vllm_model (vllm): vLLM's "
                                 "default of 16 tokens applies; give a number to choose"]
    trt = interface_of(info("ensemble"))
    assert values(info("ensemble"))["max_tokens"] == (128,)
    assert "the console's default of 128 is sent" in trt.notes(whole)[0]
    assert not vllm.notes(GenerationParams(max_tokens=5)) and not trt.notes(GenerationParams())


class Result:
    """A response's outputs as tritonclient's results give them (``as_numpy``; None when not sent)."""

    def __init__(self, **outputs: list) -> None:
        self.outputs = {k: np.array([v.encode() if isinstance(v, str) else v for v in vs], dtype=np.object_
                                    if isinstance(vs[0], str) else np.int32) for k, vs in outputs.items()}

    def as_numpy(self, name: str) -> np.ndarray | None:
        return self.outputs.get(name)


def test_the_bundled_backend_is_asked_for_logprobs_and_grammars_and_its_logprobs_are_read() -> None:
    bundled = info("smollm2_decoupled", render_config(ModelSpec("smollm2_decoupled", decoupled=True)))
    spec = {"json": {"type": "object"}}
    params = GenerationParams(max_tokens=4, logprobs=2, structured_outputs=spec)
    wire = {w.name: w for w in interface_of(bundled).request(["a"], params, True)}
    assert wire["logprobs"].values == (2,) and wire["logprobs"].datatype == "INT64"
    assert wire["structured_outputs"].datatype == "BYTES" and json.loads(wire["structured_outputs"].values[0]) == spec
    assert interface_of(info("vllm_model")).ignored(params) == []  # vLLM's SamplingParams have both
    assert interface_of(info("text_model")).ignored(params) == ["max_tokens", "logprobs", "structured_outputs"]
    entry = {"id": 7, "token": " a", "logprob": -0.5, "top": []}
    outputs = interface_of(bundled).outputs(Result(text_output=[" a", "b"], logprobs=[json.dumps([entry]), "[]"]), 2)
    assert outputs["logprobs"] == [[entry], []]
    assert interface_of(bundled).outputs(Result(text_output=["x"]), 1)["logprobs"] is None  # not asked: not sent
    assert interface_of(bundled).parse_generate({"text_output": "x", "logprobs": json.dumps([entry])}, 1)[
        "logprobs"] == [[entry]]


def test_images_go_as_each_interfaces_image_input_and_a_model_without_one_is_refused() -> None:
    import base64

    import pytest

    from console.clients import BadRequest

    image = b"\x89PNG\r\n\x1a\n-an-image"
    params = GenerationParams(max_tokens=4, images=(image,))
    text = info("smollm2_decoupled", render_config(ModelSpec("smollm2_decoupled", decoupled=True)))
    vlm = info("vlm", render_config(ModelSpec("vlm", decoupled=True, model_type="image_text_to_text")))
    conversation = json.dumps([{"role": "user", "content": "What is it?"}])
    wire = sent(vlm, [conversation], params.replace(chats=True), streaming=True)
    assert wire["images"][:2] == ("BYTES", [1]) and image in wire["images"][2]
    placed = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]
    assert json.dumps(placed).encode() in wire["messages"][2]  # the image part where the model's processor wants it
    assert image in sent(vlm, ["a raw prompt"], params, streaming=True)["images"][2]  # a prompt: images before it
    vllm = sent(info("vllm_model"), ["USER: <image>\nWhat is it? ASSISTANT:"], params, streaming=True)
    assert base64.b64encode(image) in vllm["image"][2]  # vllm_backend's model.py decodes base64
    assert text.input("images") is not None  # every bundled model declares it: its task says whether it is used
    with pytest.raises(BadRequest, match="takes no images: it is not an image_text_to_text model"):
        sent(text, ["x"], params, streaming=True)
    with pytest.raises(BadRequest, match="carries one prompt, not 2"):
        sent(vlm, ["a", "b"], params, streaming=True)
