"""Headless mode, the ``client`` commands and the seed's client scripts against a real tritonserver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import wait_for_log

from console.cli import main
from console.server.embedded import DEMO_NOTE, DEMO_PROMPTS, SERVE_TIP
from console.server.logparse import startup_line as _startup_line

ROOT = Path(__file__).resolve().parents[2]
SEED_TESTS = ROOT / "assets" / "llm-models" / "tests"
PROMPT = "My name is|Maroon bells"
JSON_FIELDS = (
    "prompt", "text", "finish_reason", "time_to_first_token_ms", "inter_token_latency_ms",
    "output_token_throughput", "output_tokens", "request_latency_ms",
)


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def json_lines(result: Result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def assert_one_line_error(result: Result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0]
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


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


def test_plain_output_and_echo(embedded_server) -> None:
    result = cli("--prompt", "My name is", "--url", embedded_server.grpc_url, "--max-tokens", "8", "--raw")
    assert result.exit_code == 0
    text = result.stdout.rstrip("\n")
    assert text.strip() and "[1/" not in text
    assert "length · 8 tokens · ttft" in result.stderr
    result = cli("--prompt", PROMPT, "--mode", "batch", "--url", embedded_server.http_url, "--max-tokens", "8",
                 "--echo", "-q", "--raw")
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "[1/2]" and lines[1].startswith("My name is" + text)
    assert "[2/2]" in lines and any(line.startswith("Maroon bells") for line in lines)


def test_separate_urls_and_grpc_batch(embedded_server) -> None:
    result = cli("--prompt", "My name is", "--mode", "batch", "--protocol", "grpc", "--grpc-url",
                 embedded_server.grpc_url, "--http-url", "127.0.0.1:1", "--max-tokens", "4", "--json", "--raw")
    assert result.exit_code == 0, result.output
    assert json_lines(result)[0]["output_tokens"] == 4


def test_timeout_fails_clearly_and_cancels(embedded_server) -> None:
    before = {line for line in embedded_server.log_tail(500) if "finish=cancelled" in line}
    result = cli("--prompt", "My name is", "--url", embedded_server.grpc_url, "--timeout", "0.3",
                 "--max-tokens", "400", "--json", "--raw")
    assert_one_line_error(result, "network timeout", "0.3 s", "cancelled on the server")
    row = json_lines(result)[0]
    assert row["finish_reason"] is None and row["error_kind"] == "timeout"
    assert row["cut_short"] is (row["text"] is not None)  # the text that came within 0.3 s, if any
    line = wait_for_log(embedded_server, "finish=cancelled", before=before)
    assert line is not None and "smollm2_decoupled: request" in line
    result = cli("--prompt", "My name is", "--url", embedded_server.grpc_url, "--max-tokens", "4", "--json", "--raw")
    assert result.exit_code == 0 and json_lines(result)[0]["output_tokens"] == 4


def test_bad_input_gives_one_error_line(embedded_server) -> None:
    grpc = embedded_server.grpc_url
    assert_one_line_error(cli("--prompt", "My name is|", "--url", grpc), "prompt 2 of 2 is empty")
    assert_one_line_error(cli("--prompt", "  ", "--url", grpc), "empty")
    assert_one_line_error(cli("--prompt", "hi", "--url", "127.0.0.1:1"), "cannot reach tritonserver at 127.0.0.1:1")
    assert_one_line_error(cli("--prompt", "hi", "--url", grpc, "--model", "nope"), "nope")
    assert_one_line_error(cli("--prompt", "hi", "--url", grpc, "--timeout", "-1"), "timeout must be >= 0")
    assert_one_line_error(cli("--prompt", "hi", "--url", grpc, "--chat", "--tokenizer", "/nonexistent"),
                          "tokenizer folder /nonexistent does not exist")


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


def test_each_prompt_reports_figures_ending_at_its_own_last_token(embedded_server) -> None:
    quick = "<|im_start|>user\nReply with one word: yes.<|im_end|>\n<|im_start|>assistant\n"
    typed = quick.replace("|", "\\|")  # the chat markers' bars are literal, not a prompt separator
    result = cli("--prompt", f"{typed}|Once upon a time", "--url", embedded_server.grpc_url, "--max-tokens", "48",
                 "--json", "--raw")
    early, late = json_lines(result)
    assert (early["finish_reason"], late["finish_reason"]) == ("eos", "length"), (early, late)
    assert early["request_latency_ms"] < late["request_latency_ms"]  # not the whole request's latency
    assert early["output_token_throughput"] > early["output_tokens"] / (late["request_latency_ms"] / 1000)


def test_a_stream_from_a_batch_model_says_why_it_has_no_ttft(embedded_server) -> None:
    batch = cli("--prompt", "My name is", "--url", embedded_server.grpc_url, "--model", "smollm2_kv",
                "--max-tokens", "4", "--raw")
    streamed = cli("--prompt", "My name is", "--url", embedded_server.grpc_url, "--max-tokens", "4", "--raw")
    assert batch.exit_code == 0 and streamed.exit_code == 0, batch.output + streamed.output
    assert "note: smollm2_kv is a batch model (not decoupled)" in batch.stderr
    assert "batch model" not in streamed.stderr


def test_a_decoupled_model_answering_one_eos_is_not_called_a_batch_model(embedded_server) -> None:
    """Its one response carries no text (an end of sequence first): the config, not the responses, tells its kind."""
    done = "<\\|im_start\\|>user\nSay OK.<\\|im_end\\|>\n<\\|im_start\\|>assistant\nOK."  # greedy: EOS next
    result = cli("--prompt", done, "--url", embedded_server.grpc_url, "--raw", "--max-tokens", "8", "--json")
    (row,) = json_lines(result)
    assert (row["finish_reason"], row["output_tokens"], row["text"]) == ("eos", 1, ""), row
    assert row["time_to_first_token_ms"] is None  # one response, as a batch model's: yet it streams
    assert "batch model" not in result.stderr and "not decoupled" not in result.stderr


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


def test_a_model_without_a_chat_template_here_gets_the_prompt_as_typed(tmp_path: Path, python_model) -> None:
    from helpers import ECHO_LLM

    from console.server import TritonServer

    python_model(tmp_path, "echo_llm", ECHO_LLM, llm=True)
    with TritonServer(tmp_path) as server:
        result = cli("--prompt", "hi", "--url", server.http_url, "--mode", "batch", "--model", "echo_llm", "--json")
    assert result.exit_code == 0, result.output
    assert json_lines(result)[0]["text"] == "echo: hi"
    assert "note: echo_llm has no chat template here" in result.stderr


# a decoupled model that streams three words at once, then waits (until cancelled) before its end
STALLING = """\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def words(text):
    return pb_utils.InferenceResponse([pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for word in ("one", " two", " three"):
                sender.send(words(word))
            give_up = time.monotonic() + 120
            while not sender.is_cancelled() and time.monotonic() < give_up:
                time.sleep(0.02)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def test_a_reply_cut_short_by_the_timeout_is_printed_when_piped(tmp_path: Path, python_model) -> None:
    from console.server import TritonServer

    folder = python_model(tmp_path, "stalling", STALLING, llm=True)
    with (folder / "config.pbtxt").open("a") as config:
        config.write("model_transaction_policy { decoupled: true }\n")
    with TritonServer(tmp_path) as server:
        plain = cli("--prompt", "go", "--url", server.grpc_url, "--model", "stalling", "--timeout", "2")
        as_json = cli("--prompt", "go", "--url", server.grpc_url, "--model", "stalling", "--timeout", "2", "--json")
    assert plain.exit_code == 1 and plain.stdout == "one two three\n", plain.output  # CliRunner: no terminal
    status, error = plain.stderr.splitlines()[-2:]
    assert status.startswith("✖ timeout · 3 tokens · ttft ") and status.endswith(" · cut short")
    assert error.startswith("error: network timeout: stalling did not finish within 2 s; request cancelled")
    (row,) = json_lines(as_json)
    assert (row["text"], row["cut_short"], row["error_kind"], row["output_tokens"]) == ("one two three", True,
                                                                                       "timeout", 3)


def test_ctrl_c_mid_reply_prints_what_came_and_cancels_on_the_server(embedded_server, monkeypatch) -> None:
    """Ctrl-C (a real SIGINT) right after the 5th piece of text of a long reply, piped."""
    import signal

    from console import headless

    deltas: list[str] = []
    event = headless.Printer.event

    def ctrl_c_after_five(self, got) -> None:
        event(self, got)
        if type(got).__name__ == "TextDelta":
            deltas.append(got.text)
            if len(deltas) == 5:
                signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(headless.Printer, "event", ctrl_c_after_five)
    before = {line for line in embedded_server.log_tail(500) if "finish=cancelled" in line}
    # what a qaic-console started from a terminal has, whatever the test process's handler is
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = cli("--prompt", "Once upon a time", "--url", embedded_server.grpc_url, "--raw", "--max-tokens", "400")
    finally:
        signal.signal(signal.SIGINT, found)
    assert result.exit_code == 130, (found, result.output)
    assert result.stdout == "".join(deltas) + "\n" and len(deltas) == 5
    status, error = result.stderr.splitlines()[-2:]
    assert status.startswith("■ stopped · 5 tokens · ttft ") and status.endswith(" · cut short")
    assert error.startswith("error: interrupted (Ctrl-C) after ") and error.endswith("request cancelled on the server")
    assert wait_for_log(embedded_server, "finish=cancelled", before=before) is not None


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
