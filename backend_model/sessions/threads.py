"""How many threads a CPU engine computes with: ``cpu_threads`` 0 picks them from the machine.

One CPU is left to everything around the engine (the server, the response thread, the clients):
a step's parallel regions otherwise wait on whichever thread those preempt. The rest is shared
by the CPU models the server loads, so several models serving at once do not oversubscribe.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_COUNT = re.compile(r"\bcount\s*:\s*(\d+)")
_ENGINE = re.compile(r'key\s*:\s*"engine"\s*value\s*:\s*\{\s*string_value\s*:\s*"(\w*)"')


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def auto_threads(cpus: int, cpu_models: int) -> int:
    """Threads per model: all CPUs but one, shared by ``cpu_models`` models; at least one."""
    return max(1, (cpus - 1) // max(1, cpu_models))


def choose_threads(requested: int, cpu_models: int = 1) -> tuple[int, str]:
    """``requested`` (0 = automatic) -> (threads, how they were chosen, for the model's log line)."""
    if requested:
        return requested, "set"
    cpus = available_cpus()
    return auto_threads(cpus, cpu_models), f"auto: {cpus} cpus, {cpu_models} cpu model{'s' * (cpu_models != 1)}"


def server_args(pid: int | None = None) -> list[str]:
    """The command line of the process that started this one (tritonserver, inside a model), or []."""
    try:
        raw = Path(f"/proc/{pid or os.getppid()}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _option(args: list[str], name: str) -> list[str]:
    """Every value of ``--name=value`` or ``--name value`` in ``args``."""
    values = []
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            values.append(arg[len(name) + 1 :])
        elif arg == name and i + 1 < len(args):
            values.append(args[i + 1])
    return values


def loaded_models(repository: Path, args: list[str]) -> list[Path]:
    """The model folders a tritonserver with ``args`` loads at start from ``repository``."""
    names = _option(args, "--load-model")
    if "explicit" in _option(args, "--model-control-mode") and names and "*" not in names:
        return [repository / name for name in dict.fromkeys(names)]
    return sorted(p for p in repository.iterdir() if (p / "config.pbtxt").is_file())


def cpu_instances(folder: Path, card: bool = False) -> int:
    """Instances of a qaic-console model that compute on the CPU (0 for other models, or on the card)."""
    try:
        config = (folder / "config.pbtxt").read_text(encoding="utf-8")
    except OSError:
        return 0
    if '"use_kv_cache"' not in config and '"task"' not in config:  # not a model of this backend (a decoder, an encoder)
        return 0
    engine = _ENGINE.search(config)
    kind = engine.group(1) if engine else "auto"
    if kind == "qaic" or (kind in ("", "auto") and card):
        return 0
    count = _COUNT.search(config)
    return int(count.group(1)) if count else 1


def served_cpu_models(model_dir: str | Path, card: bool = False) -> int:
    """CPU model instances of the server that loads ``model_dir`` (this model included); at least 1."""
    folder = Path(model_dir)
    found = sum(cpu_instances(p, card) for p in loaded_models(folder.parent, server_args()))
    return max(1, found)
