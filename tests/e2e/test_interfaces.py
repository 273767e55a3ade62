"""The console against other Triton LLM interfaces: a real tritonserver serving stand-ins with vLLM's,
TensorRT-LLM's ensemble's and a plain STRING->STRING model's exact inputs and outputs.

The stand-ins (tests/fixtures/llm_interfaces) answer with the names of the inputs they received, so
these tests see what the console sent; Triton itself rejects an input a model does not declare.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from console.cli import main
from console.clients import Cancelled, Failure, GenerationParams, TextDelta, stream

PROMPTS = ["My name is", "Maroon bells"]
STREAMING = ("vllm_model", "vllm_legacy", "ensemble")
ONE_PROMPT_MODELS = ("vllm_model", "vllm_legacy", "ensemble", "ensemble_batch", "text_model")


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def replies(result: Result) -> list[dict]:
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def words(text: str) -> tuple[str, list[str]]:
    """(the stand-in's ``[received inputs ...]`` marker, the words after it)."""
    marker, _, rest = text.partition("]")
    return marker.lstrip("["), rest.split()


def test_models_lists_each_interface(llm_server) -> None:
    result = cli("models", "--url", llm_server.http_url)
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[2:]}
    assert result.stdout.startswith("tritonserver 2.")
    assert rows["vllm_model"][2:4] == ["vllm", "stream+batch"] and rows["vllm_legacy"][2] == "vllm"
    assert rows["ensemble"][2:4] == ["tensorrt-llm", "stream+batch"]
    assert rows["ensemble_batch"][2:4] == ["tensorrt-llm", "batch"]
    assert rows["text_model"][2:4] == ["text", "batch"]
    assert rows["vllm_model"][5] == "-"  # every control has an input (sampling_parameters)
    assert rows["ensemble"][5] == "min_tokens"  # this ensemble declares no minimum length
    assert "max_tokens," in rows["text_model"] and "stop" in rows["text_model"]


@pytest.mark.parametrize("model", STREAMING)
def test_headless_streams_two_prompts_as_two_requests(llm_server, model: str) -> None:
    result = cli("--prompt", "|".join(PROMPTS), "--url", llm_server.grpc_url, "--model", model,
                 "--max-tokens", "5", "--top-k", "3", "--json")
    rows = replies(result)
    assert [r["index"] for r in rows] == [0, 1]
    for row, prompt in zip(rows, PROMPTS):
        marker, rest = words(row["text"])
        assert rest == [*prompt.upper().split(), ".", "."][:4], row  # new text only: no prompt, no repeats
        assert row["finish_reason"] in ("length", "")
        assert row["time_to_first_token_ms"] is not None and row["output_tokens"] >= 1
        received = marker.split(" sp=")[0].split("+")
        assert "stream" in received
        assert ("exclude_input_in_output" in received) == (model == "vllm_model")  # sent only where declared
        if model.startswith("vllm"):
            # the controls travel in sampling_parameters, with temperature 0: vLLM samples unless told otherwise
            assert marker.endswith("sp=max_tokens,temperature,top_k")
        else:
            assert {"max_tokens", "top_k"} <= set(received) and "sampling_parameters" not in received
    if model == "vllm_model":  # return_num_output_tokens: the streamed counts add up
        assert rows[0]["output_tokens"] == 5 and rows[0]["finish_reason"] == "length"


@pytest.mark.parametrize(("model", "protocol"), [
    ("vllm_model", "http"), ("vllm_model", "grpc"), ("vllm_legacy", "http"), ("ensemble", "grpc"),
    ("ensemble_batch", "http"), ("ensemble_batch", "grpc"), ("text_model", "http"),
])
def test_headless_batch(llm_server, model: str, protocol: str) -> None:
    url = llm_server.grpc_url if protocol == "grpc" else llm_server.http_url
    args = ["--prompt", "|".join(PROMPTS), "--mode", "batch", "--protocol", protocol, "--url", url, "--model", model,
            "--max-tokens", "4", "--seed", "7", "--json"]
    rows = replies(cli(*args))
    for row, prompt in zip(rows, PROMPTS):
        marker, rest = words(row["text"])  # the prompt is cut off, whether the model was told or not
        expected = prompt.upper().split()[:3] if model != "text_model" else [*prompt.upper().split(), "."]
        assert rest[: len(expected)] == expected[: len(rest)] and rest and not row["text"].startswith(prompt), row
        assert row["time_to_first_token_ms"] is None  # one response
        received = marker.split(" sp=")[0].split("+")
        assert ("stream" in received) == (model != "text_model")  # declared: sent, false
        if model.startswith("ensemble"):
            assert ("seed" if model == "ensemble_batch" else "random_seed") in received  # seed's alias
    echoed = replies(cli(*args[:-1], "--echo", "--json"))
    assert all(r["text"].startswith(p + "[") for r, p in zip(echoed, PROMPTS))  # the model's echo, or ours


def test_controls_a_model_lacks_are_named_and_not_sent(llm_server) -> None:
    result = cli("--prompt", "My name is", "--mode", "batch", "--url", llm_server.http_url, "--model", "text_model",
                 "--max-tokens", "4", "--top-k", "3")
    assert result.exit_code == 0, result.output
    assert "note: text_model has no input for max_tokens, top_k: not sent" in result.stderr
    assert words(result.stdout)[0] == "INPUT_TEXT"


def test_stop_cancels_every_request_of_a_fan_out(llm_server) -> None:
    call = stream(llm_server.grpc_url, "vllm_model", PROMPTS, GenerationParams(max_tokens=5000))
    seen = []
    for event in call:
        seen.append(event)
        if isinstance(event, TextDelta):
            call.cancel()
    assert isinstance(seen[-1], Failure) and seen[-1].error is Cancelled


def test_bench_on_a_vllm_model(llm_server, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": p, "max_tokens": 4}) + "\n" for p in PROMPTS))
    for url, mode in ((llm_server.grpc_url, "stream"), (llm_server.http_url, "batch")):
        result = cli("bench", "--url", url, "--model", "vllm_model", "--mode", mode, "--concurrency", "2",
                     "--requests", "4", "--warmup", "0", "--input-file", str(prompts), "--plots", "none",
                     "--output-dir", str(tmp_path / mode), "--json", "-q")
        level = json.loads((tmp_path / mode / "bench.json").read_text())["levels"][0]
        assert (level["request_count"], level["error_count"], result.exit_code) == (4, 0, 0), level["errors"]
        assert level["output_sequence_length"]["avg"] == 4.0  # the stand-in's token count, summed per stream
        assert ("time_to_first_token" in level) == (mode == "stream"), level


def test_models_at_the_grpc_port_says_so_in_one_line(llm_server) -> None:
    result = cli("models", "--url", llm_server.grpc_url)  # its HTTP neighbour (port - 1) is some other port here
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{llm_server.grpc_url} is the gRPC endpoint; HTTP guessed at" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
