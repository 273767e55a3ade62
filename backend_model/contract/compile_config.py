"""compile_config.json: the seed's keys, their types, ranges and defaults.

Defaults are QEfficient's compile defaults; they apply when a key (or the whole file) is absent.
``full_batch_size`` turns on continuous batching; ``lora_adapters`` names the LoRA adapters compiled in.
"""

from __future__ import annotations

import difflib
import json
import os
import stat
from pathlib import Path
from typing import Any

# key: (type, default, check, rule shown in errors)
SCHEMA: dict[str, tuple[type, Any, Any, str]] = {
    "onnx_path": (str, None, lambda v: bool(v), "a non-empty path"),
    "prefill_seq_len": (int, 32, lambda v: 1 <= v <= 32768, "an integer in [1, 32768]"),
    "ctx_len": (int, 128, lambda v: 2 <= v <= 131072, "an integer in [2, 131072]"),
    "batch_size": (int, 1, lambda v: 1 <= v <= 1024, "an integer in [1, 1024]"),
    "full_batch_size": (int, None, lambda v: 1 <= v <= 1024, "an integer in [1, 1024]"),
    "num_cores": (int, 16, lambda v: 1 <= v <= 16, "an integer in [1, 16]"),
    "mxfp6_matmul": (bool, False, lambda v: True, "true or false"),
    "mxint8_kv_cache": (bool, False, lambda v: True, "true or false"),
    "aic_enable_depth_first": (bool, False, lambda v: True, "true or false"),
    "mos": (int, -1, lambda v: v == -1 or 1 <= v <= 16, "-1 or an integer in [1, 16]"),
    "num_devices": (int, 1, lambda v: 1 <= v <= 64, "an integer in [1, 64] (the SoCs one QPC is tensor-sliced across)"),
    # QEfficient's finite LoRAX: the adapters compiled into the QPC, their lora_ids from 1 in this order
    "lora_adapters": (list, None, lambda v: bool(v) and all(isinstance(n, str) and n for n in v),
                      "a list of adapter names (config.pbtxt's lora_adapters, in order)"),
}
KEYS = tuple(SCHEMA)
MAX_BYTES = 64 * 1024  # a compile config is a few hundred bytes; a model's config.json a few kilobytes
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
          (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"))


class CompileConfigError(ValueError):
    """A compile config that cannot be used; the message names the key."""


def validate(raw: Any, source: str = "compile config") -> dict[str, Any]:
    """Check ``raw`` against the schema; return it with defaults filled in."""
    if not isinstance(raw, dict):
        raise CompileConfigError(f"{source}: must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(SCHEMA))
    if unknown:
        like = difflib.get_close_matches(str(unknown[0]).lower().replace("-", "_"), KEYS, n=1, cutoff=0.7)
        guess = f"did you mean {like[0]!r}? " if like else ""
        raise CompileConfigError(f"{source}: unknown key {unknown[0]!r} ({guess}supported: {', '.join(KEYS)})")
    out: dict[str, Any] = {}
    for key, (typ, default, check, rule) in SCHEMA.items():
        if key not in raw or raw[key] is None:
            out[key] = default
            continue
        value = raw[key]
        ok_type = isinstance(value, typ) and (typ is bool or not isinstance(value, bool))
        if not ok_type or not check(value):
            raise CompileConfigError(f"{source}: {key!r} must be {rule}, got {value!r}")
        out[key] = value
    if out["prefill_seq_len"] > out["ctx_len"]:
        raise CompileConfigError(
            f"{source}: 'prefill_seq_len' ({out['prefill_seq_len']}) must not exceed 'ctx_len' ({out['ctx_len']})"
        )
    return out


def load(path: str | Path) -> dict[str, Any]:
    """Read and validate a compile_config.json."""
    return validate(read(path), str(path))


def read_small(path: str | Path, limit: int = MAX_BYTES) -> str:
    """The text of ``path``, a regular file of at most ``limit`` bytes, checked before anything is read: a device
    (``/dev/zero``), a FIFO or a bigger file is a ValueError naming it at once. OSError when it cannot be read."""
    path = Path(path)
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise ValueError(f"{path} is {kind}: only a regular file is read")
    with open(path, "rb") as file:  # a regular file: opening it cannot block
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is over {limit} bytes: too big to read")
    return data.decode("utf-8")


def read(path: str | Path) -> dict[str, Any]:
    """The JSON object of a compile_config.json as written (a small regular file); not validated."""
    path = Path(path)
    try:
        text = read_small(path)
    except FileNotFoundError:
        raise CompileConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CompileConfigError(f"{path}: cannot read ({exc})") from None
    except ValueError as exc:
        raise CompileConfigError(str(exc)) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CompileConfigError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise CompileConfigError(f"{path}: must be a JSON object, got {type(raw).__name__}")
    return raw


def explicit(config: dict[str, Any]) -> dict[str, Any]:
    """The keys that differ from their defaults (what a written file needs to say)."""
    return {k: v for k, v in config.items() if v != SCHEMA[k][1]}
