"""One-response requests: Triton inference over HTTP (or gRPC) and the HTTP generate endpoint.

Every call runs in a helper thread and is awaited with the network timeout, so a caller (a UI's
stop key) can :meth:`Call.cancel` it from any thread. gRPC calls are cancelled on the server too;
Triton cannot cancel an HTTP request, so after an HTTP timeout the server finishes it.
Also here: the wire helpers the stream client shares (inputs, outputs, errors, model config).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from tritonclient.utils import InferenceServerException

from .events import (
    CANCEL_NOTE,
    CANCELLED,
    CONNECTION,
    SERVER,
    TIMEOUT,
    ClientError,
    Event,
    Failure,
    GenerationParams,
    ModelInfo,
    Reply,
    Timeouts,
    new_request_id,
)
from .stats import reply_stats

PROTOCOLS = ("http", "grpc")
FAR = 10.0**7  # "no timeout" for APIs that need a number
_SCALARS = (
    ("max_tokens", "INT32", np.int32),
    ("temperature", "FP32", np.float32),
    ("top_p", "FP32", np.float32),
    ("top_k", "INT32", np.int32),
    ("seed", "INT64", np.int64),
    ("repetition_penalty", "FP32", np.float32),
)


# --------------------------------------------------------------------------- wire helpers


def normalize_url(url: str) -> str:
    """``http://host:port/`` or ``host:port`` -> ``host:port`` (what tritonclient expects)."""
    url = url.strip()
    for scheme in ("http://", "https://", "grpc://"):
        if url.startswith(scheme):
            url = url[len(scheme) :]
    url = url.rstrip("/")
    if not url:
        raise ClientError("empty server URL")
    if url.isdigit():
        return f"127.0.0.1:{url}"
    return url


def build_inputs(module: Any, prompts: Sequence[str], params: GenerationParams) -> list[Any]:
    """InferInputs for tritonclient.http or tritonclient.grpc (``module``)."""
    def tensor(name: str, dtype: str, array: np.ndarray) -> Any:
        item = module.InferInput(name, list(array.shape), dtype)
        item.set_data_from_numpy(array)
        return item

    inputs = [tensor("prompt", "BYTES", np.array([p.encode("utf-8") for p in prompts], dtype=np.object_))]
    for name, dtype, np_type in _SCALARS:
        value = getattr(params, name)
        if value is not None:
            inputs.append(tensor(name, dtype, np.array([value], dtype=np_type)))
    if params.stop:
        inputs.append(tensor("stop", "BYTES", np.array([s.encode("utf-8") for s in params.stop], dtype=np.object_)))
    if params.exclude_input_in_output is not None:
        inputs.append(tensor("exclude_input_in_output", "BOOL", np.array([params.exclude_input_in_output])))
    return inputs


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def read_outputs(result: Any, n: int) -> dict[str, list | None]:
    """``text_output``/``finish_reason``/``input_tokens``/``output_tokens`` as lists of ``n`` (or None)."""
    out: dict[str, list | None] = {}
    for name in ("text_output", "finish_reason", "input_tokens", "output_tokens"):
        array = result.as_numpy(name)
        if array is None:
            out[name] = None
            continue
        values = array.reshape(-1).tolist()
        if len(values) != n:
            raise ClientError(f"the model returned {len(values)} {name} values for {n} prompts", SERVER)
        out[name] = [_text(v) for v in values] if name in ("text_output", "finish_reason") else values
    return out


def error_kind(exc: BaseException) -> str:
    """The Failure kind of a tritonclient / socket exception."""
    if isinstance(exc, ClientError):
        return exc.kind
    if isinstance(exc, InferenceServerException):
        status = str(exc.status() or "")
        if "UNAVAILABLE" in status:
            return CONNECTION
        if "DEADLINE_EXCEEDED" in status:
            return TIMEOUT
        if "CANCELLED" in status:
            return CANCELLED
        return SERVER
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    if isinstance(exc, (OSError, http.client.HTTPException)):
        return CONNECTION
    return SERVER


def error_message(exc: BaseException, url: str, protocol: str, lost: bool = False) -> str:
    """One line for a failed call; ``lost``: the server had answered before (it went away)."""
    text = exc.message() if isinstance(exc, InferenceServerException) else str(exc)
    text = " ".join((text or type(exc).__name__).split())
    if error_kind(exc) == CONNECTION:
        what = "lost the connection to" if lost else "cannot reach"
        return f"{what} tritonserver at {url} ({protocol}): {text}"
    return text


def _parameters(config: dict[str, Any]) -> dict[str, str]:
    return {k: (v or {}).get("string_value", "") for k, v in (config.get("parameters") or {}).items()}


