"""OpenAI-compatible servers (vLLM's, llama.cpp's, ...) on the wire: base URLs, the listed models, one client,
errors in one line.

A server is reached at its base URL ``http://host:port/v1``; ``GET /v1/models`` lists what it serves. Each
model gets a :class:`ModelInfo` (backend ``openai``); :class:`~.openai_interface.OpenAIInterface` knows the request
fields the controls map to. The server applies the chat template itself (``/v1/chat/completions``); raw
prompts go to ``/v1/completions``.
"""

from __future__ import annotations

import functools
import os
import ssl
import threading
import urllib.parse
from typing import Any

from .errors import BadRequest, ClientError, NotServed, Timeout, Unreachable
from .events import ModelInfo
from .failures import cause_of, error_class

OPENAI = "openai"  # ModelInfo.backend of a model an OpenAI-compatible server serves
CANCEL_NOTE = "connection closed (the server stops a request whose client went away)"


def is_openai_url(url: str) -> bool:
    """A URL whose path ends with ``/v1`` names an OpenAI-compatible server."""
    return urllib.parse.urlsplit(_with_scheme(url)).path.rstrip("/").endswith("/v1")


def _with_scheme(url: str) -> str:
    url = url.strip()
    if url.isdigit():
        url = f"127.0.0.1:{url}"
    return url if "://" in url else f"http://{url}"


def base_url(url: str) -> str:
    """``host:port``, ``http://host:port`` or ``http://host:port/v1/`` -> ``http://host:port/v1``.

    A URL with a path of its own (a proxy's prefix) keeps it.
    """
    if not url.strip():
        raise BadRequest("empty server URL")
    parts = urllib.parse.urlsplit(_with_scheme(url))
    path = parts.path.rstrip("/") or "/v1"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


FRONT = "qaic-console"  # ``owned_by`` of the models qaic-console's own OpenAI-compatible front lists
# what a listing says of a model that the console uses (vLLM gives the first two; the front the controls it takes)
LISTED = ("owned_by", "max_model_len", "controls")


def _said(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def openai_info(name: str, entry: dict[str, Any] | None = None) -> ModelInfo:
    """A served model of an OpenAI-compatible server (``entry``: its ``/v1/models`` entry): it streams or answers
    once; its type is not known (the KV-cache default timeout applies)."""
    said = {k: _said(entry[k]) for k in LISTED if entry and entry.get(k) is not None}
    return ModelInfo(name, decoupled=True, use_kv_cache=None, parameters=said, backend=OPENAI,
                     answers=("stream", "batch"))


KEY, KEY_SERVER = "OPENAI_API_KEY", "OPENAI_BASE_URL"
_NO_KEY = ("Authorization", "OpenAI-Organization", "OpenAI-Project")  # what goes with the key, or not at all
_CLIENTS: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(base_url(url))
    return parts.scheme.lower(), parts.netloc.lower()


def api_key(base: str) -> str:
    """The key requests to the server at ``base`` carry: ``OPENAI_API_KEY`` when ``base`` is on the server
    ``OPENAI_BASE_URL`` names (same scheme, host and port), else none.

    The one rule for the key: the user names the server it is for; a URL given anywhere else (``--url``, a
    console's field, whoever calls the web UI) never gets it.
    """
    key, server = os.environ.get(KEY, ""), os.environ.get(KEY_SERVER, "")
    return key if key and server.strip() and _origin(server) == _origin(base) else ""


def key_note(base: str) -> str:
    """What to tell when ``OPENAI_API_KEY`` is set but is not for ``base``; '' otherwise."""
    if not os.environ.get(KEY) or api_key(base):
        return ""
    return f"{KEY} is not sent to {base}: it goes only to the server {KEY_SERVER} names ({KEY_SERVER}={base} sends it)"


def client_options(base: str) -> dict[str, Any]:
    """How the console's ``openai`` clients of ``base`` are made: no retries (a request is sent once, as Triton's
    are); the key only for the key's server (:func:`api_key`): each request sends :func:`request_headers`."""
    return {"base_url": base, "api_key": api_key(base) or "none", "max_retries": 0}


@functools.cache
def tls() -> ssl.SSLContext:
    """One TLS context for every call's client: making one reads the CA certificates (about 20 ms, which a
    client made per call would add to each time to first token)."""
    return ssl.create_default_context()


def request_headers(base: str) -> dict[str, Any]:
    """What each request to ``base`` adds: nothing, or (no key for it) the key's headers left out altogether."""
    if api_key(base):
        return {}
    import openai

    return dict.fromkeys(_NO_KEY, openai.omit)


def client(base: str) -> Any:
    """The ``openai`` client of ``base`` for listings (one per server and key: its connections are kept alive)."""
    key = api_key(base)
    with _LOCK:
        if (base, key) not in _CLIENTS:
            import openai

            _CLIENTS[base, key] = openai.OpenAI(**client_options(base))
        return _CLIENTS[base, key]


def api_error(exc: BaseException, base: str, lost: bool = False) -> ClientError:
    """What the ``openai`` client raised, as the client's error in one line (``lost``: text had come)."""
    import openai

    if isinstance(exc, ClientError):
        return exc
    error = error_class(exc)
    if error is Timeout:
        return error(f"the OpenAI-compatible server at {base} timed out")
    if error is Unreachable:
        what = "lost the connection to" if lost else "cannot reach"
        return error(f"{what} the OpenAI-compatible server at {base}: {cause_of(exc.__cause__ or exc)}")
    if isinstance(exc, openai.APIStatusError):
        note = key_note(base) if exc.status_code in (401, 403) else ""
        hint = f" ({note})" if note else ""
        return error(f"HTTP {exc.status_code} from {base}: {_one_line(_status_message(exc))}{hint}")
    return error(f"{base}: {_one_line(exc)}")


def _status_message(exc: Any) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error:
            return str(error)
    if body:
        return str(body)
    return getattr(exc.response, "reason_phrase", "") or "no reason given"


def _one_line(exc: BaseException | str) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())[:300]


def listing(base: str, timeout: float = 5.0) -> dict[str, dict[str, Any]]:
    """``GET /v1/models`` at ``base``: each model's entry by its id; ClientError when the server does not answer."""
    try:
        page = client(base).models.list(timeout=timeout, extra_headers=request_headers(base))
        return {m.id: m.model_dump() for m in page.data}
    except Exception as exc:
        raise api_error(exc, base) from None


def model_info(base: str, name: str = "", timeout: float = 5.0) -> ModelInfo:
    """The model ``name`` the server at ``base`` serves (empty: the first it lists); ClientError naming the served
    ones when it is absent."""
    served = listing(base, timeout)
    if not served:
        raise NotServed(f"the OpenAI-compatible server at {base} serves no model")
    if name and name not in served:
        raise NotServed(f"model {name!r} is not served at {base}: it serves {', '.join(served)}")
    name = name or next(iter(served))
    return openai_info(name, served[name])
