"""OpenAI-compatible servers without a server: base URLs, the request body, and chunks (as vLLM and llama.cpp
send them, built like the ``openai`` client builds them: ``construct``, no validation) folded into the
console's events and figures."""

from __future__ import annotations

import pytest
from helpers import Listener
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from console.clients import ClientError, GenerationParams, TextDelta, base_url, interface_of, openai_info
from console.clients.openai_call import ChunkFolder, answer, openai_call
from console.core.adapters import adapter_for, kind_of


def chat_chunk(content: str | None, finish: str | None = None) -> ChatCompletionChunk:
    delta = {} if content is None else {"content": content}
    return ChatCompletionChunk.construct(**{"id": "c", "object": "chat.completion.chunk", "created": 0,
                                               "model": "m", "choices": [{"index": 0, "delta": delta,
                                                                          "finish_reason": finish}]})


def usage_chunk(completion: int, prompt: int) -> ChatCompletionChunk:
    """vLLM's last chunk with ``stream_options.include_usage``: no choices, the usage."""
    return ChatCompletionChunk.construct(**{"id": "c", "object": "chat.completion.chunk", "created": 0,
                                               "model": "m", "choices": [], "usage": {
                                                   "completion_tokens": completion, "prompt_tokens": prompt,
                                                   "total_tokens": completion + prompt}})


def test_urls_name_the_kind_of_server() -> None:
    assert base_url("127.0.0.1:8080") == "http://127.0.0.1:8080/v1"
    assert base_url("http://host:8080/v1/") == "http://host:8080/v1"
    assert base_url("https://proxy/llm/v1") == "https://proxy/llm/v1"
    assert kind_of("http://host:8080/v1").kind == "openai" and kind_of("host:8001").kind == "triton"
    assert kind_of("host:8080", "openai").kind == "openai"
    with pytest.raises(ClientError, match="api must be one of auto, triton, openai"):
        kind_of("host:8080", "grpc")
    server = adapter_for("host:8080/v1")
    assert (server.kind, server.http_url, server.grpc_url) == ("openai", "http://host:8080/v1", None)
    assert server.url("batch") == ("http://host:8080/v1", "openai")
    with pytest.raises(ClientError, match="generate mode is Triton's"):
        server.url("generate")
    triton = adapter_for("host:8000", grpc_url="host:9001")
    assert (triton.kind, triton.url("batch"), triton.url("stream")) == ("triton", ("host:8000", "http"),
                                                                         ("host:9001", "grpc"))
    grpc_only = adapter_for("", grpc_url="host:8001")  # HTTP is its neighbour below
    assert (grpc_only.url("batch"), grpc_only.url("stream")) == (("host:8000", "http"), ("host:8001", "grpc"))


def test_the_body_carries_the_controls_the_api_has_and_top_k_as_an_extension() -> None:
    info = openai_info("m")
    assert info.modes == ("stream", "batch") and info.default_timeout == 600
    params = GenerationParams(max_tokens=8, temperature=0.5, top_p=0.9, top_k=40, seed=3, stop=("\n",),
                              repetition_penalty=1.2)
    assert interface_of(info).ignored(params) == ["repetition_penalty"]
    chat = openai_call("host:1/v1", info, ["q"], params, messages=[[{"role": "user", "content": "q"}]])
    body = chat.request_body()
    assert body == {"model": "m", "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["\n"],
                    "stream": True, "extra_body": {"top_k": 40}, "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": "q"}]}
    raw = openai_call("host:1/v1", info, ["My name is"], GenerationParams(), streaming=False).request_body()
    # the consoles' default is greedy; the API's is to sample: an unset temperature goes as 0. The console asks for
    # new text only (no "echo": a front end that shows the prompt adds it itself)
    assert raw == {"model": "m", "stream": False, "prompt": "My name is", "temperature": 0.0}


def test_a_b_calls_split_into_one_request_per_prompt_with_its_own_messages() -> None:
    messages = [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    call = openai_call("host:1/v1", openai_info("m"), ["a", "b"], messages=messages)
    assert not interface_of(call.info).batches_prompts
    second = call.part(1)
    assert second.prompts == ["b"] and second.messages == [messages[1]] and second.request_id.endswith("-1")
    assert second.request_body()["messages"] == messages[1]


def test_images_go_as_image_url_data_urls_before_the_prompts_text_and_never_on_completions() -> None:
    png = b"\x89PNG\r\n\x1a\nrest"
    params = GenerationParams(images=(png,))
    messages = [[{"role": "system", "content": "brief"}, {"role": "user", "content": "What is it?"}]]
    body = openai_call("host:1/v1", openai_info("m"), ["What is it?"], params, messages=messages).request_body()
    assert body["messages"] == [{"role": "system", "content": "brief"}, {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgpyZXN0"}},
        {"type": "text", "text": "What is it?"}]}]
    with pytest.raises(ClientError, match="images go in chat requests"):
        openai_call("host:1/v1", openai_info("m"), ["x"], params).request_body()


def test_chat_chunks_become_text_deltas_and_usage_counts_the_tokens() -> None:
    folder = ChunkFolder(chat=True)
    events = []
    for at, chunk in ((0.2, chat_chunk(None)), (0.3, chat_chunk("Par")), (0.4, chat_chunk("is")),
                      (0.5, chat_chunk(".", "stop")), (0.5, usage_chunk(3, 12))):
        events += list(folder.add(chunk, at))
    assert events == [TextDelta(0, "Par", 0.3, first=True), TextDelta(0, "is", 0.4), TextDelta(0, ".", 0.5)]
    reply = folder.reply("q", 0.6)
    assert reply.text == "Paris." and reply.finish_reason == "stop" and reply.ok
    stats = reply.stats
    assert stats.output_tokens == 3 and stats.input_tokens == 12 and stats.output_tokens_source == "usage"
    assert stats.time_to_first_token == 0.3 and stats.request_latency == 0.5
    assert stats.inter_token_latency == pytest.approx(0.1)


