"""Headless mode's behaviour on the fake server (``tests/fake_server.py``): what it prints, how it fails, how it
stops. The real server's answers (the modes agree, the chat template, the demo) stay in ``tests/e2e/test_headless.py``.
"""

from __future__ import annotations

import signal

from fake_server import FakeServer, bundled_info, hang, plain_info, reply
from helpers import assert_one_line_error, cli, json_lines

from console.clients import ServerFault

PROMPT = "My name is|Maroon bells"


def test_plain_output_and_echo(fake_server: FakeServer) -> None:
    result = cli("--prompt", "My name is", "--url", fake_server.url, "--max-tokens", "8", "--raw")
    assert result.exit_code == 0
    text = result.stdout.rstrip("\n")
    assert text.strip() and "[1/" not in text
    assert "length · 8 tokens · ttft" in result.stderr
    result = cli("--prompt", PROMPT, "--mode", "batch", "--url", fake_server.url, "--max-tokens", "8", "--echo", "-q",
                 "--raw")
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "[1/2]" and lines[1].startswith("My name is" + text)
    assert "[2/2]" in lines and any(line.startswith("Maroon bells") for line in lines)


def test_timeout_fails_clearly_and_cancels(fake_server: FakeServer) -> None:
    fake_server.enqueue(hang("My", " name", every=0.01))
    result = cli("--prompt", "My name is", "--url", fake_server.url, "--timeout", "0.3", "--max-tokens", "400",
                 "--json", "--raw")
    assert_one_line_error(result, "network timeout", "0.3 s", "cancelled on the server")
    row = json_lines(result)[0]
    assert row["finish_reason"] is None and row["error_kind"] == "timeout"
    assert row["cut_short"] is (row["text"] is not None)  # the text that came within 0.3 s, if any
    (request,) = fake_server.requests
    assert fake_server.saw_cancel(request.request_id) and request.model == "smollm2_decoupled"
    result = cli("--prompt", "My name is", "--url", fake_server.url, "--max-tokens", "4", "--json", "--raw")
    assert result.exit_code == 0 and json_lines(result)[0]["output_tokens"] == 4


def test_bad_input_gives_one_error_line(fake_server: FakeServer) -> None:
    url = fake_server.url
    assert_one_line_error(cli("--prompt", "My name is|", "--url", url), "prompt 2 of 2 is empty")
    assert_one_line_error(cli("--prompt", "  ", "--url", url), "empty")
    assert_one_line_error(cli("--prompt", "hi", "--url", "127.0.0.1:1"), "cannot reach tritonserver at 127.0.0.1:1")
    assert_one_line_error(cli("--prompt", "hi", "--url", url, "--model", "nope"), "nope")
    assert_one_line_error(cli("--prompt", "hi", "--url", url, "--timeout", "-1"), "timeout must be >= 0")
    assert_one_line_error(cli("--prompt", "hi", "--url", url, "--chat", "--tokenizer", "/nonexistent"),
                          "tokenizer folder /nonexistent does not exist")
    assert not fake_server.requests, "nothing bad was sent"


def test_a_server_error_and_an_unreachable_server_are_one_line_each(fake_server: FakeServer) -> None:
    from fake_server import failure

    fake_server.enqueue(failure("the model's backend stopped", ServerFault, 0.0, "Hello"))
    result = cli("--prompt", "hi", "--url", fake_server.url, "--raw", "--json")
    assert_one_line_error(result, "the model's backend stopped")
    assert json_lines(result)[0]["error_kind"] == "server"
    fake_server.reachable = False
    assert_one_line_error(cli("--prompt", "hi", "--url", fake_server.url, "--raw"), "cannot reach the fake server")


def test_a_model_without_a_chat_template_here_gets_the_prompt_as_typed(fake_server: FakeServer) -> None:
    fake_server.serve(plain_info("echo_llm"))
    fake_server.enqueue(reply("echo: hi", finish=""))
    result = cli("--prompt", "hi", "--url", fake_server.url, "--mode", "batch", "--model", "echo_llm", "--json")
    assert result.exit_code == 0, result.output
    assert json_lines(result)[0]["text"] == "echo: hi"
    assert "note: echo_llm has no chat template here" in result.stderr
    assert fake_server.requests[0].prompts == ["hi"]


def test_a_reply_cut_short_by_the_timeout_is_printed_when_piped(fake_server: FakeServer) -> None:
    fake_server.serve(bundled_info("stalling"))
    fake_server.enqueue(hang("one", " two", " three"), hang("one", " two", " three"))
    plain = cli("--prompt", "go", "--url", fake_server.url, "--model", "stalling", "--timeout", "1")
    as_json = cli("--prompt", "go", "--url", fake_server.url, "--model", "stalling", "--timeout", "1", "--json")
    assert plain.exit_code == 1 and plain.stdout == "one two three\n", plain.output  # CliRunner: no terminal
    status, error = plain.stderr.splitlines()[-2:]
    assert status.startswith("✖ timeout · 3 tokens · ttft ") and status.endswith(" · cut short")
    assert error.startswith("error: network timeout: stalling did not finish within 1 s; request cancelled")
    (row,) = json_lines(as_json)
    assert (row["text"], row["cut_short"], row["error_kind"], row["output_tokens"]) == ("one two three", True,
                                                                                       "timeout", 3)
    assert all(fake_server.saw_cancel(r.request_id) for r in fake_server.requests)


