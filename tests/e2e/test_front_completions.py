"""``/v1/completions`` as eval harnesses and batch tools use it, before a real tritonserver serving the embedded
samples: a prompt's own tokens scored (``echo`` with ``logprobs``), several prompts and token ids in one request,
``n`` answers.

The scores are compared with the in-process CPU engine (fp32, the samples' dimensions) scoring the same tokens, and the
answers with what the console's own gRPC stream gets for each prompt alone.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from console.clients import GenerationParams, info_from_config, stream
from console.core.template import chat_tokenizer
from console.metrics.scrape import scrape

pytestmark = pytest.mark.server

FP32, STREAM = "smollm2_decoupled_fp32", "smollm2_decoupled"
PROMPT = "The capital of France is Paris, and the capital of Italy is"
PROMPTS = ["My name is", "The capital of France is", "1, 2, 3,"]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def sdk(front) -> openai.OpenAI:
    return openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def tokenizer(embedded_server):
    return chat_tokenizer(None, info_from_config(FP32, embedded_server.handle.model_config(FP32)))


@pytest.fixture(scope="module")
def engine():
    """The CPU engine in process, fp32, at the served samples' dimensions."""
    from console.eval.paths import in_process

    return in_process("fp32", "embedded", lambda message: None)


def engine_logprobs(engine, ids: list[int]) -> list[float]:
    """Each token's log-probability after the ones before it, by the in-process engine's own loop."""
    from console.eval.likelihood import score

    return [-nll for nll in score(engine, [ids[:1]], [ids[1:]])[0].nll]


def alone(server, model: str, prompt: str, **controls) -> str:
    """The model's answer to ``prompt`` alone, over the console's gRPC stream."""
    return stream(server.grpc_url, model, [prompt], GenerationParams(**controls)).replies()[0].text


def post(front, **body) -> httpx.Response:
    return httpx.post(f"{front.base_url}/completions", json=body, timeout=120)


@pytest.mark.parametrize("as_ids", [False, True])
def test_echo_with_logprobs_scores_the_prompt_as_the_in_process_engine_does(sdk, embedded_server, tokenizer, engine,
                                                                           as_ids) -> None:
    ids = tokenizer(PROMPT)["input_ids"]
    prompt = ids if as_ids else PROMPT
    only = sdk.completions.create(model=FP32, prompt=prompt, echo=True, logprobs=1, max_tokens=0).choices[0]
    assert only.text == PROMPT and only.finish_reason == "length"
    got = only.logprobs
    assert got.tokens == [tokenizer.decode(ids[:i + 1])[len(tokenizer.decode(ids[:i])):] for i in range(len(ids))]
    assert got.token_logprobs[0] is None and got.top_logprobs[0] is None  # nothing comes before the first
    want = engine_logprobs(engine, ids)
    delta = max(abs(a - b) for a, b in zip(got.token_logprobs[1:], want))
    print(f"max |delta logprob| front vs in-process engine: {delta:.2e} over {len(want)} tokens")
    assert len(got.token_logprobs) == len(ids) and delta < TOLERANCE
    assert all(len(top) == 1 and max(top.values()) >= lp for top, lp in zip(got.top_logprobs[1:],
                                                                           got.token_logprobs[1:]))
    assert got.text_offset == [len("".join(got.tokens[:i])) for i in range(len(ids))]
    one = sdk.completions.create(model=FP32, prompt=prompt, echo=True, logprobs=1, max_tokens=1, temperature=0)
    answer = one.choices[0]
    assert answer.logprobs.token_logprobs[:-1] == got.token_logprobs  # lm-eval's request: the prompt, then a token
    assert answer.text == PROMPT + answer.logprobs.tokens[-1] == PROMPT + alone(embedded_server, FP32, PROMPT,
                                                                                max_tokens=1)
    assert one.usage.prompt_tokens == len(ids) and one.usage.completion_tokens == 1
    chunks = [c.choices[0] for c in sdk.completions.create(model=FP32, prompt=prompt, echo=True, logprobs=1,
                                                           max_tokens=1, stream=True) if c.choices]
    assert "".join(c.text for c in chunks) == answer.text
    assert [v for c in chunks if c.logprobs for v in c.logprobs.token_logprobs] == answer.logprobs.token_logprobs


