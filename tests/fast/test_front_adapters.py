"""LoRA adapters on the front, on a fake upstream whose model serves two: ``model="<adapter>"`` goes to its base
model with the adapter as ``lora_name`` (the ``openai`` SDK's requests too), ``/v1/models`` lists each adapter with
its ``parent`` as vLLM does, an unknown name is a 404 naming every model and adapter served, and ``/metrics`` has
the ``vllm:lora_requests_info`` gauge the Gateway API Inference Extension's endpoint picker reads.
(Served: e2e/test_front.py.)"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import httpx
import openai
from fake_server import bundled_info, plain_info, with_adapters
from fake_upstream import FakeUpstream, call, client, error, full_info, post
from prometheus_client.parser import text_string_to_metric_families

from console.clients import Tensor
from console.fleet.pool import engine_config
from console.front.app import create_app
from console.front.state import Front


def served() -> FakeUpstream:
    return FakeUpstream(with_adapters(full_info("base"), "alpha", "beta", max_loras=2), plain_info("other"))


def test_models_lists_each_adapter_after_its_base_with_its_parent() -> None:
    cards = call(served(), "GET", "/v1/models").json()["data"]
    assert [(c["id"], c["parent"], c["root"]) for c in cards] == [
        ("base", None, "base"), ("alpha", "base", "adapters/alpha"), ("beta", "base", "adapters/beta"),
        ("other", None, "other")]
    assert {"id", "object", "created", "owned_by", "root", "parent"} <= set(cards[1])  # vLLM's card


def test_an_adapters_card_has_its_bases_context_length() -> None:
    upstream = served()
    upstream.lengths["base"] = 2048
    card = call(upstream, "GET", "/v1/models/beta").json()
    assert (card["id"], card["parent"], card["max_model_len"]) == ("beta", "base", 2048)


def test_an_adapter_is_asked_of_its_base_with_its_name_as_lora_name() -> None:
    upstream = served()
    body = post(upstream, "/v1/chat/completions", {"model": "alpha", "messages": [{"role": "user", "content": "Hi"}]})
    assert body.status_code == 200 and body.json()["model"] == "alpha"
    post(upstream, "/v1/completions", {"model": "base", "prompt": "Hi"})
    assert [(s.model, s.params.get("lora_name")) for s in upstream.sent] == [("base", "alpha"), ("base", None)]


def test_an_adapters_completion_scores_its_prompt_with_the_adapter() -> None:
    base = with_adapters(full_info("base"), "beta")
    scores = Tensor("continuation", "BYTES", (1,), True)
    upstream = FakeUpstream(dataclasses.replace(base, inputs=(*base.inputs, scores)))
    post(upstream, "/v1/completions", {"model": "beta", "prompt": [1, 2, 3], "echo": True, "logprobs": 0,
                                       "max_tokens": 1})
    assert [s.params.continuations is not None for s in upstream.sent] == [False, True]  # answered, then scored
    assert {s.params.get("lora_name") for s in upstream.sent} == {"beta"}


def test_an_unknown_model_is_a_404_naming_the_models_and_adapters_served() -> None:
    response = post(served(), "/v1/completions", {"model": "gamma", "prompt": "Hi"})
    assert error(response) == (404, "model", "model_not_found")
    assert "served: base, alpha, beta, other" in response.json()["error"]["message"]


def test_no_model_named_is_the_one_bases_own_weights() -> None:
    upstream = FakeUpstream(with_adapters(full_info("base"), "alpha"))
    post(upstream, "/v1/completions", {"prompt": "Hi"})
    assert [(s.model, s.params.get("lora_name")) for s in upstream.sent] == [("base", None)]


def test_the_openai_sdk_asks_for_an_adapter_by_its_name() -> None:
    upstream = served()

    async def ask() -> tuple[str, str, list[str]]:
        app = create_app(Front(upstream))
        async with app.router.lifespan_context(app):
            http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
            sdk = openai.AsyncOpenAI(base_url="http://front/v1", api_key="none", http_client=http)
            listed = [m.id async for m in sdk.models.list()]
            chat = await sdk.chat.completions.create(model="beta", messages=[{"role": "user", "content": "Hi"}])
            await sdk.close()
            return chat.model, chat.choices[0].message.content or "", listed

    model, text, listed = asyncio.run(ask())
    assert (model, text) == ("beta", "Hello world") and listed == ["base", "alpha", "beta", "other"]
    assert (upstream.sent[0].model, upstream.sent[0].params.get("lora_name")) == ("base", "beta")


def lora_samples(text: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "vllm:lora_requests_info"]


def test_metrics_say_which_adapters_are_loaded_and_which_wait_for_an_answer() -> None:
    upstream = served()
    gate = asyncio.Event()

    async def scrape_while_waiting() -> tuple[str, str]:
        async with client(upstream) as http:
            asked = asyncio.create_task(http.post("/v1/completions", json={"model": "beta", "prompt": "Hi"}))
            await asyncio.wait_for(upstream.received.wait(), 10)
            during = (await http.get("/metrics")).text
            gate.set()
            await asyncio.wait_for(asked, 10)
            return during, (await http.get("/metrics")).text

    upstream.enqueue([gate, {"text_output": ["x"], "finish_reason": ["stop"]}])
    before = time.time()
    during, after = asyncio.run(scrape_while_waiting())
    [(labels, stamp)] = lora_samples(during)
    assert labels == {"max_lora": "2", "running_lora_adapters": "alpha,beta", "waiting_lora_adapters": "beta"}
    assert stamp >= before  # the time it was made: the endpoint picker takes the newest
    assert lora_samples(after)[0][0]["waiting_lora_adapters"] == ""


def test_metrics_have_no_lora_gauge_without_adapters() -> None:
    assert lora_samples(call(FakeUpstream(bundled_info("smollm2")), "GET", "/metrics").text) == []


BACKEND_PAGE = """# TYPE qaic_num_requests_running gauge
qaic_num_requests_running{model="base",version="1"} 1.0
# TYPE qaic_num_requests_waiting gauge
qaic_num_requests_waiting{model="base",version="1"} 0.0
# TYPE qaic_kv_cache_usage_perc gauge
qaic_kv_cache_usage_perc{model="base",version="1"} 0.25
"""


def test_every_name_the_endpoint_pickers_config_maps_is_on_the_fronts_page() -> None:
    """deploy k8s's picker reads these off each pod's front (the live backend's: e2e/test_front_routes.py)."""
    upstream = served()
    upstream.page = BACKEND_PAGE
    published = {f.name for f in text_string_to_metric_families(call(upstream, "GET", "/metrics").text)}
    specs = [v for k, v in engine_config(adapters=True).items() if k.endswith("Spec") and v]
    assert len(specs) == 4 and set(specs) <= published
