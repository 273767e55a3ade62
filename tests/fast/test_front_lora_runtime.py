"""vLLM's runtime LoRA routes on the front, on a fake upstream: served only with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``
and behind the front's key; a load adds the adapter to its base model's list and an unload takes it out (the
upstream reloads the model: :meth:`FakeUpstream.set_adapters`), with vLLM's answers and refusals; a refusal of the
upstream leaves every adapter served. (Served, with a real reload: e2e/test_generated_served.py.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from fake_server import plain_info, with_adapters
from fake_upstream import FakeUpstream, client, error, full_info

from console.front.errors import APIError
from console.front.routes.lora import enabled
from console.front.upstream import with_adapters as config_with

LOAD, UNLOAD = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"


def served() -> FakeUpstream:
    return FakeUpstream(with_adapters(full_info("base"), "alpha", max_loras=1), plain_info("other"))


def calls(upstream: FakeUpstream, *requests: tuple[str, dict[str, Any]], api_key: str | None = None,
          runtime_lora: bool = True) -> list[httpx.Response]:
    """Each (path, body) posted in turn to one app on ``upstream``."""

    async def run() -> list[httpx.Response]:
        async with client(upstream, api_key, runtime_lora=runtime_lora) as http:
            return [await http.post(path, json=body) for path, body in requests]

    return asyncio.run(run())


def test_the_routes_are_served_only_when_vllms_variable_says_so() -> None:
    [response] = calls(served(), (LOAD, {"lora_name": "c", "lora_path": "adapters/c"}), runtime_lora=False)
    assert response.status_code == 404
    assert [enabled({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": v}) for v in ("True", "1", "0", "")] == [True, True, False,
                                                                                                  False]
    assert not enabled({})


def test_a_load_adds_the_adapter_to_its_base_and_an_unload_takes_it_out() -> None:
    upstream = served()
    loaded, listed, again, removed, gone = calls(
        upstream, (LOAD, {"lora_name": "gamma", "lora_path": "adapters/gamma"}), (UNLOAD, {"lora_name": "nothing"}),
        (LOAD, {"lora_name": "gamma", "lora_path": "adapters/other"}), (UNLOAD, {"lora_name": "alpha"}),
        (UNLOAD, {"lora_name": "alpha"}))
    assert (loaded.status_code, loaded.text) == (200, "Success: LoRA adapter 'gamma' added successfully.")
    assert (removed.status_code, removed.text) == (200, "Success: LoRA adapter 'alpha' removed successfully.")
    assert error(listed) == (404, "lora_name", "model_not_found")
    assert error(again) == (400, "lora_name", None) and "already been loaded" in again.json()["error"]["message"]
    assert error(gone) == (404, "lora_name", "model_not_found")
    assert upstream.changes == [("base", {"alpha": "adapters/alpha", "gamma": "adapters/gamma"}),
                                ("base", {"gamma": "adapters/gamma"})]


def test_after_an_unload_the_adapter_is_a_404_naming_what_is_served() -> None:
    async def run() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with client(served(), runtime_lora=True) as http:
            before = await http.post("/v1/completions", json={"model": "alpha", "prompt": "x", "max_tokens": 2})
            await http.post(UNLOAD, json={"lora_name": "alpha"})
            after = await http.post("/v1/completions", json={"model": "alpha", "prompt": "x", "max_tokens": 2})
            return before, after, await http.get("/v1/models")

    before, after, models = asyncio.run(run())
    assert before.status_code == 200 and error(after) == (404, "model", "model_not_found")
    assert "(served: base, other)" in after.json()["error"]["message"]
    assert [card["id"] for card in models.json()["data"]] == ["base", "other"]


def test_load_inplace_points_an_adapter_at_another_folder() -> None:
    upstream = served()
    [response] = calls(upstream, (LOAD, {"lora_name": "alpha", "lora_path": "adapters/alpha2", "load_inplace": True}))
    assert response.status_code == 200 and upstream.changes == [("base", {"alpha": "adapters/alpha2"})]


def test_bad_requests_are_refused_before_the_upstream_is_asked() -> None:
    upstream = served()
    bodies = ({"lora_name": "c"}, {"lora_path": "adapters/c"}, {"lora_name": "../c", "lora_path": "adapters/c"},
              {"lora_name": "base", "lora_path": "adapters/c"}, {"lora_name": "c", "lora_path": 3},
              {"lora_name": "c", "lora_path": "adapters/c", "lora_int_id": 3})
    answers = calls(upstream, *((LOAD, body) for body in bodies), (UNLOAD, {}))
    assert [error(a)[:2] for a in answers] == [(400, None), (400, None), (400, "lora_name"), (400, "lora_name"),
                                               (400, "lora_path"), (400, "lora_int_id"), (400, "lora_name")]
    assert "unsafe adapter name '../c'" in answers[2].json()["error"]["message"]
    assert upstream.changes == []


def test_the_base_is_the_one_model_taking_adapters_or_the_one_named() -> None:
    upstream = FakeUpstream(with_adapters(full_info("one"), "alpha"), with_adapters(full_info("two"), "beta"),
                            plain_info("plain"))
    body = {"lora_name": "c", "lora_path": "adapters/c"}
    unnamed, named, plain = calls(upstream, (LOAD, body), (LOAD, {**body, "base_model_name": "two"}),
                                  (LOAD, {**body, "lora_name": "d", "base_model_name": "plain"}))
    assert error(unnamed) == (400, "base_model_name", None)
    assert "those served: one, two" in unnamed.json()["error"]["message"]
    assert named.status_code == 200 and upstream.changes == [("two", {"beta": "adapters/beta", "c": "adapters/c"})]
    assert error(plain) == (404, "base_model_name", "model_not_found")


def test_the_routes_need_the_fronts_key() -> None:
    upstream = served()
    body = {"lora_name": "c", "lora_path": "adapters/c"}
    [refused] = calls(upstream, (LOAD, body), api_key="secret")
    assert refused.status_code == 401 and upstream.changes == []


def test_a_reload_the_server_refuses_leaves_the_adapters_served() -> None:
    upstream = served()
    upstream.reload_refusal = APIError(400, "base cannot serve these adapters: adapter folder '/etc' is not inside")
    refused, models = calls(upstream, (LOAD, {"lora_name": "c", "lora_path": "/etc"}),
                            (LOAD, {"lora_name": "alpha", "lora_path": "x"}))
    assert error(refused)[0] == 400 and "is not inside" in refused.json()["error"]["message"]
    assert json.loads(upstream.infos["base"].parameters["lora_adapters"]) == {"alpha": "adapters/alpha"}
    assert error(models)[0] == 400  # alpha is still there


def test_a_models_config_serves_the_new_list_and_max_loras_follows_it() -> None:
    def config(adapters: dict[str, str], limit: str) -> dict[str, Any]:
        return {"name": "m", "parameters": {"lora_adapters": {"string_value": json.dumps(adapters)},
                                            "max_loras": {"string_value": limit}, "engine": {"string_value": "cpu"}}}

    two = {"a": "adapters/a", "b": "adapters/b"}
    grown = config_with(config({"a": "adapters/a"}, "1"), two)["parameters"]
    assert json.loads(grown["lora_adapters"]["string_value"]) == two and grown["max_loras"]["string_value"] == "2"
    assert grown["engine"] == {"string_value": "cpu"}
    three = {**two, "c": "adapters/c"}
    assert config_with(config(two, "1"), three)["parameters"]["max_loras"]["string_value"] == "1"  # the operator's
    assert config_with(config(two, "2"), {})["parameters"]["max_loras"]["string_value"] == "1"
    assert "max_loras" not in config_with({"name": "m"}, two)["parameters"]
