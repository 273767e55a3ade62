"""``qaic-console models --url HOST:PORT``: what a running tritonserver (or an OpenAI-compatible server, by its
``/v1`` URL) serves, and how the console speaks to each."""

from __future__ import annotations

import http.client
from dataclasses import dataclass

from console.clients import ClientError, info_from_config, interface_of, is_openai_url, normalize_url, openai_info
from console.clients.openai_api import OpenAIServer
from console.clients.wire import error_message
from console.server import ServerHandle


@dataclass(frozen=True)
class ServedModel:
    """One model of the server's repository; the interface fields are empty until it is READY."""

    name: str
    state: str
    interface: str = ""
    modes: str = ""
    model_type: str = ""
    ignores: str = ""
    reason: str = ""


def describe(handle: ServerHandle, name: str, state: str, reason: str) -> ServedModel:
    """A model's row: for a READY one, its interface, modes, type and the controls it ignores."""
    if state != "READY":
        return ServedModel(name, state, reason=reason.splitlines()[0][:120] if reason else "")
    try:
        info = info_from_config(name, handle.model_config(name))
        interface = interface_of(info)
    except ClientError as exc:
        return ServedModel(name, state, "unknown", reason=str(exc))
    except (OSError, ValueError) as exc:
        return ServedModel(name, state, "?", reason=f"config unreadable: {exc}")
    kv = info.parameters.get("use_kv_cache")
    model_type = "" if kv is None else ("kv_cache" if kv.strip().lower() in ("true", "1", "yes") else "causal")
    return ServedModel(name, state, interface.name, "+".join(info.modes), model_type or "-",
                       ", ".join(interface.ignored()) or "-")


def openai_models(url: str) -> tuple[str, list[ServedModel]]:
    """(the server's line, every model ``/v1/models`` lists); ClientError when it does not answer."""
    server = OpenAIServer.at(url)
    rows = []
    for name in server.models():
        info = openai_info(name)
        interface = interface_of(info)
        rows.append(ServedModel(name, "READY", interface.name, "+".join(info.modes), "-",
                                ", ".join(interface.ignored()) or "-"))
    return f"OpenAI-compatible server at {server.base}", rows


def served_models(url: str) -> tuple[str, list[ServedModel]]:
    """(the server's version line, every model of its repository); ClientError when it does not answer."""
    if is_openai_url(url):
        return openai_models(url)
    handle = ServerHandle(normalize_url(url))
    try:
        version = handle.describe_version()
        states = handle.model_states()
    except (http.client.HTTPException, OSError) as exc:  # nothing there, or the gRPC port
        raise ClientError(error_message(exc, handle.http_url, "http")) from None
    except ValueError as exc:
        raise ClientError(f"no tritonserver answers at {handle.http_url} (HTTP): {exc}") from None
    rows = [describe(handle, name, state or "not loaded", reason) for name, (state, reason) in sorted(states.items())]
    return f"tritonserver {version} at {handle.http_url}", rows


def format_models(rows: list[ServedModel]) -> str:
    """An aligned table, one row per model."""
    header = ("MODEL", "STATE", "INTERFACE", "MODES", "TYPE", "IGNORES")
    table = [header] + [(r.name, r.state, r.interface or "-", r.modes or "-", r.model_type or "-",
                         r.ignores + (f" ({r.reason})" if r.reason else "")) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in table)
