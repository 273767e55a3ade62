"""Wire helpers: URLs, a model's config as :class:`ModelInfo`, tensors, and errors in one line."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np
from tritonclient.utils import InferenceServerException

from .errors import BadRequest, NotServed, Refused, ServerFault
from .events import ModelInfo, Tensor
from .failures import error_class, mapped

PROTOCOLS = ("http", "grpc")
MAX_NAME = 255  # a model name is a folder name
_NUMPY: dict[str, type[np.generic]] = {
    "BOOL": np.bool_, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    **{f"{s}INT{b}": np.dtype(f"{s.lower()}int{b}").type for s in ("", "U") for b in (8, 16, 32, 64)}}


def normalize_url(url: str) -> str:
    """``http://host:port/`` or ``host:port`` -> ``host:port`` (what tritonclient expects)."""
    url = url.strip()
    for scheme in ("http://", "https://", "grpc://"):
        if url.startswith(scheme):
            url = url[len(scheme) :]
    url = url.rstrip("/")
    if not url:
        raise BadRequest("empty server URL")
    if url.isdigit():
        return f"127.0.0.1:{url}"
    return url


# --------------------------------------------------------------------------- tensors


def tensor(module: Any, name: str, datatype: str, values: Sequence[Any], dims: Sequence[int] | None = None) -> Any:
    """An InferInput of tritonclient.http or .grpc (``module``) holding ``values`` in shape ``dims``."""
    if datatype == "BYTES":
        array = np.array([v if isinstance(v, bytes) else str(v).encode("utf-8") for v in values], dtype=np.object_)
    else:
        array = np.array(values, dtype=_NUMPY[datatype])
    if dims is not None:
        array = array.reshape(dims)
    item = module.InferInput(name, list(array.shape), datatype)
    item.set_data_from_numpy(array)
    return item


def text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def is_final(result: Any) -> bool:
    """A gRPC stream response flagged ``triton_final_response`` (the request's last)."""
    param = result.get_response().parameters.get("triton_final_response")
    return bool(param is not None and param.bool_param)


def output_list(result: Any, name: str, n: int, texts: bool = False) -> list | None:
    """Output ``name`` as a list of ``n`` values (None when the model did not send it)."""
    array = result.as_numpy(name)
    if array is None:
        return None
    values = array.reshape(-1).tolist()
    if len(values) != n:
        raise ServerFault(f"the model returned {len(values)} {name} values for {n} prompts")
    return [text(v) for v in values] if texts else values


def served_models(url: str, protocol: str, timeout: float = 5.0) -> list[str]:
    """The loaded (READY) models at ``url``, from their statistics: the repository index may be the console's that
    started the server alone ([] when they cannot be listed)."""
    try:
        if protocol == "grpc":
            import tritonclient.grpc as grpcclient

            client = grpcclient.InferenceServerClient(url)
            try:
                stats = client.get_inference_statistics(as_json=True, client_timeout=timeout).get("model_stats", [])
            finally:
                client.close()
        else:
            with urllib.request.urlopen(f"http://{url}/v2/models/stats", timeout=timeout) as resp:
                stats = json.loads(resp.read() or b"{}").get("model_stats", [])
    except (InferenceServerException, OSError, ValueError, http.client.HTTPException):
        return []
    return sorted({m["name"] for m in stats})


def post_generate(url: str, model: str, body: dict[str, Any], timeout: float) -> tuple[int, str, dict[str, Any]]:
    """``POST /v2/models/<model>/generate`` at ``host:port``: (HTTP status, reason, the JSON answer; a body
    that is not JSON comes as ``{"error": its start}``). OSError when nothing answers in time."""
    host, _, port = url.rpartition(":")
    conn = http.client.HTTPConnection(host or url, int(port) if port.isdigit() else 80, timeout=timeout)
    try:
        conn.request("POST", f"/v2/models/{model}/generate", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read()
    finally:
        conn.close()
    return resp.status, resp.reason, generate_answer(payload)


def generate_answer(payload: bytes) -> dict[str, Any]:
    """The generate endpoint's JSON answer; a body that is not JSON comes as ``{"error": its start}``."""
    try:
        data = json.loads(payload or b"{}")
    except ValueError:
        return {"error": payload[:200].decode("utf-8", errors="replace")}
    return data if isinstance(data, dict) else {"error": str(data)[:200]}


def _unknown_model(url: str, model: str, protocol: str) -> NotServed:
    served = served_models(url, protocol)
    shown = model if len(model) <= 60 else f"{model[:40]}... ({len(model)} characters)"
    listing = f"it serves {', '.join(served)}" if served else "it serves no ready model"
    return NotServed(f"model {shown!r} is not served at {url}: {listing}")


def http_error(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
        message = body.get("error") or exc.reason
    except (ValueError, OSError):
        message = exc.reason
    return f"HTTP {exc.code}: {message}"


# --------------------------------------------------------------------------- model config


def _tensors(entries: Any) -> tuple[Tensor, ...]:
    out = []
    for entry in entries or ():
        datatype = str(entry.get("data_type", "")).removeprefix("TYPE_")
        datatype = "BYTES" if datatype == "STRING" else datatype
        dims = tuple(int(d) for d in entry.get("dims") or ())
        out.append(Tensor(entry.get("name", ""), datatype, dims, bool(entry.get("optional", False))))
    return tuple(out)


def info_from_config(model: str, config: dict[str, Any]) -> ModelInfo:
    """ModelInfo from a model's config (the JSON of Triton's config endpoints)."""
    params = {k: (v or {}).get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
    decoupled = bool((config.get("model_transaction_policy") or {}).get("decoupled", False))
    kv = params.get("use_kv_cache", "true").strip().lower() not in ("false", "0", "no")
    return ModelInfo(model, decoupled, kv, params.get("hf_model_name", ""), params, _tensors(config.get("input")),
                     _tensors(config.get("output")), int(config.get("max_batch_size") or 0),
                     str(config.get("backend") or config.get("platform") or ""))


def model_info(url: str, model: str, protocol: str = "grpc", timeout: float = 10.0) -> ModelInfo:
    """Read a served model's config: interface, decoupled, ``use_kv_cache`` (default timeout), ``hf_model_name``."""
    url = normalize_url(url)
    if len(model.encode()) > MAX_NAME:
        raise BadRequest(f"model name is too long ({len(model.encode())} bytes in UTF-8): model names are folder "
                         f"names, at most {MAX_NAME} bytes")
    try:
        with mapped(url, protocol):
            config = _config(url, model, protocol, timeout)
    except (NotServed, Refused):  # a config request is refused only for a model it does not know
        raise _unknown_model(url, model, protocol) from None
    return info_from_config(model, config)


def _config(url: str, model: str, protocol: str, timeout: float) -> dict[str, Any]:
    if protocol == "grpc":
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(url)
        try:
            return client.get_model_config(model, as_json=True, client_timeout=timeout)["config"]
        finally:
            client.close()
    try:
        with urllib.request.urlopen(f"http://{url}/v2/models/{model}/config", timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:  # its connection closed now, not when the collector finds a cycle holding the error
            if error_class(exc) in (NotServed, Refused):
                raise
            raise ServerFault(http_error(exc)) from None
