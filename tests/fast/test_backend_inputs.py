"""The backend's request inputs: its own names, the Triton vLLM backend's names, status questions, clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from backend_model.inputs import encode, read_inputs
from backend_model.sampling import BadRequest, SamplingParams


def reader(**inputs: object):
    """``read(name)`` over these inputs, shaped as Triton gives them (numpy; strings as bytes)."""
    def array(value: object) -> np.ndarray:
        values = value if isinstance(value, list) else [value]
        if isinstance(values[0], str):
            return np.array([v.encode() for v in values], dtype=np.object_)
        return np.array(values)

    arrays = {name: array(value) for name, value in inputs.items()}
    return arrays.get


def test_the_bundled_names() -> None:
    got = read_inputs(reader(prompt=["My name is", "Maroon bells"], max_tokens=np.int32(8), seed=np.int64(0),
                             stop=["\n"], exclude_input_in_output=True, id="42"))
    assert got.prompts == ["My name is", "Maroon bells"] and got.request_id == "42" and got.exclude_input is True
    assert got.params() == SamplingParams(max_tokens=8, seed=0, stop=("\n",))
    assert got.stream is None and got.status_of is None


def test_the_vllm_backend_names_as_genai_perf_sends_them() -> None:
    sampling = json.dumps({"max_tokens": 16, "temperature": 0.5, "top_k": 4, "ignore_eos": True, "min_tokens": 16,
                           "stop": "END", "n": 1, "presence_penalty": 0})  # unknown keys are vLLM's, not ours
    got = read_inputs(reader(text_input="Hello", stream=True, sampling_parameters=sampling,
                             exclude_input_in_output=False))
    assert got.prompts == ["Hello"] and got.stream is True and got.exclude_input is False
    assert got.params() == SamplingParams(max_tokens=16, temperature=0.5, top_k=4, ignore_eos=True, min_tokens=16,
                                          stop=("END",))
    as_strings = json.dumps({"max_tokens": "16", "min_tokens": "16", "temperature": "0.5", "ignore_eos": "true"})
    assert read_inputs(reader(text_input="Hi", sampling_parameters=as_strings)).params() == SamplingParams(
        max_tokens=16, min_tokens=16, temperature=0.5, ignore_eos=True)  # genai-perf's numbers are strings
    with pytest.raises(BadRequest, match="max_tokens must be a positive integer, got 'many'"):
        read_inputs(reader(text_input="Hi", sampling_parameters=json.dumps({"max_tokens": "many"}))).params()
    own = read_inputs(reader(text_input="Hi", sampling_parameters=json.dumps({"max_tokens": 16}),
                             max_tokens=np.int32(3)))
    assert own.params().max_tokens == 3  # an input of its own wins over sampling_parameters
    assert read_inputs(reader(prompt="x", max_tokens=np.int32(0))).params().max_tokens is None  # 0: the default


def test_status_questions_and_bad_input() -> None:
    assert read_inputs(reader(status_of="qc-123")).status_of == "qc-123"
    for inputs, needle in (({}, "no prompt given"), ({"prompt": ["ok", " "]}, "prompt 2 of 2 is empty"),
                           ({"prompt": " "}, "the prompt is empty"),
                           ({"text_input": "a", "sampling_parameters": "{"}, "sampling_parameters is not JSON"),
                           ({"text_input": "a", "sampling_parameters": "[1]"}, "must be a JSON object"),
                           ({"prompt": "a", "max_tokens": np.array([1, 2], dtype=np.int32)}, "takes one value")):
        with pytest.raises(BadRequest, match=needle):
            read_inputs(reader(**inputs))
    with pytest.raises(BadRequest, match="byte 0"):
        read_inputs(lambda name: np.array([b"\xff"], dtype=np.object_) if name == "prompt" else None)
    with pytest.raises(BadRequest, match="min_tokens must be an integer >= 0"):
        read_inputs(reader(prompt="a", min_tokens=np.int32(-1))).params()


def test_a_prompt_too_long_is_named_and_no_prompt_is_answered_silently() -> None:
    class Engine:
        def encode(self, prompt: str) -> list[int]:
            return [1] * len(prompt.split())

        def check_prompt(self, ids: list[int], what: str) -> None:
            if len(ids) >= 8:
                raise BadRequest(f"{what} is {len(ids)} tokens but ctx_len is 8")

    assert encode(Engine(), ["a b", "c"]) == [[1, 1], [1]]
    with pytest.raises(BadRequest) as error:
        encode(Engine(), ["fine", "w " * 9])
    assert str(error.value) == ("prompt 2 of 2 is 9 tokens but ctx_len is 8; nothing was generated for the "
                                "2 prompts of this request")
    with pytest.raises(BadRequest) as error:
        encode(Engine(), ["w " * 9])
    assert str(error.value) == "the prompt is 9 tokens but ctx_len is 8"  # said once ("the prompt: prompt is ...")
