"""specializations.json: the shapes a QPC (or its ONNX twin) was compiled for, in both of QEfficient's forms.

Older QEfficient writes flat entries, ``{"specializations": [{"batch_size": "1", "seq_len": "32",
"ctx_len": "128"}, ...]}``; current QEfficient writes named ones, ``{"specializations": [{"name":
"Prefill", "symbols": {...}}, ...]}``. Both are read; the current form is written, with the entries
QEfficient's ``build_prefill_specialization`` / ``build_decode_specialization`` make.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from .errors import SessionError

FILE = "specializations.json"
CCL = "comp_ctx_lengths"  # a compute-context length's symbol (and the input it sizes)
Symbols = Dict[str, str]  # typing.Dict: evaluated at run time, so 3.8-safe


def find_graph(path: str | Path) -> Path:
    """The .onnx file itself, or the one .onnx file in a folder (QEfficient's export folder)."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    found = sorted(path.glob("*.onnx")) if path.is_dir() else []
    if len(found) != 1:
        what = "does not exist" if not path.exists() else f"holds {len(found)} .onnx files (give the file)"
        raise SessionError(f"ONNX graph {path} {what}")
    return found[0]


def beside(graph: Path) -> Path | None:
    """The specializations.json beside a graph (the file ``find_graph`` gives), or None: QEfficient's
    export writes none (its ``compile()`` does, in the compile folder)."""
    path = graph.parent / FILE
    return path if path.is_file() else None


def parse(document: Any) -> list[Symbols]:
    """The symbols of every entry (flat or named form); ValueError when it is neither."""
    entries = document.get("specializations") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError("no 'specializations' list")
    out = []
    for i, entry in enumerate(entries):
        symbols = entry.get("symbols", entry) if isinstance(entry, dict) else None
        if not isinstance(symbols, dict):
            raise ValueError(f"specialization {i} is not an object")
        out.append({str(k): str(v) for k, v in symbols.items()})
    return out


def read(path: str | Path) -> list[Symbols]:
    """Read and parse one specializations.json; ValueError naming the file when it cannot be used."""
    path = Path(path)
    try:
        return parse(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a usable {FILE} ({exc})") from None


def build(batch_size: int, prefill_seq_len: int, ctx_len: int, full_batch_size: int = 0) -> list[dict[str, Any]]:
    """The named entries a QEfficient compile of these dimensions writes (``full_batch_size``: continuous)."""
    if full_batch_size:
        exec_batch = full_batch_size if prefill_seq_len == 1 else 1
        prefill = {"batch_size": exec_batch, "seq_len": prefill_seq_len, "ctx_len": ctx_len,
                   "full_batch_size": full_batch_size, "full_batch_exec_size": exec_batch}
        decode: dict[str, int] | None = {"batch_size": full_batch_size, "seq_len": 1, "ctx_len": ctx_len,
                                         "full_batch_size": full_batch_size}
    else:
        prefill = {"batch_size": batch_size, "seq_len": prefill_seq_len, "ctx_len": ctx_len}
        decode = None if prefill_seq_len == 1 else {"batch_size": batch_size, "seq_len": 1, "ctx_len": ctx_len}
    named = [("Prefill", prefill), ("Decode", decode)]
    return [{"name": name, "symbols": {k: str(v) for k, v in entry.items()}} for name, entry in named if entry]


def with_lengths(entries: list[dict[str, Any]], prefill: list[int], decode: list[int]) -> list[dict[str, Any]]:
    """``build``'s entries with compute-context lengths: one prefill entry per ``prefill`` length and one decode
    entry per ``decode`` length (``comp_ctx_lengths``), as QEfficient's ``compile`` makes them (a prefill_seq_len of
    1 takes the decode list)."""
    out = []
    for entry in entries:
        seq_len = entry["symbols"]["seq_len"]
        lengths = prefill if entry["name"] == "Prefill" and seq_len != "1" else decode
        out += [{**entry, "symbols": {**entry["symbols"], CCL: str(length)}} for length in lengths]
    return out


def of_config(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries a QEfficient compile of a (validated) compile config writes."""
    c = config
    entries = build(c["batch_size"], c["prefill_seq_len"], c["ctx_len"], c["full_batch_size"] or 0)
    prefill, decode = c.get("comp_ctx_lengths_prefill"), c.get("comp_ctx_lengths_decode")
    return with_lengths(entries, prefill, decode) if prefill and decode else entries


def compile_dims(entries: list[Symbols]) -> dict[str, Any]:
    """The compile config keys these specializations were built from (``build``'s inverse)."""
    def most(key: str) -> int:
        return max(int(e.get(key, 0)) for e in entries)

    full_batch = most("full_batch_size")
    dims: dict[str, Any] = {"prefill_seq_len": most("seq_len"), "ctx_len": most("ctx_len")}
    lengths = comp_ctx_lengths([(int(e["seq_len"]), int(e[CCL])) for e in entries if CCL in e and "seq_len" in e])
    if lengths:
        dims["comp_ctx_lengths_prefill"] = lengths[max(lengths)]
        dims["comp_ctx_lengths_decode"] = lengths[1] if 1 in lengths else lengths[max(lengths)]
    return {**dims, "full_batch_size": full_batch} if full_batch else {**dims, "batch_size": most("batch_size")}


def comp_ctx_lengths(pairs: list[tuple[int, int]]) -> dict[int, list[int]]:
    """{seq_len: its compute-context lengths, increasing} from (seq_len, length) pairs of specializations."""
    out: dict[int, list[int]] = {}
    for seq_len, length in sorted(set(pairs)):
        out.setdefault(seq_len, []).append(length)
    return out


def choose_length(lengths: list[int], positions: list[int], seq_len: int) -> int:
    """The compute-context length a run uses, as QEfficient's generation loop chooses it: a prefill chunk the first
    length that holds the chunk's padded end (``(i + 1) * prefill_seq_len``: its first position plus ``seq_len``);
    a decode step (seq_len 1) the first length past its largest position + 1 (QEfficient moves on one position
    early); the last length when none does. ``positions``: each row's first valid position (prefill) or its
    position (decode)."""
    needed = max(positions) + (seq_len if seq_len > 1 else 2)
    return next((length for length in lengths if length >= needed), lengths[-1])


def write(folder: str | Path, entries: list[dict[str, Any]]) -> Path:
    """Write ``folder/specializations.json`` in the current form."""
    path = Path(folder) / FILE
    path.write_text(json.dumps({"specializations": entries}, indent=2) + "\n", encoding="utf-8")
    return path
