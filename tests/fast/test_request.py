"""The request pipeline without a server: endpoints, settings, chat template and history, timeouts, inputs."""

from __future__ import annotations

import dataclasses

import pytest

from console.clients import BatchCall, ClientError, GenerationParams, ModelInfo, StreamCall, Tensor
from console.core.adapters.triton import TritonAdapter
from console.core.request import Exchange, Settings, prepare

INPUTS = (Tensor("prompt", "BYTES"), Tensor("max_tokens", "INT32", (1,), True),
          Tensor("exclude_input_in_output", "BOOL", (1,), True))
OUTPUTS = (Tensor("text_output", "BYTES"),)
STREAMING = ModelInfo("smollm2_decoupled", True, True, "embedded", inputs=INPUTS, outputs=OUTPUTS)
BATCH = dataclasses.replace(STREAMING, name="smollm2_causal", decoupled=False, use_kv_cache=False)
HERE = TritonAdapter("127.0.0.1:8000", "127.0.0.1:8001")
HISTORY = [{"role": "user", "content": "Earlier question"}, {"role": "assistant", "content": "Earlier answer"}]


def test_endpoints_name_what_is_missing() -> None:
    assert HERE.url("stream") == ("127.0.0.1:8001", "grpc")
    assert HERE.url("batch") == ("127.0.0.1:8000", "http")
    assert HERE.url("batch", "grpc") == ("127.0.0.1:8001", "grpc")
    with pytest.raises(ClientError, match="batch mode needs the server's HTTP endpoint"):
        TritonAdapter(grpc_url="h:1").url("batch")
    with pytest.raises(ClientError, match="stream mode needs the server's gRPC endpoint"):
        TritonAdapter(http_url="h:1").url("stream")


def test_settings_are_checked() -> None:
    with pytest.raises(ClientError, match="mode must be one of"):
        Settings("m", mode="fast")
    with pytest.raises(ClientError, match="timeout must be >= 0"):
        Settings("m", timeout=-1)


def test_stream_and_batch_calls_get_their_timeouts_and_inputs() -> None:
    params = GenerationParams(max_tokens=8, top_k=3)
    ready = prepare(HERE, Settings("smollm2_decoupled", params=params), ["a", "b"], info=STREAMING)
    call = ready.call
    assert isinstance(call, StreamCall) and call.url == "127.0.0.1:8001"
    assert call.timeouts.network == 600 and call.timeouts.idle == 300
    assert ready.sent == ["a", "b"] and call.params.status_key  # the call's own key for its status questions
    assert ready.ignored == ["top_k"]  # the model declares no top_k input

    ready = prepare(HERE, Settings("smollm2_causal", mode="batch", timeout=0, echo=True), ["a"], info=BATCH)
    assert isinstance(ready.call, BatchCall) and ready.call.protocol == "http"
    assert ready.call.timeouts.network is None and ready.call.timeouts.idle is None
    assert prepare(HERE, Settings("smollm2_causal", mode="batch"), ["a"], info=BATCH).call.timeouts.network == 6000
    with pytest.raises(ClientError, match="decoupled .* use stream mode"):
        prepare(HERE, Settings("smollm2_decoupled", mode="batch"), ["a"], info=STREAMING)


def test_a_single_prompt_carries_the_history_and_a_b_does_not() -> None:
    chat = Settings("smollm2_decoupled", chat=True, system="Be brief.")
    one = prepare(HERE, chat, ["New question"], HISTORY, info=STREAMING).sent
    assert len(one) == 1 and "Earlier answer" in one[0] and "Be brief." in one[0] and "<|im_start|>user" in one[0]
    two = prepare(HERE, chat, ["First", "Second"], HISTORY, info=STREAMING).sent
    assert len(two) == 2 and not any("Earlier" in s for s in two) and all("Be brief." in s for s in two)
    with pytest.raises(ClientError, match="needs a local tokenizer folder"):
        prepare(HERE, Settings("other", chat=True), ["x"], info=dataclasses.replace(STREAMING, hf_model_name="org/m"))


def test_an_exchange_cancelled_before_its_call_sends_nothing() -> None:
    settings = Settings("smollm2_decoupled")
    exchange = Exchange.new(settings, ["a"])
    exchange.cancel()  # Stop pressed while the request was being prepared
    turn = exchange.run(HERE, settings, info=STREAMING)
    assert turn.failure is not None and turn.failure.kind == "cancelled" and not turn.replies
    assert turn.sent == ["a"] and turn.sent_at is not None


def test_an_exchange_that_cannot_be_prepared_ends_its_turn_with_the_reason() -> None:
    settings = Settings("smollm2_decoupled")
    turn = Exchange.new(settings, ["a"]).run(TritonAdapter(http_url="h:1"), settings, info=STREAMING)
    assert turn.failure is not None and "stream mode needs the server's gRPC endpoint" in turn.failure.message
    assert not turn.replies


def test_the_turn_records_the_controls_as_they_go_out() -> None:
    """A server that samples unless told is sent temperature 0 (the consoles' greedy default): the record says so."""
    from console.clients import openai_info
    from console.core.adapters import adapter_for

    params = GenerationParams(max_tokens=8, repetition_penalty=1.2)
    ready = prepare(adapter_for("h:1/v1"), Settings("m", params=params), ["a"], info=openai_info("m"))
    assert ready.controls == {"max_tokens": 8, "temperature": 0.0} and ready.ignored == ["repetition_penalty"]
    assert prepare(HERE, Settings("smollm2_decoupled", params=params), ["a"], info=STREAMING).controls == {
        "max_tokens": 8}


def test_an_exchange_pulled_frame_by_frame_folds_in_the_callers_thread_and_closing_it_cancels(fake_server) -> None:
    from fake_server import reply

    from console.core.adapters import adapter_for

    server = adapter_for(fake_server.url)
    settings = Settings("smollm2_decoupled", params=GenerationParams(max_tokens=4))
    done = Exchange.new(settings, ["a"])
    assert list(done.frames(server, settings, (), None, 0.05))[-1] is True
    assert done.turn.replies[0].text == "Once upon a time" and done.turn.sent_at is not None

    fake_server.enqueue(reply(*[" word"] * 400, every=0.02))
    stopped = Exchange.new(settings, ["b"])
    frames = stopped.frames(server, settings, (), None, 0.05)
    while not stopped.turn.partial:
        assert next(frames) is False
    frames.close()  # a page that went away
    assert fake_server.saw_cancel(stopped.turn.request_id)
