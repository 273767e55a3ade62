"""``qaic-console models --url URL``: what a running server serves, whatever its kind, and how the console speaks
to each model."""

from __future__ import annotations

from dataclasses import dataclass

from console.clients import ClientError, ModelInfo, Unreachable, interface_of
from console.core.adapters import Adapter, adapter_for


@dataclass(frozen=True)
class ServedModel:
    """One model the server knows; the interface fields are empty until it is READY."""

    name: str
    state: str
    interface: str = ""
    modes: str = ""
    model_type: str = ""
    ignores: str = ""
    reason: str = ""


def describe(server: Adapter, name: str, state: str, reason: str) -> ServedModel:
    """A model's row: for a READY one, its interface, modes, type and the controls it ignores."""
    if state != "READY":
        return ServedModel(name, state, reason=reason.splitlines()[0][:120] if reason else "")
    try:
        info: ModelInfo = server.listed_info(name)
        interface = interface_of(info)
    except ClientError as exc:
        return ServedModel(name, state, "unknown", reason=str(exc))
    except (OSError, ValueError) as exc:
        return ServedModel(name, state, "?", reason=f"config unreadable: {exc}")
    return ServedModel(name, state, interface.name, "+".join(info.modes), info.model_type,
                       ", ".join(interface.ignored()) or "-")


def served_models(url: str, api: str = "auto") -> tuple[str, list[ServedModel]]:
    """(the server's line, every model it knows); ClientError when it does not answer."""
    server = adapter_for(url, api)
    line = server.describe()
    try:
        states = server.model_states()
    except OSError as exc:
        raise Unreachable(f"{server.name} at {server.title()} does not answer: {exc}") from None
    rows = [describe(server, name, state or "not loaded", reason) for name, (state, reason) in sorted(states.items())]
    return line, rows


def format_models(rows: list[ServedModel]) -> str:
    """An aligned table, one row per model."""
    header = ("MODEL", "STATE", "INTERFACE", "MODES", "TYPE", "IGNORES")
    table = [header] + [(r.name, r.state, r.interface or "-", r.modes or "-", r.model_type or "-",
                         r.ignores + (f" ({r.reason})" if r.reason else "")) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in table)
