"""A lone Triton address is asked which protocol it speaks once, when the adapter is made; its accessors then only
read (a real HTTP listener on loopback stands for tritonserver's HTTP port)."""

from __future__ import annotations

import http.server
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
