"""The backend's request inputs: its own names, the Triton vLLM backend's names, status questions, and bad input
refused cheaply (sizes before decoding, JSON limits before parsing, integers before any cast) in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import AutoTokenizer

from backend_model.contract.controls import MAX_JSON_BYTES, MAX_JSON_DEPTH
from backend_model.contract.errors import BadRequest
from backend_model.engine.detok import UTF8_SHRINK, longest_token_bytes, max_prompt_bytes, token_bytes_table
from backend_model.engine.sampling import SamplingParams
from backend_model.models import prepare_embedded
from backend_model.triton.inputs import encode, read_inputs


def reader(**inputs: object):
    """``read(name)`` over these inputs, shaped as Triton gives them (numpy; strings as bytes)."""
    def array(value: object) -> np.ndarray:
        if isinstance(value, np.ndarray):
            return value
        values = value if isinstance(value, list) else [value]
        if isinstance(values[0], (str, bytes)):
            return np.array([v.encode() if isinstance(v, str) else v for v in values], dtype=np.object_)
        return np.array(values)

    arrays = {name: array(value) for name, value in inputs.items()}
    return arrays.get


def refused(needle: str, **inputs: object) -> str:
    """The one-line message reading these inputs is refused with (it must contain ``needle``)."""
    with pytest.raises(BadRequest) as error:
        read_inputs(reader(**inputs))
    message = str(error.value)
    assert needle in message and "\n" not in message, message
    return message


def test_the_bundled_names() -> None:
    got = read_inputs(reader(prompt=["My name is", "Maroon bells"], max_tokens=np.int64(8), seed=np.int64(0),
                             stop=["\n"], exclude_input_in_output=True, id="42", status_key="k1"))
    assert got.prompts == ["My name is", "Maroon bells"] and got.request_id == "42" and got.exclude_input is True
    assert got.params() == SamplingParams(max_tokens=8, seed=0, stop=("\n",))
    assert got.stream is None and got.status_of is None and got.status_key == "k1"
    assert read_inputs(reader(prompt="x", max_tokens=np.int64(0))).params().max_tokens is None  # 0: the default


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
    refused("max_tokens: 'many' is not a number", text_input="Hi", sampling_parameters='{"max_tokens": "many"}')
    own = read_inputs(reader(text_input="Hi", sampling_parameters=json.dumps({"max_tokens": 16}),
                             max_tokens=np.int64(0)))
    assert own.params().max_tokens is None  # an input of its own wins over sampling_parameters, 0 too


def test_status_questions_need_the_asked_requests_key() -> None:
    got = read_inputs(reader(status_of="qc-123", status_key="secret"))
    assert (got.status_of, got.status_key, got.prompts) == ("qc-123", "secret", [])
    refused("status_of needs status_key", status_of="qc-123")


@pytest.mark.parametrize(("inputs", "needle"), [
    ({}, "no prompt given"),
    ({"prompt": ["ok", " "]}, "prompt 2 of 2 is empty"),
    ({"prompt": " "}, "the prompt is empty"),
    ({"prompt": [b"\xff"]}, "prompt[0] is not valid UTF-8 (byte 0)"),
    ({"prompt": ["a"] * 257}, "at most 256 prompts per request, got 257"),
    ({"prompt": "a", "max_tokens": np.array([1, 2], dtype=np.int64)}, "max_tokens takes one value, got 2"),
    ({"prompt": "a", "min_tokens": np.int64(-1)}, "min_tokens must be an integer >= 0 and <= 2147483647, got -1"),
    ({"prompt": "a", "temperature": np.float32(np.inf)}, "temperature must be a number >= 0, got inf"),
    ({"prompt": "a", "top_p": np.float32(0)}, "top_p must be a number > 0 and <= 1, got 0"),
    ({"prompt": "a", "stop": ["x"] * 17}, "stop takes at most 16 values, got 17"),
    ({"prompt": "a", "stop": ["x" * 257]}, "stop must be up to 16 non-empty strings of at most 256 characters"),
    ({"prompt": "a", "id": "i" * 300}, "id is 300 bytes, over the 256 this model reads"),
])
def test_bad_input_is_named_in_one_line(inputs: dict, needle: str) -> None:
    refused(needle, **inputs)


@pytest.mark.parametrize(("value", "shown"), [(2**32 + 5, "4294967301"), ("4294967301", "4294967301"),
                                              (2.0**40, "1099511627776")])
def test_integers_are_checked_before_any_cast(value: object, shown: str) -> None:
    refused(f"max_tokens must be an integer >= 0 and <= 2147483647, got {shown}", text_input="Hi",
            sampling_parameters=json.dumps({"max_tokens": value}))
    refused("max_tokens must be an integer >= 0 and <= 2147483647, got 4294967301", prompt="Hi",
            max_tokens=np.int64(2**32 + 5))  # the tensor as Triton gives it: INT64, no wrap
    for bad in ({"top_k": 1.5}, {"seed": True}, {"seed": -1}, {"max_tokens": 1e300}, {"ignore_eos": 1}):
        refused(f"{next(iter(bad))} must be", text_input="Hi", sampling_parameters=json.dumps(bad))
    assert read_inputs(reader(text_input="Hi", sampling_parameters='{"max_tokens": 16.0}')).params().max_tokens == 16


def test_json_is_limited_before_it_is_parsed() -> None:
    nested = "[" * 100_000
    message = refused(f"sampling_parameters is 100000 bytes, over the {MAX_JSON_BYTES}", text_input="a",
                      sampling_parameters=nested)
    assert "Traceback" not in message and "/" not in message
    refused(f"nests deeper than {MAX_JSON_DEPTH} levels", text_input="a", sampling_parameters="[" * 60_000)
    refused(f"nests deeper than {MAX_JSON_DEPTH} levels", text_input="a",
            sampling_parameters='{"a": ' + "{" * 40 + '"[[[[[["' + "}" * 40 + "}")
    shallow = json.dumps({"stop": ["[[[[{{{{" * 20], "logit_bias": {"1": [1]}})  # brackets in strings do not nest
    assert read_inputs(reader(text_input="a", sampling_parameters=shallow)).controls["stop"] == ("[[[[{{{{" * 20,)
    for text, needle in (("{", "not JSON: Expecting property name"), ("[1]", "must be a JSON object"),
                         ('{"max_tokens": 1' + "0" * 5000 + "}", "not JSON")):
        message = refused(needle, text_input="a", sampling_parameters=text)
        assert "/" not in message and len(message) < 200


def test_a_prompt_is_refused_by_its_bytes_before_it_is_decoded() -> None:
    with pytest.raises(BadRequest, match="the prompt is 11 bytes, over the 10 bytes this model's context"):
        read_inputs(reader(prompt=b"\xff" * 11), max_prompt_bytes=10)  # not UTF-8 either: never decoded
    with pytest.raises(BadRequest, match="prompt 2 of 2 is 11 bytes"):
        read_inputs(reader(prompt=["ok", "x" * 11]), max_prompt_bytes=10)
    assert read_inputs(reader(prompt="x" * 10), max_prompt_bytes=10).prompts == ["x" * 10]


def test_request_parameters_are_unknown_inputs() -> None:
    with pytest.raises(BadRequest, match="unexpected inference input 'max_token'"):
        read_inputs(reader(prompt="a"), unknown=["max_token"])


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


TEXTS = ["lorem ipsum " * 50, "ж" * 300, "🙂" * 200, "\x01\x02" * 100, "a" * 2000, "<|im_start|>" * 50,
         "1234567890" * 40, " " * 500, "ﬃ𝐀𝐁" * 80, "def f(x):\n    return x\n" * 40, "\u1100\u1161\u11a8" * 100]


def test_no_text_has_fewer_tokens_than_the_byte_bound_says() -> None:
    """The byte bound is safe: a text of N bytes has at least N / longest tokens (the embedded tokenizer, and a
    tokenizer with a shrinking normalizer, which gets 4x the room)."""
    smol = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    longest = longest_token_bytes(smol, token_bytes_table(smol))
    assert longest == max(len(b) for b in token_bytes_table(smol)) and longest < 128
    assert max_prompt_bytes(smol, token_bytes_table(smol), 512) == 512 * longest  # no normalizer: no extra room
    for text in TEXTS:
        assert len(smol(text)["input_ids"]) * longest >= len(text.encode()), text[:20]
    from transformers import PreTrainedTokenizerFast

    bare = Tokenizer(models.WordLevel({"AAAA": 0, "?": 1}, unk_token="?"))
    bare.normalizer = normalizers.NFKC()
    bare.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    nfkc = PreTrainedTokenizerFast(tokenizer_object=bare, unk_token="?")
    assert max_prompt_bytes(nfkc, None, 8) == 8 * 4 * UTF8_SHRINK
    shrinking = "𝐀𝐀𝐀𝐀"  # 16 bytes; NFKC makes it "AAAA", one token of 4 bytes
    assert nfkc(shrinking)["input_ids"] == [0]
    assert 4 < len(shrinking.encode()) <= 4 * UTF8_SHRINK  # the normalizer's room is needed, and enough


def test_logprobs_structured_outputs_and_continuations() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    own = read_inputs(reader(prompt=["a", "b"], logprobs=np.int64(0), structured_outputs=json.dumps({"json": schema}),
                             continuation=['" Paris"', "[1, 2, 3]"]))
    assert own.params() == SamplingParams(logprobs=0, structured_outputs={"json": schema})
    assert own.continuations == [" Paris", [1, 2, 3]]
    shared = read_inputs(reader(text_input="a", sampling_parameters=json.dumps(
        {"logprobs": "5", "structured_outputs": {"regex": "[0-9]+"}})))  # vLLM's SamplingParams names
    assert shared.params() == SamplingParams(logprobs=5, structured_outputs={"regex": "[0-9]+"})
    assert read_inputs(reader(prompt="a")).continuations is None


@pytest.mark.parametrize(("inputs", "needle"), [
    ({"logprobs": np.int64(21)}, "logprobs must be an integer >= 0 and <= 20, got 21"),
    ({"structured_outputs": "[1]"}, "structured_outputs must be a JSON object"),
    ({"structured_outputs": "{"}, "structured_outputs is not JSON"),
    ({"structured_outputs": "{" * 40 + "}" * 40}, "structured_outputs nests deeper than 32 levels"),
    ({"structured_outputs": " " * (MAX_JSON_BYTES + 1)}, f"structured_outputs is {MAX_JSON_BYTES + 1} bytes, over"),
    ({"sampling_parameters": '{"structured_outputs": 3}'}, "structured_outputs must be a JSON object, got 3"),
    ({"continuation": ['"a"', '"b"']}, "continuation takes one value per prompt (1), got 2"),
    ({"continuation": ["Paris"]}, "the continuation of the prompt must be JSON: a string (its text) or an array"),
    ({"continuation": ["[1, true]"]}, "must be JSON: a string (its text) or an array of token ids"),
    ({"continuation": ["[" * 100_000]}, "must be JSON"),
])
def test_bad_logprobs_grammars_and_continuations_are_named_in_one_line(inputs: dict, needle: str) -> None:
    refused(needle, **({"text_input": "a"} if "sampling_parameters" in inputs else {"prompt": "a"}), **inputs)


def test_a_continuation_is_tokenised_without_special_tokens_and_checked_against_its_prompt() -> None:
    from backend_model.engine.loop import Engine
    from backend_model.sessions.protocol import Dims
    from backend_model.triton.inputs import encode_continuations
    from console.bench.engine import ZeroCostSession

    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    engine = Engine(ZeroCostSession(Dims(1, 8, 16, len(tokenizer), 2), [0]), tokenizer)
    prompts = encode(engine, ["The capital of France is", "Hi"])
    forced = encode_continuations(engine, prompts, [" Paris.", [42, 43]])
    assert forced == [tokenizer(" Paris.", add_special_tokens=False).input_ids, [42, 43]]
    with pytest.raises(BadRequest, match="the continuation of prompt 2 of 2 is 16 tokens after a 1-token prompt, "
                                         "over ctx_len 16"):
        encode_continuations(engine, prompts, [" Paris.", [42] * 16])
    with pytest.raises(BadRequest, match="the continuation of prompt 1 of 2 is empty"):
        encode_continuations(engine, prompts, ["", [42]])


# --------------------------------------------------------------------------- chats: the chat template on the server

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_messages_are_conversations_the_models_chat_template_renders_as_the_client_would() -> None:
    from backend_model.engine.loop import Engine
    from backend_model.sessions.protocol import Dims
    from backend_model.triton.inputs import prompts_of
    from console.bench.engine import ZeroCostSession

    got = read_inputs(reader(messages=[json.dumps(CHAT), json.dumps(CHAT[1:])], max_tokens=np.int64(4)))
    assert got.chats == [CHAT, CHAT[1:]] and got.params() == SamplingParams(max_tokens=4)
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    engine = Engine(ZeroCostSession(Dims(1, 8, 64, len(tokenizer), 2), [0]), tokenizer)
    assert prompts_of(engine, got) == [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
                                       for c in (CHAT, CHAT[1:])]
    assert prompts_of(engine, read_inputs(reader(prompt="as typed"))) == ["as typed"]
    tokenizer.chat_template = None  # a base model's tokenizer
    with pytest.raises(BadRequest, match=r"^this model has no chat template \(its tokenizer has none\): send the "
                                         r"prompt as text \(the input 'prompt'\)$"):
        prompts_of(engine, got)


@pytest.mark.parametrize(("inputs", "needle"), [
    ({"messages": "Hi"}, "the messages of the prompt must be JSON: an array of"),
    ({"messages": "[]"}, "the messages of the prompt must be JSON: an array of"),
    ({"messages": '[{"role": "user"}]'}, "an array of {\"role\": ..., \"content\": ...} objects of text"),
    ({"messages": '[{"role": "user", "content": 3}]'}, "must be JSON: an array of"),
    ({"messages": ["[" * 100_000]}, "must be JSON"),
    ({"messages": [json.dumps(CHAT), "x"]}, "the messages of prompt 2 of 2 must be JSON"),
    ({"messages": json.dumps(CHAT), "prompt": "Hi"}, "give prompt (text) or messages (conversations), not both"),
    ({"messages": [json.dumps(CHAT)] * 257}, "at most 256 prompts per request, got 257"),
])
def test_bad_messages_are_named_in_one_line(inputs: dict, needle: str) -> None:
    refused(needle, **inputs)


def test_messages_over_what_the_context_holds_are_refused_before_they_are_parsed() -> None:
    with pytest.raises(BadRequest, match="the prompt is 1000 bytes, over the 100 bytes this model's context"):
        read_inputs(reader(messages=json.dumps([{"role": "user", "content": "x" * 967}])), max_prompt_bytes=100)


def test_the_adapter_by_its_own_input_or_sampling_parameters() -> None:
    assert read_inputs(reader(prompt="x", lora_name="A")).params().lora_name == "A"
    shared = read_inputs(reader(text_input="x", sampling_parameters=json.dumps({"lora_name": "B"})))
    assert shared.params().lora_name == "B"
    assert read_inputs(reader(prompt="x", lora_name="")).params().lora_name is None  # empty: the base model
    refused("lora_name must be one string of at most 256 characters", prompt="x",
            sampling_parameters=json.dumps({"lora_name": 3}))
