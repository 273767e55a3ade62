"""What the Server pane's state line and models table show: pure functions of the controller's snapshot."""

from __future__ import annotations

from pathlib import Path

from textual.markup import escape

from console.clients import ClientError, interface_of
from console.core.controller import ModelRow, Snapshot
from repo_gen.inspection import list_models

COLUMNS = ("Model", "State", "Type", "Mode", "Interface", "Note")
MARKS = {
    "idle": ("○", "text-muted"), "stopped": ("○", "text-muted"), "starting": ("◔", "warning"),
    "stopping": ("◔", "warning"), "ready": ("●", "success"), "connected": ("●", "success"),
    "failed": ("✖", "error"), "unreachable": ("✖", "error"),
}
TYPES = {"kv_cache": "kv", "causal": "causal"}


def model_row(model: ModelRow) -> tuple[str, ...]:
    """A models-table row: name, state, type (kv/causal), mode (stream/batch), the interface it speaks, why (or,
    served on device groups, its instances with their SoCs)."""
    info, kind, mode, interface = model.info, "", "", ""
    if info is not None:
        kind = TYPES.get(info.model_type, "-")
        mode = "/".join(info.modes)
        try:
            interface = interface_of(info).name
        except ClientError:
            interface = "unsupported"
    note = model.reason or (info.instances if info is not None else "")
    return model.name, model.state or "not loaded", kind, mode, interface, note


def repository_rows(repository: Path) -> list[tuple[str, ...]]:
    """The model folders of a repository no server runs on yet, as models-table rows (one row saying why not)."""
    try:
        models = list_models(repository)
    except ValueError as exc:
        return [("-", "", "", "", "", str(exc))]
    return [(m.name, "not served", TYPES.get(m.model_type, m.model_type),
             {True: "stream", False: "batch", None: "?"}[m.decoupled], "", "; ".join(m.problems) or m.source)
            for m in models]


def state_markup(snap: Snapshot) -> str:
    """The phase, its message, and where the server answers."""
    mark, style = MARKS.get(snap.phase, ("?", "text"))
    lines = [f"[${style}]{mark} {snap.phase}[/]  {escape(snap.message)}"]
    for label, address in snap.server.addresses() if snap.server else ():
        lines.append(f"[b]{escape(label)}[/]{' ' * max(9 - len(label), 1)}{escape(address)}")
    return "\n".join(lines)
