"""The backend's figures under vLLM's names on the front's /metrics, without a server (served: test_front_routes)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from console.front.metrics_route import vllm_families

PAGE = """# HELP qaic_num_requests_running Sequences in the slots.
# TYPE qaic_num_requests_running gauge
qaic_num_requests_running{model="a",version="1"} 2
qaic_num_requests_running{model="b",version="1"} 5
# HELP qaic_generation_tokens_total Tokens generated.
# TYPE qaic_generation_tokens_total counter
qaic_generation_tokens_total{model="a",version="1"} 30
qaic_generation_tokens_total{model="a",version="2"} 12
# HELP qaic_time_to_first_token_seconds First token.
# TYPE qaic_time_to_first_token_seconds histogram
qaic_time_to_first_token_seconds_bucket{model="a",version="1",le="0.1"} 1
qaic_time_to_first_token_seconds_bucket{model="a",version="1",le="+Inf"} 3
qaic_time_to_first_token_seconds_sum{model="a",version="1"} 0.9
qaic_time_to_first_token_seconds_count{model="a",version="1"} 3
# HELP qaic_slots Slots.
# TYPE qaic_slots gauge
qaic_slots{model="a",version="1"} 8
# HELP nv_inference_count Triton's own.
# TYPE nv_inference_count counter
nv_inference_count{model="a",version="1"} 4
"""


def rendered(served: set[str] | None) -> dict[str, object]:
    from prometheus_client import CollectorRegistry, generate_latest

    class Families:
        def collect(self):
            return vllm_families(PAGE, served)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


def test_the_backends_figures_keep_their_types_under_vllms_names_and_label() -> None:
    families = rendered(None)
    assert set(families) == {"vllm:num_requests_running", "vllm:generation_tokens", "vllm:time_to_first_token_seconds"}
    running = families["vllm:num_requests_running"]
    assert running.type == "gauge" and {(s.labels["model_name"], s.value) for s in running.samples} == {("a", 2),
                                                                                                         ("b", 5)}
    tokens = families["vllm:generation_tokens"]  # the model's versions summed: vLLM's page has none
    assert tokens.type == "counter" and [(s.name, s.labels, s.value) for s in tokens.samples] == [
        ("vllm:generation_tokens_total", {"model_name": "a"}, 42)]
    ttft = families["vllm:time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    assert {(s.name, s.labels.get("le"), s.value) for s in ttft.samples} == {
        ("vllm:time_to_first_token_seconds_bucket", "0.1", 1), ("vllm:time_to_first_token_seconds_bucket", "+Inf", 3),
        ("vllm:time_to_first_token_seconds_sum", None, 0.9), ("vllm:time_to_first_token_seconds_count", None, 3)}


def test_only_the_served_models_are_passed_on() -> None:
    running = rendered({"b"})["vllm:num_requests_running"]
    assert [s.labels for s in running.samples] == [{"model_name": "b"}]
