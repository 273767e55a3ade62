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

from .errors import CANCELLED, CONNECTION, SERVER, TIMEOUT, ClientError
from .events import ModelInfo, Tensor

PROTOCOLS = ("http", "grpc")
_NUMPY = {"BOOL": np.bool_, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
          **{f"{s}INT{b}": np.dtype(f"{s.lower()}int{b}").type for s in ("", "U") for b in (8, 16, 32, 64)}}


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


# --------------------------------------------------------------------------- tensors


def tensor(module: Any, name: str, datatype: str, values: Sequence[Any], dims: Sequence[int] | None = None) -> Any:
    """An InferInput of tritonclient.http or .grpc (``module``) holding ``values`` in shape ``dims``."""
    if datatype == "BYTES":
        array = np.array([str(v).encode("utf-8") for v in values], dtype=np.object_)
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
        raise ClientError(f"the model returned {len(values)} {name} values for {n} prompts", SERVER)
    return [text(v) for v in values] if texts else values


# --------------------------------------------------------------------------- errors


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
    message = exc.message() if isinstance(exc, InferenceServerException) else str(exc)
    message = " ".join((message or type(exc).__name__).split())
    if error_kind(exc) == CONNECTION:
        what = "lost the connection to" if lost else "cannot reach"
        return f"{what} tritonserver at {url} ({protocol}): {message}"
    return message


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
        raise ClientError(http_error(exc), SERVER) from None
    except (InferenceServerException, OSError, ValueError) as exc:
        raise ClientError(error_message(exc, url, protocol), error_kind(exc)) from None
    return info_from_config(model, config)
