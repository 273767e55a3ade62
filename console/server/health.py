"""A handle on a running tritonserver (started here or elsewhere): health, models and model control over HTTP."""

from __future__ import annotations

import io
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

States = dict[str, tuple[str, str]]  # model -> (state, reason)
FAILED = "FAILED"  # a model Triton could not load (it says UNAVAILABLE, the reason being the error)
UNLOADED = "unloaded"  # Triton's reason for a model UNAVAILABLE because it was unloaded
RELOAD_PARAMETER = "qaic_console_reload"  # changed to make Triton load a model again
KEY_HEADER = "qaic-console-key"  # the header (gRPC: triton-grpc-protocol-<it>) of the restricted APIs' key
GRPC_KEY_HEADER = f"triton-grpc-protocol-{KEY_HEADER}"  # the same on gRPC
RESTRICTED = 403  # what Triton answers a restricted API's request without the key
SENDER_FOR_BATCH = (2, 47)  # Triton 24.06: a non-decoupled Python model may answer through its response sender
ERROR_CODES_SAFE = (2, 68)  # Triton 2.68: its triton_grpc_error mode (a model's error ends a gRPC stream with the
# error's code) no longer frees the stream's state twice and dies of SIGSEGV (server PR #8708)


def at_least(version: str, minimum: tuple[int, ...]) -> bool | None:
    """Whether the server ``version`` (``GET /v2``'s, e.g. ``2.51.0``) is ``minimum`` or later; None when it is not
    a version that says."""
    try:
        found = tuple(int(p) for p in version.split(".")[:len(minimum)])
    except ValueError:
        return None
    return found >= minimum if len(found) == len(minimum) else None


def error_codes_safe(version: str) -> bool:
    """Whether a tritonserver of ``version`` can take the ``triton_grpc_error`` mode (unknown: no)."""
    return at_least(version, ERROR_CODES_SAFE) is True


def version_note(version: str) -> str:
    """What an older server cannot do with the bundled backend ('' when nothing, or the version is unknown).

    The bundled backend's batch (non-decoupled) models answer through the response sender, which the
    Python backend allows from Triton 2.47 (24.06) on; decoupled (stream) models work on older servers.
    """
    if at_least(version, SENDER_FOR_BATCH) is not False:
        return ""
    return (f"tritonserver {version} is older than 2.47 (24.06): batch (non-decoupled) models of the bundled "
            "backend cannot answer on it (their response sender needs 24.06+); use decoupled models (stream "
            "mode) or a newer server")