def test_many_prompts_text_or_token_ids_get_a_choice_each_from_one_request(sdk, front, embedded_server,
                                                                           tokenizer) -> None:
    want = [alone(embedded_server, STREAM, p, max_tokens=8) for p in PROMPTS]
    url = embedded_server.handle.metrics_url
    before = scrape(url).value("nv_inference_request_success", STREAM) or 0
    answer = sdk.completions.create(model=STREAM, prompt=PROMPTS, max_tokens=8)
    assert [c.index for c in answer.choices] == [0, 1, 2] and [c.text for c in answer.choices] == want
    assert scrape(url).value("nv_inference_request_success", STREAM) == before + 1  # the prompts went together
    ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
    assert answer.usage.prompt_tokens == sum(map(len, ids)) and answer.usage.completion_tokens == 24
    by_ids = sdk.completions.create(model=STREAM, prompt=ids, max_tokens=8)
    assert [c.text for c in by_ids.choices] == want and by_ids.usage == answer.usage
    one = sdk.completions.create(model=STREAM, prompt=ids[1], max_tokens=8).choices
    assert [c.text for c in one] == want[1:2]
    streamed: dict[int, str] = {}
    for chunk in sdk.completions.create(model=STREAM, prompt=PROMPTS, max_tokens=8, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + choice.text
    assert streamed == dict(enumerate(want))


def test_n_answers_each_prompt_each_with_its_own_seed(sdk, embedded_server) -> None:
    sampled = {"temperature": 1.0, "top_p": 0.95, "max_tokens": 8}
    answer = sdk.completions.create(model=STREAM, prompt=PROMPTS[:2], n=3, seed=7, **sampled)
    assert [c.index for c in answer.choices] == list(range(6))
    for c in answer.choices:  # choice p * n + i: prompt p's answer with seed 7 + i
        assert c.text == alone(embedded_server, STREAM, PROMPTS[c.index // 3], seed=7 + c.index % 3, **sampled)
    assert len({c.text for c in answer.choices[:3]}) > 1
    greedy = sdk.completions.create(model=STREAM, prompt=PROMPTS[0], n=2, best_of=2, max_tokens=8)
    assert greedy.choices[0].text == greedy.choices[1].text == alone(embedded_server, STREAM, PROMPTS[0], max_tokens=8)
    assert greedy.usage.completion_tokens == 16
    chunks = list(sdk.completions.create(model=STREAM, prompt=PROMPTS[:2], n=2, max_tokens=8, stream=True,
                                         stream_options={"include_usage": True}))
    texts: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert sorted(texts) == [0, 1, 2, 3] and texts[0] == texts[1] and texts[2] == texts[3]
    assert chunks[-1].usage.completion_tokens == 32


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"prompt": [[]]}, "prompt", "prompt 1 of 1"),
    ({"prompt": ["a", 3]}, "prompt", "prompt 2 of 2"),
    ({"prompt": [1, 2, 10 ** 6]}, "prompt", "outside the vocabulary"),
    ({"prompt": "a", "n": 0}, "n", "from 1"),
    ({"prompt": "a", "n": 2, "best_of": 3}, "best_of", "equal n"),
    ({"prompt": ["a"] * 100, "n": 3}, "n", "256"),
    ({"prompt": "a", "n": 2, "seed": 2 ** 63 - 1}, "seed", "seed + 1"),
    ({"prompt": "a", "logit_bias": {"1": 2}}, "logit_bias", "logit_bias"),
])
def test_what_cannot_be_served_is_refused_by_name_in_openais_shape(front, body, param, words) -> None:
    response = post(front, model=STREAM, max_tokens=2, **body)
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == param and words in error["message"], response.text


def test_chat_n_and_embeddings_are_refused_by_name(front) -> None:
    chat = httpx.post(f"{front.base_url}/chat/completions", timeout=60,
                      json={"model": STREAM, "messages": [{"role": "user", "content": "Hi"}], "n": 2})
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "n"
    embeddings = httpx.post(f"{front.base_url}/embeddings", json={"model": STREAM, "input": "Hi"}, timeout=60)
    error = embeddings.json()["error"]
    assert (embeddings.status_code, error["param"]) == (400, "model") and "embedding model" in error["message"], \
        embeddings.text
    assert json.loads(post(front, model=STREAM, prompt="Hi", max_tokens=1).text)["choices"][0]["index"] == 0