def model_info(url: str, model: str, protocol: str = "grpc", timeout: float = 10.0) -> ModelInfo:
    """Read a served model's config: decoupled, ``use_kv_cache`` (default timeout), ``hf_model_name``."""
    url = normalize_url(url)
    try:
        if protocol == "grpc":
            import tritonclient.grpc as grpcclient

            client = grpcclient.InferenceServerClient(url)
            try:
                config = client.get_model_config(model, as_json=True, client_timeout=timeout)["config"]
            finally:
                client.close()
        else:
            with urllib.request.urlopen(f"http://{url}/v2/models/{model}/config", timeout=timeout) as resp:
                config = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise ClientError(_http_error(exc), SERVER) from None
    except (InferenceServerException, OSError, ValueError) as exc:
        raise ClientError(error_message(exc, url, protocol), error_kind(exc)) from None
    params = _parameters(config)
    decoupled = bool((config.get("model_transaction_policy") or {}).get("decoupled", False))
    kv = params.get("use_kv_cache", "true").strip().lower() not in ("false", "0", "no")
    return ModelInfo(model, decoupled, kv, params.get("hf_model_name", ""), params)



def ready_models(http_url: str, states: dict[str, tuple[str, str]]) -> dict[str, ModelInfo]:
    """ModelInfo of each READY model in ``states`` (a model whose config cannot be read is left out)."""
    infos = {}
    for name, (state, _) in sorted(states.items()):
        if state == "READY":
            with contextlib.suppress(ClientError):
                infos[name] = model_info(http_url, name, "http")
    return infos

