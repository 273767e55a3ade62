"""Pure client helpers: prompts, URLs, genai-perf figures, the generate endpoint's JSON."""

from __future__ import annotations

import socket

import pytest

from console.clients import (
    ClientError,
    GenerationParams,
    aggregate,
    info_from_config,
    interface_of,
    normalize_url,
    reply_stats,
    split_prompts,
)
from console.clients.stats import percentile

PROMPTS = ["My name is", "Maroon bells"]
CONFIG = {  # the shape of Triton's config JSON (HTTP; gRPC as_json gives dims as strings)
    "name": "m", "backend": "python", "max_batch_size": 0, "model_transaction_policy": {"decoupled": True},
    "input": [{"name": "prompt", "data_type": "TYPE_STRING", "dims": ["-1"]},
              {"name": "id", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
              {"name": "max_tokens", "data_type": "TYPE_INT32", "dims": [1], "optional": True},
              {"name": "stop", "data_type": "TYPE_STRING", "dims": [-1], "optional": True},
              {"name": "exclude_input_in_output", "data_type": "TYPE_BOOL", "dims": [1], "optional": True}],
    "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}],
    "parameters": {"use_kv_cache": {"string_value": "false"}, "hf_model_name": {"string_value": "embedded"}},
}




def test_split_prompts() -> None:
    assert split_prompts("My name is|Maroon bells") == PROMPTS
    assert split_prompts("a \\| b|c") == ["a | b", "c"]
    assert split_prompts("one") == ["one"]
    for bad in ("", "  ", "a|", "|b", "a| |b"):
        with pytest.raises(ClientError, match="empty"):
            split_prompts(bad)


def test_normalize_url() -> None:
    assert normalize_url("http://localhost:8000/") == "localhost:8000"
    assert normalize_url("grpc://h:1") == "h:1"
    assert normalize_url("8001") == "127.0.0.1:8001"
    with pytest.raises(ClientError):
        normalize_url(" ")


def test_reply_stats_follow_genai_perf() -> None:
    stats = reply_stats([0.5, 0.6, 0.8, 0.9], latency=1.1, output_tokens=7, input_tokens=3)
    assert stats.time_to_first_token == 0.5
    assert stats.inter_token_latency == pytest.approx((0.9 - 0.5) / 6)  # to this prompt's last text
    assert stats.inter_token_latency_p90 == pytest.approx(percentile([0.1, 0.2, 0.1], 90))
    assert stats.request_latency == 0.9  # this prompt's own last text, not the request's end (1.1 s)
    assert stats.output_token_throughput == pytest.approx(7 / 0.9)
    assert stats.output_tokens == 7 and stats.input_tokens == 3
    figures = stats.as_dict()
    assert figures["time_to_first_token_ms"] == 500.0 and figures["request_latency_ms"] == 900.0
    batch = reply_stats([], latency=2.0, output_tokens=10, streamed=False)
    assert batch.time_to_first_token is None and batch.inter_token_latency is None
    assert percentile([1, 2, 3, 4], 50) == 2.5
    summary = aggregate([stats, batch])
    assert summary["request_latency"]["max"] == 2.0
    assert summary["inter_token_latency"]["p50"] == stats.inter_token_latency


def test_model_config_and_generate_body() -> None:
    info = info_from_config("m", CONFIG)
    assert info.decoupled and not info.use_kv_cache and info.embedded and info.default_timeout == 6000
    assert info.input("prompt").datatype == "BYTES" and info.input("prompt").dims == (-1,)
    assert info.input("max_tokens").optional and info.input("top_k") is None
    interface = interface_of(info)
    params = GenerationParams(max_tokens=4, top_k=2, stop=("\n",))
    body = interface.generate_body(["a"], params, "42")
    assert body == {"prompt": "a", "id": "42", "max_tokens": 4, "stop": ["\n"], "exclude_input_in_output": True}
    assert interface.generate_body(PROMPTS, GenerationParams(), "7")["prompt"] == PROMPTS
    assert interface.parse_generate({"text_output": "x", "output_tokens": 3}, 1)["text_output"] == ["x"]
    with pytest.raises(ClientError, match="2 text_output values for 1 prompts"):
        interface.parse_generate({"text_output": ["x", "y"]}, 1)
    plain = info_from_config("v", {**CONFIG, "input": [{"name": "text_input", "data_type": "TYPE_STRING"}]})
    assert interface_of(plain).name == "text"
    no_text = info_from_config("v", {**CONFIG, "input": [{"name": "ids", "data_type": "TYPE_INT64"}]})
    with pytest.raises(ClientError, match="interface this console does not speak"):
        interface_of(no_text)




def test_an_over_long_model_name_is_refused_before_any_connection() -> None:
    from console.clients import ClientError, model_info

    with pytest.raises(ClientError, match=r"model name is too long \(400 bytes in UTF-8\).*at most 255 bytes"):
        model_info("127.0.0.1:1", "é" * 200)


@pytest.mark.parametrize(("protocol", "name"), [("http", "HTTP"), ("grpc", "gRPC")])
def test_nothing_listening_is_said_in_words(protocol: str, name: str) -> None:
    """Not urllib's raw ``<urlopen error [Errno 111] Connection refused>``, nor gRPC's paragraph."""
    from console.clients import model_info

    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ClientError) as error:
        model_info(f"127.0.0.1:{port}", "m", protocol=protocol)
    assert str(error.value) == f"cannot reach tritonserver at 127.0.0.1:{port} ({name}): connection refused"