def test_without_usage_the_chunks_are_counted_and_said_so() -> None:
    folder = ChunkFolder(chat=False)
    for at, text in ((0.1, " a"), (0.2, ""), (0.3, " b")):  # llama.cpp's last chunk carries no text
        completion = Completion.construct(**{"id": "c", "object": "text_completion", "created": 0, "model": "m",
                                                "choices": [{"index": 0, "text": text, "logprobs": None,
                                                             "finish_reason": "length" if at == 0.3 else None}]})
        list(folder.add(completion, at))
    reply = folder.reply("p", 0.3)
    assert reply.text == " a b" and reply.finish_reason == "length"
    assert reply.stats.output_tokens == 2 and reply.stats.output_tokens_source == "chunks"
    assert reply.stats.as_dict()["output_tokens_source"] == "chunks"


def test_an_unstreamed_answer_has_a_latency_and_the_servers_count() -> None:
    whole = ChatCompletion.construct(**{
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
        "usage": {"completion_tokens": 3, "prompt_tokens": 12, "total_tokens": 15}})
    reply = answer(whole, "q", chat=True, latency=0.5)
    assert reply.text == "Paris." and reply.finish_reason == "stop"
    assert reply.stats.time_to_first_token is None and reply.stats.output_tokens == 3
    assert reply.stats.output_token_throughput == pytest.approx(6.0)


def test_each_kind_of_openai_server_gets_the_extensions_it_takes_and_its_own_up_to_the_context() -> None:
    """vLLM (owned_by vllm) and llama.cpp (owned_by me/llamacpp) take min_tokens and a repetition penalty beside
    top_k; max_tokens 0 goes as vLLM's max_model_len, as llama.cpp's 0 (unlimited), and to another server not at
    all, saying the server's default applies."""
    from console.clients import openai_info

    params = GenerationParams(max_tokens=0, repetition_penalty=1.2, min_tokens=3, top_k=5)
    vllm = openai_info("m", {"id": "m", "owned_by": "vllm", "max_model_len": 1024})
    llama = openai_info("m", {"id": "m", "owned_by": "me"})
    other = openai_info("m", {"id": "m", "owned_by": "someone"})
    assert interface_of(vllm).body(params) == ({"max_tokens": 1024, "temperature": 0.0},
                                               {"repetition_penalty": 1.2, "min_tokens": 3, "top_k": 5})
    assert interface_of(llama).body(params) == ({"max_tokens": 0, "temperature": 0.0},
                                                {"repeat_penalty": 1.2, "min_tokens": 3, "top_k": 5})
    assert interface_of(other).body(params) == ({"temperature": 0.0}, {"top_k": 5})
    assert interface_of(other).ignored(params) == ["repetition_penalty", "min_tokens"]
    assert not interface_of(vllm).ignored(params) and not interface_of(vllm).notes(params)
    assert "the server's default applies (OpenAI's API: 16 tokens on /v1/completions)" in interface_of(other).notes(
        params)[0]


def test_the_key_goes_only_to_the_server_openai_base_url_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from console.clients.openai_api import api_key, key_note, listing

    monkeypatch.setenv("OPENAI_API_KEY", "sk-k")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-k")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    def calls(url: str) -> None:  # a listing, then a call (the console's two clients)
        listing(url)
        assert "ok" in str(list(openai_call(url, "m", ["hi"], streaming=False)))

    listener = Listener()  # real requests
    try:
        assert api_key(listener.url) == ""  # no address given for the key: it goes nowhere
        calls(listener.url)
        assert "POST /v1/completions" in listener.requests and not any(
            {"authorization", "openai-organization", "openai-project"} & set(h) for h in listener.headers)
        sent = len(listener.headers)
        monkeypatch.setenv("OPENAI_BASE_URL", listener.url.replace("127.0.0.1", "127.0.0.1.") + "/")
        assert api_key(listener.url) == ""  # another name: another server
        monkeypatch.setenv("OPENAI_BASE_URL", listener.url.upper().replace("HTTP:", "http:") + "/")
        calls(listener.url)
        assert listener.requests[sent:] == listener.requests[:sent] and len(listener.requests) > sent
        assert set(listener.seen[sent:]) == {"Bearer sk-k"} and listener.headers[-1]["openai-organization"] == "org-k"
    finally:
        listener.close()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://vllm.lan:8000/v1/")
    assert api_key("http://VLLM.lan:8000/v1") == "sk-k"
    for elsewhere in ("http://vllm.lan:8001/v1", "https://vllm.lan:8000/v1", "http://127.0.0.1:8000/v1",
                      "http://vllm.lan.evil.example:8000/v1"):
        assert api_key(elsewhere) == "", elsewhere
    assert key_note("http://127.0.0.1:8000/v1") == (
        "OPENAI_API_KEY is not sent to http://127.0.0.1:8000/v1: it goes only to the server OPENAI_BASE_URL names "
        "(OPENAI_BASE_URL=http://127.0.0.1:8000/v1 sends it)")
    monkeypatch.delenv("OPENAI_API_KEY")
    assert key_note("http://127.0.0.1:8000/v1") == ""  # no key: nothing to say