def _loopback(host: str) -> str:
    """The address to connect to for a server listening on ``host`` (any-address -> loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def detached(exc: urllib.error.HTTPError) -> urllib.error.HTTPError:
    """The same error with its body read and its connection closed. An HTTPError holds the open socket it was read
    from; kept in a reference cycle (an exception's traceback), the socket can be collected before the error
    closes it, and Python then warns of an unclosed socket."""
    with exc:
        try:
            body = exc.read()
        except OSError:
            body = b""
    return urllib.error.HTTPError(exc.url, exc.code, exc.msg, exc.headers, io.BytesIO(body))


@dataclass(frozen=True)
class ServerHandle:
    """Endpoints of a running server (``host:port``, the form tritonclient expects) and its HTTP API.

    ``key``: the key of its restricted APIs (a server started here), sent with every request.
    """

    http_url: str
    grpc_url: str | None = None
    metrics_url: str | None = None
    key: str = field(default="", repr=False, compare=False)

    @classmethod
    def on(cls, host: str, http_port: int, grpc_port: int | None = None, metrics_port: int | None = None,
           key: str = "") -> ServerHandle:
        """The handle of a server listening on ``host`` with these ports."""
        host = _loopback(host)
        return cls(f"{host}:{http_port}", f"{host}:{grpc_port}" if grpc_port else None,
                   f"http://{host}:{metrics_port}/metrics" if metrics_port else None, key)

    def request(self, path: str, body: dict[str, Any] | None = None, timeout: float = 2.0) -> bytes:
        """GET (or POST ``body`` as JSON) ``path``; urllib's errors pass through, an HTTPError holding its body
        instead of the connection."""
        data = None if body is None else json.dumps(body).encode()
        method = "GET" if data is None else "POST"
        headers = {KEY_HEADER: self.key} if self.key else {}
        req = urllib.request.Request(f"http://{self.http_url}{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            raise detached(exc) from None

    def is_ready(self, timeout: float = 1.0) -> bool:
        """``GET /v2/health/ready`` answered 200: the server answers and every model it loaded is ready (strict
        readiness, Triton's default: false while a model that failed to load is there)."""
        return self._answers("/v2/health/ready", timeout)

    def is_live(self, timeout: float = 1.0) -> bool:
        """``GET /v2/health/live`` answered 200: the server answers (the models it loads at start are done then)."""
        return self._answers("/v2/health/live", timeout)

    def _answers(self, path: str, timeout: float) -> bool:
        try:
            self.request(path, timeout=timeout)
        except (OSError, urllib.error.URLError):
            return False
        return True

    def server_version(self, timeout: float = 2.0) -> str:
        """The version the server reports (``GET /v2``), e.g. ``2.51.0``."""
        return json.loads(self.request("/v2", timeout=timeout)).get("version", "")

    def describe_version(self, timeout: float = 2.0) -> str:
        """The version, followed by what it cannot do when it is older than the bundled backend needs."""
        version = self.server_version(timeout)
        note = version_note(version)
        return f"{version} (note: {note})" if note else version

    def model_states(self) -> States:
        """``{model: (state, reason)}`` from ``POST /v2/repository/index``; FAILED for a model that failed to load.

        A server whose repository API is another console's (a 403) lists its loaded models only, READY, from its
        statistics (``GET /v2/models/stats``).
        """
        try:
            index = json.loads(self.request("/v2/repository/index", body={}, timeout=5.0) or b"[]")
        except urllib.error.HTTPError as exc:
            if exc.code != RESTRICTED:
                raise
            stats = json.loads(self.request("/v2/models/stats", timeout=5.0)).get("model_stats", [])
            return {entry["name"]: ("READY", "") for entry in stats}
        states: States = {}
        for entry in index:
            if entry.get("version") or entry["name"] not in states:
                state, reason = entry.get("state", ""), entry.get("reason", "")
                failed = state == "UNAVAILABLE" and reason not in ("", UNLOADED)
                states[entry["name"]] = (FAILED if failed else state, reason)
        return states

    def model_config(self, model: str, timeout: float = 10.0) -> dict[str, Any]:
        """The model's config as JSON (``GET /v2/models/<model>/config``)."""
        return json.loads(self.request(f"/v2/models/{model}/config", timeout=timeout))

    def load_model(self, model: str, timeout: float = 600.0) -> None:
        """Load ``model`` from the repository (explicit model control); OSError saying why Triton cannot."""
        try:
            self.request(f"/v2/repository/models/{model}/load", body={}, timeout=timeout)
        except urllib.error.HTTPError as exc:  # Triton says why in the body's "error"
            try:
                reason = json.loads(exc.read() or b"{}").get("error", "")
            except (ValueError, OSError):
                reason = ""
            raise OSError(f"tritonserver cannot load {model}: {reason or exc}") from None

    def reload_model(self, model: str, timeout: float = 600.0) -> None:
        """Load ``model`` afresh even though Triton thinks it is loaded (its backend died).

        Triton ignores a load of an unchanged model, so the config goes along with one parameter
        changed: new instances start, and the old ones go once their requests are done.
        """
        config = self.model_config(model)
        config.setdefault("parameters", {})[RELOAD_PARAMETER] = {"string_value": str(time.time())}
        self.request(f"/v2/repository/models/{model}/load", body={"parameters": {"config": json.dumps(config)}},
                     timeout=timeout)

