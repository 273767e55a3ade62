"""OpenAI-compatible servers (vLLM's, llama.cpp's, ...): base URLs, the served models, one client, errors in one line.

A server is reached at its base URL ``http://host:port/v1``; ``GET /v1/models`` lists what it serves. Each
model gets a :class:`ModelInfo` (backend ``openai``) whose declared inputs are the request fields the console
sends, so a control the API has no field for is reported as ignored, like one a Triton model does not declare.
The server applies the chat template itself (``/v1/chat/completions``); raw prompts go to ``/v1/completions``.
"""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from .errors import CONNECTION, SERVER, TIMEOUT, ClientError
from .events import ModelInfo, Tensor
from .wire import cause

OPENAI = "openai"  # Endpoint.api and ModelInfo.backend of an OpenAI-compatible server
TRITON = "triton"
APIS = ("auto", TRITON, OPENAI)
CANCEL_NOTE = "connection closed (the server stops a request whose client went away)"
# the request fields the controls map to: the API's own, and top_k, the servers' common extension
FIELDS = (
    Tensor("prompt", "BYTES"),
    Tensor("stream", "BOOL", (1,), optional=True),
    Tensor("max_tokens", "INT32", (1,), optional=True),
    Tensor("temperature", "FP32", (1,), optional=True),
    Tensor("top_p", "FP32", (1,), optional=True),
    Tensor("top_k", "INT32", (1,), optional=True),
    Tensor("seed", "INT64", (1,), optional=True),
    Tensor("stop", "BYTES", (-1,), optional=True),
)
EXTENSIONS = ("top_k",)  # sent in the body beside the API's own fields


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


def resolve_api(url: str, api: str = "auto") -> str:
    """``triton`` or ``openai``: ``api`` when given, else what the URL says (``.../v1``: openai)."""
    if api not in APIS:
        raise ClientError(f"api must be one of {', '.join(APIS)}, got {api!r}")
    if api != "auto":
        return api
    return OPENAI if is_openai_url(url) else TRITON


def openai_info(name: str) -> ModelInfo:
    """A served model of an OpenAI-compatible server: it streams or answers once, 600 s default timeout."""
    return ModelInfo(name, decoupled=True, use_kv_cache=True, inputs=FIELDS,
                     outputs=(Tensor("text_output", "BYTES"),), backend=OPENAI)


_CLIENTS: dict[str, Any] = {}
_LOCK = threading.Lock()


def client(base: str) -> Any:
    """The ``openai`` client of ``base`` (one per server: its connections are kept alive and shared).

    No retries (a request is sent once, as Triton's are); the key comes from ``OPENAI_API_KEY`` when
    the server wants one.
    """
    with _LOCK:
        if base not in _CLIENTS:
            import openai

            _CLIENTS[base] = openai.OpenAI(base_url=base, api_key=os.environ.get("OPENAI_API_KEY") or "none",
                                           max_retries=0)
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
        return ClientError(f"{what} the OpenAI-compatible server at {base} ({cause(exc.__cause__ or exc)})",
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


@dataclass(frozen=True)
class OpenAIServer:
    """An OpenAI-compatible server at ``base`` (``http://host:port/v1``): its models, read on demand."""

    base: str
    listed: dict[str, tuple[str, str]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def at(cls, url: str) -> OpenAIServer:
        return cls(base_url(url))

    @property
    def http_url(self) -> str:
        return self.base

    @property
    def grpc_url(self) -> None:
        return None

    def models(self, timeout: float = 5.0) -> list[str]:
        """The ids ``GET /v1/models`` lists; ClientError when the server does not answer."""
        try:
            page = client(self.base).models.list(timeout=timeout)
            return [m.id for m in page.data]
        except Exception as exc:
            raise api_error(exc, self.base) from None

    def is_ready(self, timeout: float = 3.0) -> bool:
        try:
            self.models(timeout)
        except ClientError:
            return False
        return True

    def model_states(self, timeout: float = 2.0) -> dict[str, tuple[str, str]]:
        """Every model listed once is ready (the API knows no other state) while the server answers HTTP;
        OSError when it does not.

        The models are listed once only: a listing is a request, and llama.cpp's server (by default) cuts
        the stream in flight short for a new request; it also lists only between generations.
        """
        if not self.listed:
            try:
                self.listed.update({name: ("READY", "") for name in self.models(timeout)})
            except ClientError as exc:
                raise OSError(str(exc)) from None
            return dict(self.listed)
        self.probe(timeout)
        return dict(self.listed)

    def probe(self, timeout: float = 2.0) -> None:
        """Any HTTP answer to ``GET /health`` (vLLM's; a 404 from others) shows the server is up; OSError if not."""
        parts = urllib.parse.urlsplit(self.base)
        try:
            with urllib.request.urlopen(urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/health", "", "")),
                                        timeout=timeout):
                pass
        except urllib.error.HTTPError:
            pass

    def model_info(self, name: str = "") -> ModelInfo:
        """The model ``name`` serves (empty: the first it lists); ClientError naming the served ones when absent."""
        served = self.models()
        if not served:
            raise ClientError(f"the OpenAI-compatible server at {self.base} serves no model", SERVER)
        if name and name not in served:
            raise ClientError(f"model {name!r} is not served at {self.base}: it serves {', '.join(served)}", SERVER)
        return openai_info(name or served[0])
