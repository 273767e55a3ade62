"""The front's routes beside the OpenAI API, before a real tritonserver serving the embedded samples: ``/metrics`` (the
front's own figures and the models' under vLLM's names), vLLM's ``/tokenize``, ``/detokenize`` and
``/tokenizer_info``, and ``max_model_len`` in ``/v1/models``.

What the front says is compared with its sources: Triton's own metrics page and the model's tokenizer.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from helpers import wait_until
from prometheus_client.parser import text_string_to_metric_families

from console.clients import info_from_config
from console.core.template import chat_tokenizer
from console.fleet.pool import engine_config

pytestmark = pytest.mark.server

STREAM = "smollm2_decoupled"
WAIT = 30.0
VLLM = {"vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge", "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prompt_tokens": "counter", "vllm:generation_tokens": "counter", "vllm:request_success": "counter",
        "vllm:time_to_first_token_seconds": "histogram", "vllm:time_per_output_token_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram"}


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(family, sample: str, **labels: str) -> float:
    """The sum of a family's samples of that name whose labels include ``labels``."""
    return sum(s.value for s in family.samples if s.name == sample and labels.items() <= s.labels.items())


@pytest.fixture(scope="module")
def base(front) -> str:
    return front.base_url.removesuffix("/v1")


@pytest.fixture(scope="module")
def tokenizer(embedded_server):
    return chat_tokenizer(None, info_from_config(STREAM, embedded_server.handle.model_config(STREAM)))


def test_metrics_gives_the_models_figures_under_vllms_names_and_types_and_the_fronts_own(front, base,
                                                                                          embedded_server) -> None:
    before = families(httpx.get(f"{base}/metrics", timeout=30).text)
    sdk = openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)
    answer = sdk.completions.create(model=STREAM, prompt="The capital of France is", max_tokens=5)
    done = value(before["vllm:request_success"], "vllm:request_success_total", model_name=STREAM) + 1

    def counted() -> bool:
        now = families(httpx.get(f"{base}/metrics", timeout=30).text)
        return value(now["vllm:request_success"], "vllm:request_success_total", model_name=STREAM) >= done

    wait_until(counted, WAIT, "the front's /metrics to count the completion")
    page = httpx.get(f"{base}/metrics", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    now, triton = families(page.text), families(httpx.get(embedded_server.handle.metrics_url, timeout=30).text)
    for name, kind in VLLM.items():
        assert now[name].type == kind, name
        assert {s.labels.get("model_name") for s in now[name].samples} >= {STREAM}, name
        assert all("model" not in s.labels and "version" not in s.labels for s in now[name].samples)
    for ours in ("prompt_tokens", "generation_tokens"):  # the backend's counters, passed on as they are
        assert value(now[f"vllm:{ours}"], f"vllm:{ours}_total", model_name=STREAM) == \
            value(triton[f"qaic_{ours}"], f"qaic_{ours}_total", model="smollm2_decoupled")
    grew = value(now["vllm:generation_tokens"], "vllm:generation_tokens_total", model_name=STREAM) - \
        value(before["vllm:generation_tokens"], "vllm:generation_tokens_total", model_name=STREAM)
    assert grew == answer.usage.completion_tokens
    ttft = now["vllm:time_to_first_token_seconds"]
    buckets = [s for s in ttft.samples if s.name.endswith("_bucket") and s.labels["model_name"] == STREAM]
    assert buckets and buckets[-1].labels["le"] == "+Inf"
    assert buckets[-1].value == value(ttft, "vllm:time_to_first_token_seconds_count", model_name=STREAM) >= 1
    assert value(now["vllm:num_requests_running"], "vllm:num_requests_running", model_name=STREAM) == 0
    assert value(now["qaic_front_backend_metrics_up"], "qaic_front_backend_metrics_up") == 1
    route = {"route": "/v1/completions", "code": "200"}
    assert value(now["qaic_front_requests"], "qaic_front_requests_total", **route) == \
        value(before["qaic_front_requests"], "qaic_front_requests_total", **route) + 1
    assert value(now["qaic_front_request_seconds"], "qaic_front_request_seconds_count", route="/v1/completions") >= 1
    httpx.get(f"{base}/no/such/route", timeout=30)
    other = families(httpx.get(f"{base}/metrics", timeout=30).text)["qaic_front_requests"]
    assert value(other, "qaic_front_requests_total", route="other", code="404") >= 1  # no label per unknown path


def test_the_endpoint_pickers_names_are_on_the_fronts_page_of_a_live_backend(base) -> None:
    """deploy k8s's endpoint picker reads queue, running and KV-cache use by these names off each pod's front."""
    published = families(httpx.get(f"{base}/metrics", timeout=30).text)
    specs = [v for k, v in engine_config(adapters=False).items() if k.endswith("Spec") and v]
    assert len(specs) == 3 and all(published[name].samples for name in specs)


def test_tokenize_and_detokenize_are_the_models_tokenizers_in_vllms_shapes(base, tokenizer) -> None:
    text = "The capital of France is Paris."
    got = httpx.post(f"{base}/tokenize", json={"model": STREAM, "prompt": text}, timeout=30).json()
    ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    assert got == {"count": len(ids), "max_model_len": 512, "tokens": ids, "token_strs": None}
    strs = httpx.post(f"{base}/tokenize", json={"prompt": text, "return_token_strs": True}, timeout=30).json()
    assert strs["tokens"] == ids and strs["token_strs"] == tokenizer.convert_ids_to_tokens(ids)  # model left out
    messages = [{"role": "user", "content": "Hi"}]
    chat = httpx.post(f"{base}/tokenize", json={"model": STREAM, "messages": messages}, timeout=30).json()
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chat["tokens"] == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    back = httpx.post(f"{base}/detokenize", json={"model": STREAM, "tokens": ids}, timeout=30).json()
    assert back == {"prompt": text}
    for route, body, param in (("tokenize", {"prompt": 3}, "prompt"), ("tokenize", {"prompt": "a", "n": 1}, "n"),
                               ("detokenize", {"tokens": [1, len(tokenizer)]}, "tokens"),
                               ("detokenize", {"tokens": "12"}, "tokens")):
        refused = httpx.post(f"{base}/{route}", json=body, timeout=30)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param, refused.text


def test_tokenizer_info_gives_what_lm_evals_remote_tokenizer_reads(base, tokenizer) -> None:
    info = httpx.get(f"{base}/tokenizer_info", timeout=30).json()
    assert info["eos_token"] == tokenizer.eos_token and info["bos_token"] == tokenizer.bos_token
    assert info["chat_template"] == tokenizer.chat_template and info["tokenizer_class"] == type(tokenizer).__name__
    json.dumps(info)  # plain JSON: no file paths or objects
    assert not any(k.endswith("_file") for k in info)
    unknown = httpx.get(f"{base}/tokenizer_info", params={"model": "nope"}, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"


def test_models_list_each_models_context_length(front, embedded_repo) -> None:
    listed = httpx.get(f"{front.base_url}/models", timeout=30).json()["data"]
    for card in listed:
        compiled = json.loads((embedded_repo / card["id"] / "compile_config.json").read_text())
        assert card["max_model_len"] == compiled["ctx_len"], card["id"]
    one = httpx.get(f"{front.base_url}/models/{STREAM}", timeout=30).json()
    assert one["max_model_len"] == 512
