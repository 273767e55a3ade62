"""A compiled QPC on disk: where ``programqpc.bin`` is, what ``specializations.json`` says, and its model type.

Standard library only (the generator, which may run under a bare Python 3.8, imports this module).
QEfficient and qaicrt exist only inside Qualcomm's environment (``/opt/qeff-env``): they are imported
lazily, by :func:`open_session`, and only when a QPC must be loaded.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, Callable

from . import specializations
from .errors import SessionError

SPECIALIZATIONS = specializations.FILE
# Buffers the card keeps between runs (QEfficient's ``is_retained_state_name``): KV caches and the
# state of hybrid/MLA models. Callers skip them, so they never travel to the host.
RETAINED_PREFIXES = ("past_", "conv_state.", "recurrent_state.", "compressed_", "k_pe")
DETECT_MESSAGE = "determining the model type of the QPC ..."
LOAD_MESSAGE = "loading the QPC to read its bindings (this may take several minutes) ..."


def qaic_available() -> bool:
    """True when QEfficient and the qaicrt runtime can be imported."""
    return all(importlib.util.find_spec(m) is not None for m in ("QEfficient", "qaicrt"))


def find_qpc(path: str | Path) -> Path:
    """The directory holding ``programqpc.bin`` inside a QPC folder (any QEfficient layout)."""
    root = Path(path).expanduser()
    if not root.exists():
        raise SessionError(f"QPC directory {root} does not exist")
    if (root / "programqpc.bin").is_file():
        return root
    found = sorted(p.parent for p in root.rglob("programqpc.bin"))
    if not found:
        raise SessionError(f"no programqpc.bin under {root}: not a compiled QPC")
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(root)) for p in found)
        raise SessionError(f"{root} holds {len(found)} compiled QPCs ({names}): point aic_binary_dir at one of them")
    return found[0]


def open_session(qpc: Path, device_ids: list[int] | None = None) -> Any:
    """QEfficient's ``QAICInferenceSession`` on ``qpc`` (SessionError when QEfficient is missing)."""
    if importlib.util.find_spec("QEfficient") is None:
        raise SessionError(
            "QEfficient is not installed: run inside Qualcomm's container with "
            "`source /opt/qeff-env/bin/activate`, or use engine=cpu"
        )
    from QEfficient.generation.cloud_infer import QAICInferenceSession

    return QAICInferenceSession(str(qpc), device_ids=device_ids)


def has_kv_cache(input_names: list[str]) -> bool:
    """A KV-cache QPC takes ``past_key.*`` inputs; a causal one does not."""
    return any(name.startswith("past_key") for name in input_names)


def specializations_of(program: Path, root: Path | None = None) -> list[dict[str, str]] | None:
    """The symbols of each specialization (both file forms), or None when there is no file.

    Looked for beside ``programqpc.bin`` (``program``: its folder), in its parent (QEfficient's
    layout, and the ONNX twin's: beside the graph) and in ``root``. SessionError names a file that is
    there but unusable.
    """
    places = [program / SPECIALIZATIONS, program.parent / SPECIALIZATIONS]
    if root is not None:
        places.append(root / SPECIALIZATIONS)
    for path in dict.fromkeys(places):
        if path.is_file():
            try:
                return specializations.read(path)
            except ValueError as exc:
                raise SessionError(str(exc)) from None
    return None


def num_devices_of(aic_binary_dir: str | Path) -> int | None:
    """The SoCs a QPC was compiled to run on (tensor slicing), from the multi-device partition config QEfficient's
    compile writes beside ``specializations.json`` (``mdp_ts_<N>.json``: the devices of its partition); None when
    there is none (a one-SoC compile writes none)."""
    root = Path(aic_binary_dir).expanduser()
    qpc = find_qpc(root)
    for folder in dict.fromkeys([qpc, qpc.parent, root]):
        for path in sorted(folder.glob("mdp_ts_*.json")):
            try:
                config = json.loads(path.read_text(encoding="utf-8"))
                return len(config["partitions"][0]["devices"])
            except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
                raise SessionError(f"{path}: not a multi-device partition config ({type(exc).__name__})") from None
    return None


def model_type_of(aic_binary_dir: str | Path, progress: Callable[[str], None]) -> str:
    """'kv_cache' or 'causal' for a QPC folder.

    ``specializations.json`` answers first (a KV-cache QPC's carry ``ctx_len``, the cache length);
    without one the QPC is loaded through QEfficient (minutes for a large model) and its bindings
    tell (``past_key.*`` inputs). SessionError says why neither could.
    """
    root = Path(aic_binary_dir).expanduser()
    qpc = find_qpc(root)
    progress(DETECT_MESSAGE)
    entries = specializations_of(qpc, root)
    if entries is not None:
        return "kv_cache" if any("ctx_len" in e for e in entries) else "causal"
    if not qaic_available():
        raise SessionError(
            f"cannot determine the model type of QPC {qpc}: no {SPECIALIZATIONS} beside it and QEfficient is "
            "not installed, so it cannot be loaded; pass --model_type causal or --model_type kv_cache"
        )
    progress(LOAD_MESSAGE)
    session = open_session(qpc)
    try:
        return "kv_cache" if has_kv_cache(list(session.input_names)) else "causal"
    finally:
        deactivate = getattr(session, "deactivate", None)
        if deactivate is not None:
            deactivate()
