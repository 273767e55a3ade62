"""vLLM's tokenizer routes on a fake upstream, with the embedded model's tokenizer: ``/tokenize`` (a prompt, or
messages through the chat template; held to the size a prompt route takes), ``/detokenize``, ``/tokenizer_info``.
(Served: e2e/test_front_routes.py.)"""

from __future__ import annotations

import pytest
from fake_server import bundled_info, plain_info
from fake_upstream import FakeUpstream, call, error, post

from backend_model.engine.detok import max_prompt_bytes
from console.core.template import chat_tokenizer

CONTEXT = 64
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tokenizer():
    return chat_tokenizer(None, bundled_info("smollm2"))


def test_a_prompt_is_tokenized_as_the_models_tokenizer_does(tokenizer) -> None:
    body = post(FakeUpstream(), "/tokenize", {"model": "smollm2", "prompt": "Hello there"}).json()
    assert body["tokens"] == tokenizer("Hello there")["input_ids"] and body["count"] == len(body["tokens"])


def test_the_models_context_length_comes_with_the_tokens() -> None:
    upstream = FakeUpstream(lengths={"smollm2": CONTEXT})
    assert post(upstream, "/tokenize", {"prompt": "hi"}).json()["max_model_len"] == CONTEXT


def test_messages_are_tokenized_through_the_chat_template(tokenizer) -> None:
    body = post(FakeUpstream(), "/tokenize", {"messages": HI, "return_token_strs": True}).json()
    text = tokenizer.apply_chat_template(HI, tokenize=False, add_generation_prompt=True)
    assert body["tokens"] == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert body["token_strs"] == tokenizer.convert_ids_to_tokens(body["tokens"])


def test_prompt_and_messages_together_are_refused() -> None:
    assert error(post(FakeUpstream(), "/tokenize", {"prompt": "x", "messages": HI})) == (400, "messages", None)


def test_neither_prompt_nor_messages_is_refused() -> None:
    assert error(post(FakeUpstream(), "/tokenize", {"model": "smollm2"})) == (400, "prompt", None)


def test_an_unknown_tokenize_field_is_refused_by_name() -> None:
    assert error(post(FakeUpstream(), "/tokenize", {"prompt": "x", "nope": 1})) == (400, "nope", None)


def test_a_flag_must_be_a_boolean() -> None:
    response = post(FakeUpstream(), "/tokenize", {"prompt": "x", "add_special_tokens": "yes"})
    assert error(response) == (400, "add_special_tokens", None)
    assert response.json()["error"]["message"] == "add_special_tokens must be true or false"


def test_a_prompt_longer_than_the_context_holds_is_refused_naming_the_limit(tokenizer) -> None:
    limit = max_prompt_bytes(tokenizer, None, CONTEXT)
    response = post(FakeUpstream(lengths={"smollm2": CONTEXT}), "/tokenize", {"prompt": "a" * (limit + 1)})
    assert error(response) == (400, "prompt", None)
    assert f"over the {limit} bytes" in response.json()["error"]["message"]


def test_a_prompt_at_the_limit_is_tokenized(tokenizer) -> None:
    limit = max_prompt_bytes(tokenizer, None, CONTEXT)
    response = post(FakeUpstream(lengths={"smollm2": CONTEXT}), "/tokenize", {"prompt": "a " * (limit // 2)})
    assert response.status_code == 200


def test_messages_longer_than_the_context_holds_are_refused() -> None:
    long = [{"role": "user", "content": "a" * 100_000}]
    response = post(FakeUpstream(lengths={"smollm2": CONTEXT}), "/tokenize", {"messages": long})
    assert error(response) == (400, "messages", None)


def test_detokenize_gives_the_text_of_the_tokens(tokenizer) -> None:
    tokens = tokenizer("Hello there", add_special_tokens=False)["input_ids"]
    assert post(FakeUpstream(), "/detokenize", {"tokens": tokens}).json() == {"prompt": "Hello there"}


def test_a_token_outside_the_vocabulary_is_refused() -> None:
    assert error(post(FakeUpstream(), "/detokenize", {"tokens": [10 ** 9]})) == (400, "tokens", None)


def test_tokens_must_be_given() -> None:
    assert error(post(FakeUpstream(), "/detokenize", {"model": "smollm2"})) == (400, "tokens", None)


def test_tokenizer_info_has_the_special_tokens_and_the_template(tokenizer) -> None:
    info = call(FakeUpstream(), "GET", "/tokenizer_info").json()
    assert info["eos_token"] == tokenizer.eos_token and info["chat_template"] == tokenizer.chat_template


def test_a_model_without_a_tokenizer_is_refused_naming_the_option() -> None:
    upstream = FakeUpstream(bundled_info("smollm2"), plain_info("p"))
    response = post(upstream, "/tokenize", {"model": "p", "prompt": "x"})
    assert error(response) == (400, "model", None) and "--tokenizer p=FOLDER" in response.json()["error"]["message"]

