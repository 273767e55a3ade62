"""The web console's login, as Jupyter's: a token in the URL ``qaic-console web`` prints, then a cookie.

Every request meets :class:`Gate` before Gradio sees it: the page, Gradio's API (what ``gradio_client`` calls),
its file routes and websockets. It is let in with the run's token: ``?token=`` (answered with the session
cookie; a page is sent on to its address without the token), the cookie, or ``Authorization: Bearer``.
Whatever it carries, its Host header must name this console (an IP address, ``localhost``, this machine's
name or ``--host``: a DNS-rebinding page's name is none of these) and its Origin, when sent, must be the
console's own (no other page, another local port's included, drives it). ``--no-auth`` drops the token, on
loopback only; the Host and Origin checks stay.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN = "token"  # the query parameter
STARTUP = "/gradio_api/startup-events"  # Gradio's launch calls it once, with no credential, before it returns
ASK = "open the address `qaic-console web` printed, with its ?token="


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.1, ::1 ...)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Verdict:
    """What the gate does with a request: let it in (``status`` 0), or refuse it with one line."""

    status: int = 0
    reason: str = ""
    set_cookie: bool = False  # it came with the token: give it the cookie
    redirect: str = ""  # a page asked with the token: its address without it


@dataclass
class Login:
    """One run's login: its token (None: ``--no-auth``), its cookie's name and the host names it answers to."""

    token: str | None
    # a name of its own per run: cookies ignore ports, so two consoles on one machine must not share one
    cookie: str = field(default_factory=lambda: f"qaic-console-{secrets.token_hex(4)}")
    hosts: set[str] = field(default_factory=set)  # names a Host header may give besides IP addresses and localhost
    opened: bool = False  # Gradio's own start-up call went through

    @classmethod
    def new(cls, host: str, auth: bool = True) -> Login:
        """The login of a console served on ``host``; ValueError for ``--no-auth`` beyond loopback."""
        if not auth and not is_loopback(host):
            raise ValueError(f"--no-auth serves the page without a login: only on loopback (127.0.0.1), not on "
                             f"--host {host}")
        names = {name.lower() for name in (host, socket.gethostname(), socket.getfqdn()) if name}
        return cls(secrets.token_urlsafe(32) if auth else None, hosts=names)

    def allow(self, url: str | None) -> None:
        """Answer to the host name of ``url`` too (a share link's)."""
        name = urllib.parse.urlsplit(url or "").hostname
        if name:
            self.hosts.add(name.lower())

    def url(self, address: str | None) -> str:
        """``address`` with the token: what to open."""
        if not address or self.token is None:
            return address or ""
        return f"{address.rstrip('/')}/?{TOKEN}={self.token}"

    def judge(self, scope: Scope) -> Verdict:
        """Whether the request of ``scope`` comes in: from where (Host, Origin), then with what (the token)."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        return self._where(headers) or self._credential(scope, headers)

    def _where(self, headers: dict[str, str]) -> Verdict | None:
        """A refusal when the Host header is not this console's or the Origin is another page's; else None."""
        host = headers.get("host", "")
        name = (urllib.parse.urlsplit(f"//{host}").hostname or "") if host else ""
        if not (_is_ip(name) or name == "localhost" or name in self.hosts):
            return Verdict(403, f"qaic-console web: Host {host!r} is not this console's address (a page reaching it "
                                "under another name: DNS rebinding?); open it by its address")
        origin = headers.get("origin")
        if origin is not None and urllib.parse.urlsplit(origin).netloc.lower() != host.lower():
            return Verdict(403, f"qaic-console web: a request from another page ({origin}) is refused")
        return None

    def _credential(self, scope: Scope, headers: dict[str, str]) -> Verdict:
        if self.token is None:
            return Verdict()
        if not self.opened and scope["type"] == "http" and scope["path"] == STARTUP:
            self.opened = True
            return Verdict()
        query = urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [value for key, value in query if key == TOKEN]
        if given:
            if not self._is_token(given[-1]):
                return Verdict(401, f"qaic-console web: wrong token: {ASK}")
            page = scope["type"] == "http" and scope.get("method") == "GET" and not scope["path"].startswith(
                "/gradio_api/")
            rest = urllib.parse.urlencode([(k, v) for k, v in query if k != TOKEN])
            return Verdict(set_cookie=True, redirect=(scope["path"] + (f"?{rest}" if rest else "")) if page else "")
        cookies = (part.strip().partition("=") for part in headers.get("cookie", "").split(";"))
        if any(key == self.cookie and self._is_token(value) for key, _, value in cookies):
            return Verdict()
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self._is_token(credential.strip()):
            return Verdict()
        return Verdict(401, f"qaic-console web: log in first: {ASK}")

    def _is_token(self, value: str) -> bool:
        return self.token is not None and hmac.compare_digest(value.encode(), self.token.encode())

    def set_cookie(self) -> tuple[bytes, bytes]:
        """The session cookie: the browser's until it closes, sent by it to this site only, unread by scripts."""
        return b"set-cookie", f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict".encode()


class Gate:
    """ASGI middleware: every HTTP request and websocket passes :meth:`Login.judge` first."""

    def __init__(self, app: ASGIApp, login: Login) -> None:
        self.app, self.login = app, login

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        verdict = self.login.judge(scope)
        if verdict.status and scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": verdict.reason[:120]})
        elif verdict.status:
            await _answer(send, verdict.status, verdict.reason)
        elif verdict.redirect:
            await _answer(send, 303, "logged in", [(b"location", verdict.redirect.encode("latin-1")),
                                                   self.login.set_cookie()])
        elif verdict.set_cookie and scope["type"] == "http":
            await self.app(scope, receive, self._with_cookie(send))
        else:
            await self.app(scope, receive, send)

    def _with_cookie(self, send: Send) -> Send:
        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.login.set_cookie()]}
            await send(message)

        return sending


async def _answer(send: Send, status: int, line: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (line + "\n").encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store"),
        (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
