"""OpenAI-compatible servers (vLLM's, llama.cpp's, ...) on the wire: base URLs, the listed models, one client,
errors in one line.

A server is reached at its base URL ``http://host:port/v1``; ``GET /v1/models`` lists what it serves. Each
model gets a :class:`ModelInfo` (backend ``openai``); :class:`~.openai_interface.OpenAIInterface` knows the request
fields the controls map to. The server applies the chat template itself (``/v1/chat/completions``); raw
prompts go to ``/v1/completions``.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from typing import Any

from .errors import CONNECTION, SERVER, TIMEOUT, ClientError
from .events import ModelInfo
from .wire import cause_of

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
        raise ClientError("empty server URL")
    parts = urllib.parse.urlsplit(_with_scheme(url))
    path = parts.path.rstrip("/") or "/v1"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


LISTED = ("owned_by", "max_model_len")  # what a listing says of a model that the console uses (vLLM gives both)


def openai_info(name: str, entry: dict[str, Any] | None = None) -> ModelInfo:
    """A served model of an OpenAI-compatible server (``entry``: its ``/v1/models`` entry): it streams or answers
    once; its type is not known (the KV-cache default timeout applies)."""
    said = {k: str(entry[k]) for k in LISTED if entry and entry.get(k) is not None}
    return ModelInfo(name, decoupled=True, use_kv_cache=None, parameters=said, backend=OPENAI,
                     answers=("stream", "batch"))


_CLIENTS: dict[str, Any] = {}
_LOCK = threading.Lock()


def client_options(base: str) -> dict[str, Any]:
    """How the console's ``openai`` clients of ``base`` are made: no retries (a request is sent once, as Triton's
    are); the key comes from ``OPENAI_API_KEY`` when the server wants one."""
    return {"base_url": base, "api_key": os.environ.get("OPENAI_API_KEY") or "none", "max_retries": 0}


def client(base: str) -> Any:
    """The ``openai`` client of ``base`` for listings (one per server: its connections are kept alive)."""
    with _LOCK:
        if base not in _CLIENTS:
            import openai

            _CLIENTS[base] = openai.OpenAI(**client_options(base))
        return _CLIENTS[base]


def api_error(exc: BaseException, base: str, lost: bool = False) -> ClientError:
    """One line and a Failure kind for what the ``openai`` client raised (``lost``: text had come)."""
    import openai

    if isinstance(exc, ClientError):
        return exc
    if isinstance(exc, openai.APITimeoutError):
        return ClientError(f"the OpenAI-compatible server at {base} timed out", TIMEOUT)
    if isinstance(exc, openai.APIConnectionError):
        what = "lost the connection to" if lost else "cannot reach"
        return ClientError(f"{what} the OpenAI-compatible server at {base}: {cause_of(exc.__cause__ or exc)}",
                           CONNECTION)
    if isinstance(exc, openai.APIStatusError):
        return ClientError(f"HTTP {exc.status_code} from {base}: {_one_line(_status_message(exc))}", SERVER)
    return ClientError(f"{base}: {_one_line(exc)}", SERVER)


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
        page = client(base).models.list(timeout=timeout)
        return {m.id: m.model_dump() for m in page.data}
    except Exception as exc:
        raise api_error(exc, base) from None


def model_info(base: str, name: str = "") -> ModelInfo:
    """The model ``name`` the server at ``base`` serves (empty: the first it lists); ClientError naming the served
    ones when it is absent."""
    served = listing(base)
    if not served:
        raise ClientError(f"the OpenAI-compatible server at {base} serves no model", SERVER)
    if name and name not in served:
        raise ClientError(f"model {name!r} is not served at {base}: it serves {', '.join(served)}", SERVER)
    name = name or next(iter(served))
    return openai_info(name, served[name])