def test_ctrl_c_mid_reply_prints_what_came_and_cancels_on_the_server(fake_server: FakeServer, monkeypatch) -> None:
    """Ctrl-C (a real SIGINT) right after the 5th piece of text of a long reply, piped."""
    from console.commands import headless

    deltas: list[str] = []
    event = headless.Printer.event

    def ctrl_c_after_five(self, got) -> None:
        event(self, got)
        if type(got).__name__ == "TextDelta":
            deltas.append(got.text)
            if len(deltas) == 5:
                signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(headless.Printer, "event", ctrl_c_after_five)
    # what a qaic-console started from a terminal has, whatever the test process's handler is
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = cli("--prompt", "Once upon a time", "--url", fake_server.url, "--raw", "--max-tokens", "400")
    finally:
        signal.signal(signal.SIGINT, found)
    assert result.exit_code == 130, (found, result.output)
    assert result.stdout == "".join(deltas) + "\n" and len(deltas) == 5
    status, error = result.stderr.splitlines()[-2:]
    assert status.startswith("■ stopped · 5 tokens · ttft ") and status.endswith(" · cut short")
    assert error.startswith("error: interrupted (Ctrl-C) after ") and error.endswith("request cancelled on the server")
    assert fake_server.saw_cancel(fake_server.requests[0].request_id)


def test_a_stream_from_a_batch_model_says_why_it_has_no_ttft(fake_server: FakeServer) -> None:
    batch = cli("--prompt", "My name is", "--url", fake_server.url, "--model", "smollm2_kv", "--max-tokens", "4",
                "--raw")
    streamed = cli("--prompt", "My name is", "--url", fake_server.url, "--max-tokens", "4", "--raw")
    assert batch.exit_code == 0 and streamed.exit_code == 0, batch.output + streamed.output
    assert "note: smollm2_kv is a batch model (not decoupled)" in batch.stderr
    assert "batch model" not in streamed.stderr


def test_a_decoupled_model_answering_one_eos_is_not_called_a_batch_model(fake_server: FakeServer) -> None:
    """Its one response carries no text (an end of sequence first): the config, not the responses, tells its kind."""
    fake_server.enqueue(reply(finish="eos", output_tokens=1))
    result = cli("--prompt", "Say OK.", "--url", fake_server.url, "--raw", "--max-tokens", "8", "--json")
    (row,) = json_lines(result)
    assert (row["finish_reason"], row["output_tokens"], row["text"]) == ("eos", 1, ""), row
    assert row["time_to_first_token_ms"] is None  # one response, as a batch model's: yet it streams
    assert "batch model" not in result.stderr and "not decoupled" not in result.stderr


def test_each_prompt_reports_figures_ending_at_its_own_last_token(fake_server: FakeServer) -> None:
    from fake_server import replies

    fake_server.enqueue(replies(["yes", "."], [" Once"] * 48, every=0.005, finish=("eos", "length")))
    result = cli("--prompt", "Reply with one word: yes.|Once upon a time", "--url", fake_server.url, "--max-tokens",
                 "48", "--json", "--raw")
    early, late = json_lines(result)
    assert (early["finish_reason"], late["finish_reason"]) == ("eos", "length"), (early, late)
    assert early["request_latency_ms"] < late["request_latency_ms"]  # not the whole request's latency
    assert early["output_token_throughput"] > early["output_tokens"] / (late["request_latency_ms"] / 1000)


def test_images_go_with_every_prompt_each_in_a_request_of_its_own(fake_server: FakeServer, tmp_path) -> None:
    from fake_server import with_images

    fake_server.serve(with_images(bundled_info("vlm")))
    cat, dog = tmp_path / "cat.png", tmp_path / "dog.jpg"
    cat.write_bytes(b"\x89PNG\r\n\x1a\ncat")
    dog.write_bytes(b"\xff\xd8\xffdog")
    result = cli("--prompt", "What is it?|And now?", "--url", fake_server.url, "--model", "vlm", "--image", str(cat),
                 "--image", str(dog), "--max-tokens", "2", "--chat", "-q")
    assert result.exit_code == 0, result.output
    first, second = fake_server.requests
    assert [r.params.images for r in (first, second)] == [(cat.read_bytes(), dog.read_bytes())] * 2
    assert [r.messages for r in (first, second)] == [[[{"role": "user", "content": "What is it?"}]],
                                                     [[{"role": "user", "content": "And now?"}]]]


def test_images_to_a_model_that_takes_none_or_from_a_missing_file_are_refused_before_sending(
        fake_server: FakeServer, tmp_path) -> None:
    image = tmp_path / "cat.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\ncat")
    assert_one_line_error(cli("--prompt", "hi", "--url", fake_server.url, "--image", str(image)),
                          "model smollm2_decoupled takes no images", "image_text_to_text")
    assert_one_line_error(cli("--prompt", "hi", "--url", fake_server.url, "--image", str(tmp_path / "gone.png")),
                          "gone.png")
    assert fake_server.requests == []
