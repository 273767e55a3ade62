"""``qaic-console web`` probed as an attacker would: from another process, with no credential.

The console runs as a user runs it (the real command, a subprocess, ``OPENAI_API_KEY`` set, ``OPENAI_BASE_URL``
naming the key's own server); the tests call its API by raw HTTP and through ``gradio_client``, as anything on
the machine (or a web page in the user's browser) could, and as the user does with the printed token.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from gradio_client import Client
from helpers import SESSION_MARK, Listener, marked_servers

from console.server import free_port

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-" + uuid.uuid4().hex


@dataclass
class Console:
    """A running ``qaic-console web``: its address, the token it printed, what it said."""

    proc: subprocess.Popen[str]
    port: int
    url: str  # as printed: with the token
    said: list[str]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return self.url.split("?token=")[1]


@contextlib.contextmanager
def web_console(tmp: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Console]:
    """``qaic-console web --no-start`` (plus ``args``) with its temp dir in ``tmp``; stopped with SIGTERM."""
    port = free_port()
    mark = uuid.uuid4().hex
    cmd = [sys.executable, "-c", "from console.cli import main; main()", "web", "--no-start", "--port", str(port),
           *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, "OPENAI_API_KEY": KEY, "TMPDIR": str(tmp), SESSION_MARK: mark,
                                 **(env or {})})
    said: list[str] = []
    try:
        for line in proc.stdout:
            said.append(line.rstrip("\n"))
            if line.startswith("press Ctrl-C to stop"):
                break
        printed = next((re.search(r"on (\S+)", s).group(1) for s in said if s.startswith("qaic-console web on")), "")
        assert printed, said
        yield Console(proc, port, printed, said)
    finally:
        proc.send_signal(signal.SIGTERM)
        said += proc.communicate(timeout=60)[0].splitlines()
        assert not marked_servers(mark), "the console left a tritonserver"


def request(console: Console, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def call(console: Console, api: str, data: list, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """POST /gradio_api/call/<api>: what gradio_client does first."""
    return request(console, "POST", f"/gradio_api/call/{api}", json.dumps({"data": data}).encode(), headers)


def routes() -> list[tuple[str, str]]:
    """(method, path) of every route of the page's app (Gradio's own, the API, file routes), parameters filled."""
    from gradio.routes import App

    from console.core.controller import ServerController
    from console.web.app import build_app
    from console.web.handlers import WebConsole

    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(__import__("tempfile").TemporaryDirectory()))
        demo = build_app(WebConsole(ServerController(), folder))
        demo.queue()
        app = App.create_app(demo)
    found = []

    def walk(items: list) -> None:
        for route in items:
            inner = getattr(route, "routes", None) or getattr(getattr(route, "original_router", None), "routes", None)
            if inner is not None:
                walk(inner)
            elif hasattr(route, "path"):
                path = re.sub(r"\{[^}]*\}", "x", route.path)
                found.extend((method, path) for method in sorted(getattr(route, "methods", None) or ["GET"]))

    walk(app.routes)
    return found


@pytest.fixture(scope="module")
def keyed() -> Iterator[Listener]:
    """The server OPENAI_BASE_URL names: the one the key is for."""
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, keyed: Listener) -> Iterator[Console]:
    with web_console(tmp_path_factory.mktemp("web"), env={"OPENAI_BASE_URL": keyed.url}) as running:
        yield running


def test_every_route_refuses_a_caller_without_the_token(console: Console) -> None:
    found = routes()
    paths = {path for _, path in found}
    assert {"/config", "/gradio_api/queue/join", "/gradio_api/call/x", "/gradio_api/file=x", "/gradio_api/upload",
            "/gradio_api/info", "/gradio_api/startup-events", "/"} <= paths and len(found) > 60, found
    answered = {}
    for method, path in [*found, ("GET", "/gradio_api/file=/etc/passwd"), ("GET", "/nowhere")]:
        status, body = request(console, method, path, b"{}" if method == "POST" else None)
        if status != 401 or ("log in first" not in body and method != "HEAD"):  # HEAD: no body
            answered[method, path] = status
    assert answered == {}
    with pytest.raises(Exception, match="credentials were not provided"):
        Client(console.base, verbose=False)
    user = Client(console.base, headers={"Authorization": f"Bearer {console.token}"}, verbose=False)
    assert {"/connect", "/start", "/send", "/export"} <= set(user.view_api(print_info=False,
                                                                         return_format="dict")["named_endpoints"])


def test_connect_refused_to_a_caller_and_the_key_goes_only_to_its_own_server(tmp_path: Path, console: Console,
                                                                           keyed: Listener) -> None:
    other = Listener()
    try:
        status, body = call(console, "connect", [other.url, ""])
        assert status == 401 and other.seen == []  # nothing reached the caller's address
        with pytest.raises(Exception, match="credentials were not provided"):
            Client(console.base, verbose=False).predict(other.url, "", api_name="/connect")
        assert other.seen == []

        user = Client(console.base, headers={"Authorization": f"Bearer {console.token}"}, verbose=False)
        said, _ = user.predict(other.url, "", api_name="/connect")  # logged in, to an address not given for the key
        # (the status, and the error beside the buttons)
        assert other.seen and set(other.seen) == {None}, other.seen
        assert "OPENAI\\_API\\_KEY is not sent to http&#58;//127\\.0\\.0\\.1:" in said, said
        user.predict(keyed.url, "", api_name="/connect")
        assert f"Bearer {KEY}" in keyed.seen  # the address OPENAI_BASE_URL names gets it
        assert KEY not in "\n".join(console.said)  # and it is never printed
    finally:
        other.close()


def test_start_on_a_callers_repository_is_refused_and_its_model_py_never_runs(tmp_path: Path,
                                                                             console: Console) -> None:
    marker = tmp_path / "ran"
    model = tmp_path / "repo" / "pwn"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "pwn"\nbackend: "python"\n')
    (model / "1" / "model.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    for data in ([str(model.parent), []], [str(model.parent), ["pwn"]]):
        assert call(console, "start", data)[0] == 401
    with pytest.raises(Exception, match="credentials were not provided"):
        Client(console.base, verbose=False).predict(str(model.parent), [], api_name="/start")
    user = Client(console.base, headers={"Authorization": f"Bearer {console.token}"}, verbose=False)
    shown = json.dumps(user.predict("stream", "", api_name="/refresh"))
    assert "starting" not in shown and str(model.parent) not in shown  # no server was started on it
    assert not marker.exists()


def test_a_foreign_host_or_origin_is_refused_even_with_the_token(console: Console) -> None:
    bearer = {"Authorization": f"Bearer {console.token}"}
    assert request(console, "GET", "/config", headers=bearer)[0] == 200
    rebound = {"Host": f"rebound.example:{console.port}"}
    status, body = request(console, "GET", f"/?token={console.token}", headers=rebound)
    assert status == 403 and "is not this console's address" in body and "DNS rebinding" in body
    status, body = call(console, "refresh", ["stream", ""], {**bearer, "Origin": "http://127.0.0.1:9"})
    assert status == 403 and "a request from another page (http://127.0.0.1:9) is refused" in body
    same = {**bearer, "Origin": console.base}
    assert call(console, "refresh", ["stream", ""], same)[0] == 200


def test_no_auth_only_on_loopback_and_said_plainly(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "from console.cli import main; main()", "web", "--no-auth",
                           "--host", "0.0.0.0", "--no-start"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("error: --no-auth serves the page without a login: only on loopback (127.0.0.1), not on "
                           "--host 0.0.0.0\n")
    with web_console(tmp_path, "--no-auth") as open_console:
        assert any(line.startswith("warning: --no-auth: any program or web page that reaches") for line in
                   open_console.said), open_console.said
        assert "?token=" not in open_console.url
        assert request(open_console, "GET", "/config")[0] == 200
        assert request(open_console, "GET", "/config", headers={"Host": "rebound.example"})[0] == 403


def test_the_private_folder_is_0700_and_goes_when_the_console_ends(tmp_path: Path) -> None:
    with web_console(tmp_path) as running:
        (folder,) = tmp_path.glob("qaic-web-*")
        assert folder.stat().st_mode & 0o777 == 0o700
        assert running.proc.poll() is None
    assert running.proc.returncode == 0 and list(tmp_path.iterdir()) == []
    with web_console(tmp_path) as killed:
        (left,) = tmp_path.glob("qaic-web-*")
        killed.proc.kill()
        killed.proc.wait()
    assert left.is_dir()  # nothing runs at a SIGKILL: the next console removes it
    with web_console(tmp_path) as following:
        assert not left.exists() and f"note: removed {left}, left by a web console that was killed" in following.said
        assert [p.name.split("-")[2] for p in tmp_path.iterdir()] == [str(following.proc.pid)]  # its own only