def _http_error(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
        message = body.get("error") or exc.reason
    except (ValueError, OSError):
        message = exc.reason
    return f"HTTP {exc.code}: {message}"


# --------------------------------------------------------------------------- calls


def _nothing() -> None:
    pass


class Call:
    """A running request: iterate it once for its events; :meth:`cancel` may come from any thread."""

    def __init__(self, url: str, model: str, prompts: Sequence[str], params: GenerationParams,
                 timeouts: Timeouts) -> None:
        if not prompts:
            raise ClientError("no prompt given")
        self.url = normalize_url(url)
        self.model = model
        self.prompts = list(prompts)
        self.params = params
        self.request_id = params.request_id or new_request_id()
        self.timeouts = timeouts
        self._cancel = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._used = False

    def cancel(self) -> None:
        """Stop waiting and cancel the request (on the server too, where the protocol can)."""
        self._cancel.set()
        self._queue.put(None)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def __iter__(self) -> Iterator[Event]:
        if self._used:
            raise RuntimeError("a Call can be iterated once")
        self._used = True
        return self._events()

    def _events(self) -> Iterator[Event]:
        raise NotImplementedError

    def replies(self) -> list[Reply]:
        """Run to the end; the replies in prompt order, or ClientError on failure."""
        replies = []
        for event in self:
            if isinstance(event, Failure):
                raise ClientError(event.message, event.kind)
            if isinstance(event, Reply):
                replies.append(event)
        return replies


class BatchCall(Call):
    """One inference request answered once (batch models): over HTTP, gRPC, or the generate endpoint."""

    def __init__(self, url: str, model: str, prompts: Sequence[str], params: GenerationParams,
                 timeouts: Timeouts, protocol: str = "http", generate: bool = False) -> None:
        if protocol not in PROTOCOLS:
            raise ClientError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        super().__init__(url, model, prompts, params, timeouts)
        self.protocol = "http" if generate else protocol
        self.generate = generate

    @property
    def includes_prompt(self) -> bool:
        return not self.params.exclude_input_in_output

    def _events(self) -> Iterator[Event]:
        t0 = time.perf_counter()
        canceller, closer = self._start()
        finished = False
        try:
            network = self.timeouts.network
            deadline = None if network is None else t0 + network
            wait = None if deadline is None else max(deadline - time.perf_counter(), 0.0)
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                item = None
            elapsed = time.perf_counter() - t0
            if item is None:  # timeout or cancel()
                yield self._stopped(elapsed)
                return
            finished = True
            outputs, exc = item
            if exc is not None:
                yield Failure(error_message(exc, self.url, self.protocol), error_kind(exc), elapsed)
            else:
                yield from self._replies(outputs, elapsed)
        finally:
            if not finished:
                canceller()
            closer()

    def _stopped(self, elapsed: float) -> Failure:
        cancel_note = (
            CANCEL_NOTE if self.protocol == "grpc"
            else "Triton cannot cancel HTTP requests: the server finishes this one (gRPC can cancel)"
        )
        if self._cancel.is_set():
            return Failure(f"cancelled after {elapsed:.1f} s; {cancel_note}", CANCELLED, elapsed)
        return Failure(
            f"network timeout: no answer from {self.model} within {self.timeouts.network:g} s; {cancel_note}",
            TIMEOUT,
            elapsed,
        )

    def _replies(self, outputs: dict[str, list | None], elapsed: float) -> Iterator[Reply]:
        texts = outputs.get("text_output") or [""] * len(self.prompts)
        for i, prompt in enumerate(self.prompts):
            def pick(name: str, default: Any = None, i: int = i) -> Any:
                values = outputs.get(name)
                return values[i] if values is not None else default

            stats = reply_stats((), elapsed, pick("output_tokens"), pick("input_tokens"), streamed=False)
            yield Reply(i, prompt, texts[i], pick("finish_reason", ""), stats, self.includes_prompt)

    def _start(self) -> tuple[Callable[[], None], Callable[[], None]]:
        """Send the request; its outcome lands in the queue. Returns (server-side canceller, closer)."""
        backstop = (self.timeouts.network or FAR) + 1.0
        if self.protocol == "grpc":
            return self._start_grpc(backstop)
        target = self._post_generate if self.generate else self._infer_http
        threading.Thread(target=self._work, args=(target, backstop), name="qc-batch", daemon=True).start()
        return _nothing, _nothing

    def _work(self, target: Callable[[float], dict[str, list | None]], timeout: float) -> None:
        try:
            self._queue.put((target(timeout), None))
        except Exception as exc:
            self._queue.put((None, exc))

    def _infer_http(self, timeout: float) -> dict[str, list | None]:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(
            self.url, connection_timeout=min(timeout, 30.0), network_timeout=timeout
        )
        try:
            inputs = build_inputs(httpclient, self.prompts, self.params)
            result = client.infer(self.model, inputs, request_id=self.request_id)
            return read_outputs(result, len(self.prompts))
        finally:
            client.close()  # an open keep-alive connection delays the server's shutdown

    def _start_grpc(self, timeout: float) -> tuple[Callable[[], None], Callable[[], None]]:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.url)
        n = len(self.prompts)

        def done(result: Any = None, error: Any = None) -> None:
            try:
                self._queue.put((None, error) if error is not None else (read_outputs(result, n), None))
            except Exception as exc:
                self._queue.put((None, exc))

        try:
            inputs = build_inputs(grpcclient, self.prompts, self.params)
            context = client.async_infer(
                self.model, inputs, callback=done, request_id=self.request_id, client_timeout=timeout
            )
        except Exception as exc:
            self._queue.put((None, exc))
            return _nothing, client.close
        return context.cancel, client.close

    def _post_generate(self, timeout: float) -> dict[str, list | None]:
        body = generate_body(self.prompts, self.params, self.request_id)
        host, _, port = self.url.rpartition(":")
        conn = http.client.HTTPConnection(host or self.url, int(port) if port.isdigit() else 80, timeout=timeout)
        try:
            conn.request("POST", f"/v2/models/{self.model}/generate", body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            payload = resp.read()
        finally:
            conn.close()
        try:
            data = json.loads(payload or b"{}")
        except ValueError:
            data = {"error": payload[:200].decode("utf-8", errors="replace")}
        if resp.status != 200:
            raise ClientError(f"HTTP {resp.status}: {data.get('error', resp.reason)}", SERVER)
        return parse_generate(data, len(self.prompts))


def generate_body(prompts: Sequence[str], params: GenerationParams, request_id: str) -> dict[str, Any]:
    """The generate endpoint's JSON: ``{"prompt": ..., "id": ...}`` plus the optional inputs."""
    body: dict[str, Any] = {"prompt": prompts[0] if len(prompts) == 1 else list(prompts), "id": request_id}
    for name, _, _ in _SCALARS:
        if getattr(params, name) is not None:
            body[name] = getattr(params, name)
    if params.stop:
        body["stop"] = list(params.stop)
    if params.exclude_input_in_output is not None:
        body["exclude_input_in_output"] = params.exclude_input_in_output
    return body


def parse_generate(data: dict[str, Any], n: int) -> dict[str, list | None]:
    """The generate endpoint's answer as :func:`read_outputs` lists (one value per prompt)."""
    out: dict[str, list | None] = {}
    for name in ("text_output", "finish_reason", "input_tokens", "output_tokens"):
        value = data.get(name)
        if value is None:
            out[name] = None
            continue
        values = value if isinstance(value, list) else [value]
        if len(values) != n:
            raise ClientError(f"the model returned {len(values)} {name} values for {n} prompts", SERVER)
        out[name] = values
    return out


def infer(url: str, model: str, prompts: Sequence[str], params: GenerationParams | None = None,
          timeouts: Timeouts | None = None, protocol: str = "http") -> BatchCall:
    """A batch inference call (one response at the end); iterate it for Reply events or a Failure.

    ``protocol="grpc"`` makes timeouts and :meth:`Call.cancel` cancel the request on the server.
    """
    return BatchCall(url, model, prompts, params or GenerationParams(), timeouts or Timeouts(), protocol=protocol)


def generate(url: str, model: str, prompts: Sequence[str], params: GenerationParams | None = None,
             timeouts: Timeouts | None = None) -> BatchCall:
    """A call to ``POST /v2/models/<model>/generate`` (HTTP; batch models only)."""
    return BatchCall(url, model, prompts, params or GenerationParams(), timeouts or Timeouts(), generate=True)
