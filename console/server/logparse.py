"""Reading tritonserver's log: failed model loads, why it exited, which lines matter to a user.

On a machine without a GPU the server logs CUDA/NVML/DCGM complaints that are harmless; the
console's log views drop them (:func:`is_noise`) and say so once (:data:`NOISE_NOTE`). The consoles
show the log condensed (:func:`condensed`: errors, warnings, model loads, the backend's own lines and the
services' addresses, without Triton's wide tables), the raw log one key or click away.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence

_FAILED_LOAD = re.compile(r"failed to load '(?P<name>[^']+)' version \d+: (?P<reason>.*)")
_LOG_MESSAGE = re.compile(r'^[EW]\d{4} [\d:.]+\s+\d+ \S+\] "(?P<msg>.*)"\s*$')
_LOG_LINE = re.compile(r'^(?P<level>[IWE])\d{4} (?P<time>[\d:]+)[\d.]*\s+\d+ '
                       r'(?P<file>[^:\s]+):\d+\] "?(?P<msg>.*?)"?\s*$')
_TABLE = re.compile(r"^\s*[+|]")  # Triton's tables (repository agents, backends, models, options), up to 230 columns
_GETOPT_ERROR = re.compile(r"^\S*tritonserver: ")
_TERMINATE = "terminate called after throwing"  # the C++ runtime's last words before abort()
_PORT_TAKEN = re.compile(r"Socket '[^']*' already in use")  # "failed to start HTTP|GRPC|Metrics service: ..."
HARMLESS = ("CudaDriverHelper", "pinned memory", "DCGM", "NVML", "CUDA driver", "cuda_memory_manager",
            "Unable to allocate pinned system memory", "GPU metrics")
EXIT_EXPIRED = "Exit timeout expired"  # tritonserver stopped waiting for requests and models at shutdown
NOISE_NOTE = "(CUDA/NVML/DCGM messages of a machine without a GPU are hidden: they are harmless)"
LOADS = ("loading: ", "successfully loaded", "unloading: ", "successfully unloaded")
KEPT = (*LOADS, "Started ", "Waiting for in-flight", "All models are stopped")
LEVELS = {"E": "error: ", "W": "warning: ", "I": ""}


def message(line: str) -> str:
    """The message of a glog-style line (``E1129 ... file.cc:12] "msg"``), first line unescaped."""
    match = _LOG_MESSAGE.match(line)
    msg = match.group("msg") if match else line.strip()
    return msg.split("\\n", 1)[0].strip()


def is_noise(line: str) -> bool:
    """A GPU-less machine's harmless CUDA/NVML/DCGM complaint."""
    return any(h in line for h in HARMLESS)


def failed_model(line: str) -> tuple[str, str] | None:
    """``(model, reason)`` when ``line`` reports a failed model load."""
    match = _FAILED_LOAD.search(line)
    if not match:
        return None
    return match.group("name"), message(match.group("reason").rstrip('"'))


def exit_reason(lines: Sequence[str]) -> str:
    """The most telling error line of a server that exited."""
    for line in lines:  # a bad command line: getopt's "<argv0>: complaint" (then the usage text)
        if _GETOPT_ERROR.match(line):
            return line.strip()
    for line in reversed(lines):
        if line.startswith("error:"):
            return line[len("error:") :].strip()
        if line.startswith("E") and _LOG_MESSAGE.match(line):
            msg = message(line)
            if not is_noise(msg):
                return msg
    return lines[-1].strip() if lines else "no output"


def port_taken(lines: Sequence[str]) -> bool:
    """The log of a server that exited says a port it was to listen on was taken."""
    return any(_PORT_TAKEN.search(line) for line in lines)


def exit_cause(code: int, lines: Sequence[str]) -> str:
    """How a server that exited with ``code`` (negative: killed by that signal) ended, after its last log ``lines``:
    ``exited with code -6 (killed by SIGABRT: terminate called after throwing an instance of '...')``."""
    if code >= 0:
        return f"exited with code {code} ({exit_reason(lines)})"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    crash = next((line.strip() for line in reversed(lines) if line.startswith(_TERMINATE)), None)
    # its last log line says nothing then (and may name its ports): only an abort's reason counts
    return f"exited with code {code} (killed by {name}{f': {crash}' if crash else ''})"


def condensed(line: str, stamp: bool = True) -> str | None:
    """``line`` as a condensed log shows it (``HH:MM:SS message`` unless not ``stamp``), or None when it leaves it
    out: Triton's tables, its other info lines, a GPU-less machine's noise and the exit timeout that ends a normal
    stop. Lines that are not Triton's (the console's own, a traceback's) are kept as they are."""
    match = _LOG_LINE.match(line)
    if match is None:
        return None if _TABLE.match(line) or not line.strip() else line
    level, source, msg = match["level"], match["file"], match["msg"].split("\\n", 1)[0].strip()
    if is_noise(msg) or not (level in "EW" or source == "triton_model.py" or msg.startswith(KEPT)):
        return None
    if EXIT_EXPIRED in msg:  # a normal stop's end, not an error: the console says the server stopped
        return None
    shown = LEVELS[level] + msg
    return f"{match['time']} {shown}" if stamp else shown


def startup_line(line: str) -> str | None:
    """The server log lines worth showing while models load (errors, loads, the backend's own), shortened."""
    match = _LOG_LINE.match(line)
    if match is None or not (match["level"] == "E" or match["file"] == "triton_model.py" or
                             match["msg"].startswith(LOADS)):
        return None
    return condensed(line, stamp=False)


def stop_note(code: int | None, lines: Sequence[str]) -> str:
    """How a stop the console asked for ended, for "tritonserver stopped{note}": '' for a clean exit, or when
    Triton's exit timeout ran out while its models unloaded (it then exits at once, or is ended by the console:
    exit code 1 or -9, a normal stop all the same); else the exit code."""
    if not code or any(EXIT_EXPIRED in line for line in lines[-20:]):
        return ""
    return f" (exit code {code})"
