"""The front's app around its routes, on a fake upstream: health, version, the key, the error shape of the
framework's own refusals, the body's limits, ``/metrics`` and the upstream closed with the app. (Served: e2e.)"""

from __future__ import annotations

import asyncio

from fake_upstream import FakeUpstream, call, client, error, post
from prometheus_client.parser import text_string_to_metric_families

from console.front.wire import MAX_BODY

PAGE = """# HELP qaic_num_requests_running Requests running.
# TYPE qaic_num_requests_running gauge
qaic_num_requests_running{model="smollm2",version="1"} 2.0
qaic_num_requests_running{model="gone",version="1"} 7.0
"""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            for s in f.samples}


def test_health_is_ok_while_the_upstream_is_live() -> None:
    assert call(FakeUpstream(), "GET", "/health").status_code == 200


def test_health_is_503_naming_the_upstream_when_it_is_down() -> None:
    upstream = FakeUpstream()
    upstream.alive = False
    response = call(upstream, "GET", "/health")
    assert error(response) == (503, None, None) and upstream.url in response.json()["error"]["message"]


def test_version_says_which_front_this_is() -> None:
    body = call(FakeUpstream(), "GET", "/version").json()
    assert body["server"] == "qaic-console" and body["api"] == "openai" and body["version"]


def test_an_unknown_route_is_a_404_in_openais_shape() -> None:
    response = call(FakeUpstream(), "GET", "/v1/nothing")
    assert error(response) == (404, None, None)
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_a_wrong_method_is_a_405_in_openais_shape() -> None:
    assert error(call(FakeUpstream(), "GET", "/v1/chat/completions"))[0] == 405


def test_a_route_without_the_key_is_a_401_invalid_api_key() -> None:
    assert error(call(FakeUpstream(), "GET", "/v1/models", api_key="k")) == (401, None, "invalid_api_key")


def test_a_wrong_key_is_refused_and_the_right_one_served() -> None:
    upstream = FakeUpstream()
    wrong = call(upstream, "GET", "/v1/models", api_key="k", headers={"authorization": "Bearer x"})
    right = call(upstream, "GET", "/v1/models", api_key="k", headers={"authorization": "Bearer k"})
    assert wrong.status_code == 401 and right.status_code == 200


def test_the_tokenizer_routes_need_the_key_too() -> None:
    assert call(FakeUpstream(), "POST", "/tokenize", api_key="k", json={"prompt": "hi"}).status_code == 401


def test_health_and_version_need_no_key() -> None:
    upstream = FakeUpstream()
    assert [call(upstream, "GET", path, api_key="k").status_code for path in ("/health", "/version")] == [200, 200]


def test_a_body_that_is_not_json_is_a_400() -> None:
    response = call(FakeUpstream(), "POST", "/v1/completions", content=b"{nope")
    assert error(response) == (400, None, None) and "not JSON" in response.json()["error"]["message"]


def test_a_body_that_is_not_an_object_is_a_400() -> None:
    assert "JSON object" in post(FakeUpstream(), "/v1/chat/completions", [1, 2]).json()["error"]["message"]


def test_a_body_over_the_limit_is_a_413_before_it_is_read() -> None:
    response = call(FakeUpstream(), "POST", "/v1/completions", content=b"{}",
                    headers={"content-length": str(MAX_BODY + 1)})
    assert response.status_code == 413


def test_metrics_count_the_fronts_requests_by_route_and_status() -> None:
    async def scrape() -> str:
        async with client(FakeUpstream()) as http:
            await http.get("/v1/models")
            return (await http.get("/metrics")).text

    figures = samples(asyncio.run(scrape()))
    assert figures[("qaic_front_requests_total", (("code", "200"), ("route", "/v1/models")))] == 1.0


def test_metrics_pass_the_served_models_figures_on_under_vllms_names() -> None:
    upstream = FakeUpstream()
    upstream.page = PAGE
    figures = samples(call(upstream, "GET", "/metrics").text)
    assert figures[("vllm:num_requests_running", (("model_name", "smollm2"),))] == 2.0
    assert not any(labels == (("model_name", "gone"),) for _, labels in figures)  # not served: left out
    assert figures[("qaic_front_backend_metrics_up", ())] == 1.0


def test_metrics_say_when_the_upstreams_page_was_not_read() -> None:
    assert samples(call(FakeUpstream(), "GET", "/metrics").text)[("qaic_front_backend_metrics_up", ())] == 0.0


def test_the_upstream_is_closed_with_the_app() -> None:
    upstream = FakeUpstream()
    call(upstream, "GET", "/health")
    assert upstream.closed
