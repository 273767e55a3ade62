"""The web console's gate on a bare Starlette app (a websocket route included, which the page has none of):
the token, then the cookie; Gradio's one start-up call; Host and Origin."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from console.web.login import STARTUP, Gate, Login

HOST = {"Host": "127.0.0.1:7860"}  # what the test client's websockets send otherwise is "testserver"


async def hello(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("hello")
    await websocket.close()


def client(login: Login) -> TestClient:
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("page")),
                            Route(STARTUP, lambda request: PlainTextResponse("started")),
                            WebSocketRoute("/ws", hello)],
                    middleware=[Middleware(Gate, login=login)])
    return TestClient(app, base_url="http://127.0.0.1:7860", follow_redirects=False)


def test_the_token_gives_the_cookie_and_the_cookie_lets_in() -> None:
    login = Login.new("127.0.0.1")
    browser = client(login)
    refused = browser.get("/")
    assert refused.status_code == 401 and refused.text.startswith("qaic-console web: log in first")
    assert browser.get("/?token=nope").status_code == 401
    logged = browser.get(f"/?__theme=dark&token={login.token}")
    assert logged.status_code == 303 and logged.headers["location"] == "/?__theme=dark"  # the token leaves the bar
    assert logged.headers["set-cookie"] == f"{login.cookie}={login.token}; Path=/; HttpOnly; SameSite=Strict"
    assert browser.get("/").text == "page"  # the cookie now
    assert browser.get("/", headers={"cookie": f"{login.cookie}=nope"}).status_code == 401
    with browser.websocket_connect("/ws", headers={**HOST, "cookie": f"{login.cookie}={login.token}"}) as ws:
        assert ws.receive_text() == "hello"
    script = client(login)
    assert script.get("/", headers={"Authorization": f"Bearer {login.token}"}).text == "page"
    with pytest.raises(WebSocketDisconnect) as closed, script.websocket_connect("/ws", headers=HOST):
        pass
    assert closed.value.code == 1008


def test_gradios_start_up_call_passes_once() -> None:
    login = Login.new("127.0.0.1")
    anyone = client(login)
    assert anyone.get(STARTUP).text == "started" and login.opened
    assert anyone.get(STARTUP).status_code == 401


def test_host_and_origin_are_checked_without_a_login_too() -> None:
    login = Login.new("127.0.0.1", auth=False)
    anyone = client(login)
    assert anyone.get("/").text == "page"
    assert anyone.get("/", headers={"Host": "localhost:7860"}).text == "page"
    assert anyone.get("/", headers={"Host": "[::1]:7860"}).text == "page"
    rebound = anyone.get("/", headers={"Host": "attacker.example:7860"})
    assert rebound.status_code == 403 and "DNS rebinding" in rebound.text
    assert anyone.get("/", headers={"Origin": "http://127.0.0.1:7860"}).text == "page"
    for origin in ("http://127.0.0.1:8888", "null", "http://attacker.example"):
        assert anyone.get("/", headers={"Origin": origin}).status_code == 403, origin
    login.allow("https://abc123.gradio.live")
    assert anyone.get("/", headers={"Host": "abc123.gradio.live"}).text == "page"


def test_no_auth_is_for_loopback_only() -> None:
    assert Login.new("::1", auth=False).token is None
    with pytest.raises(ValueError, match="only on loopback"):
        Login.new("0.0.0.0", auth=False)
    first, second = Login.new("127.0.0.1"), Login.new("127.0.0.1")
    assert first.cookie != second.cookie and first.token != second.token  # consoles side by side keep apart
