"""``qaic-console doctor``: cheap checks of what serving and chatting need on this machine."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from backend_model import models
from backend_model.contract import devices
from console import server

OK, FAIL, WARN, INFO, UNKNOWN = "ok", "FAIL", "warn", "info", "unknown"
DEFAULT_PORTS = (8000, 8001, 8002)

Row = tuple[str, str, str]


def check_python() -> Row:
    return ("python", INFO, f"{server.python_tag()} ({sys.executable})")


def check_tritonserver() -> Row:
    try:
        binary = server.find_tritonserver()
    except server.ServerError as exc:
        return ("tritonserver", FAIL, str(exc))
    return ("tritonserver", OK, f"{binary} ({server.triton_version(binary)})")


def server_version(binary: Path) -> tuple[str, str]:
    """(version, how it was found): the install's TRITON_VERSION file, else a short start on an empty repository."""
    version_file = binary.resolve().parent.parent / "TRITON_VERSION"
    if version_file.is_file():
        return version_file.read_text().strip(), str(version_file)
    with tempfile.TemporaryDirectory(prefix="qaic-doctor-") as empty:
        probe = server.TritonServer(Path(empty), binary=str(binary))
        try:
            probe.start(timeout=60)
            return probe.handle.server_version(), "reported by a short start on an empty repository"
        finally:
            probe.stop()


def check_server_version() -> Row:
    name = "tritonserver version"
    try:
        version, source = server_version(server.find_tritonserver())
    except (server.ServerError, OSError, ValueError) as exc:
        return (name, FAIL, " ".join(str(exc).split()))
    note = server.version_note(version)
    return (name, WARN, f"{version}: {note}") if note else (name, OK, f"{version} ({source})")


def check_stub() -> Row:
    name = f"python backend stub (py{server.python_tag()})"
    try:
        stub = server.stub_for_python(server.find_tritonserver())
    except server.ServerError as exc:
        return (name, FAIL, str(exc))
    return (name, OK, str(stub))


def _importable(module: str, missing: str) -> Row:
    if importlib.util.find_spec(module) is None:
        return (module, WARN, missing)
    return (module, OK, "importable")


def check_qefficient() -> Row:
    return _importable("QEfficient", "not installed: QAIC sessions unavailable, CPU backend only")


def check_qaicrt() -> Row:
    return _importable("qaicrt", "not installed: no Cloud AI 100 runtime, CPU backend only")


def check_devices() -> list[Row]:
    """The Cloud AI 100 SoCs ``qaic-util -q`` lists, one row each (QID, status, PCI address, board serial, DRAM,
    NSPs, networks active); one row saying why there are none."""
    found, where = devices.query()
    if not found:
        return [("qaic devices", INFO, where)]
    boards = len({d.board_serial for d in found})
    rows = [("qaic devices", OK, f"{len(found)} SoC{'s' * (len(found) != 1)} on {boards} board serial"
                                 f"{'s' * (boards != 1)} ({where})")]
    for d in found:
        busy = d.status != devices.READY or (d.nsp_free is not None and d.nsp_free != d.nsp_total)
        rows.append((f"  QID {d.qid}", WARN if busy else OK, d.summary()))
    return rows


def check_embedded_package() -> Row:
    name = "embedded model"
    try:
        gguf = models.embedded_gguf()  # located without importing the package (it needs llama_cpp)
    except models.ModelSourceError as exc:
        return (name, FAIL, str(exc))
    return (name, OK, str(gguf))


def check_embedded_prepared() -> Row:
    name = "embedded model prepared"
    prepared = models.embedded_prepared()
    if prepared is None:
        return (name, WARN, "not yet: prepared once on first use (~25 s)")
    return (name, OK, str(prepared))


def check_ports() -> Row:
    try:
        ports = server.free_ports(3)
    except OSError as exc:
        return ("free ports", FAIL, f"cannot bind a TCP port: {exc}")
    busy = [p for p in DEFAULT_PORTS if server.port_in_use(p)]
    defaults = f"{'/'.join(map(str, busy))} in use" if busy else "8000-8002 free"
    return ("free ports", OK, f"e.g. {', '.join(map(str, ports))} (defaults: {defaults}; free ports are picked)")


def hf_token_configured() -> bool:
    """Whether a Hugging Face token is configured (the token itself is never read out)."""
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return True
    hf_home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    token_file = Path(os.environ.get("HF_TOKEN_PATH") or os.path.join(hf_home, "token"))
    try:
        return token_file.is_file() and token_file.stat().st_size > 0
    except OSError:
        return False


def check_hf_token() -> Row:
    return ("HF token configured", INFO, "yes" if hf_token_configured() else "no")


CHECKS: tuple[Callable[[], Row | list[Row]], ...] = (
    check_python,
    check_tritonserver,
    check_server_version,
    check_stub,
    check_qefficient,
    check_qaicrt,
    check_devices,
    check_embedded_package,
    check_embedded_prepared,
    check_ports,
    check_hf_token,
)


def run_doctor() -> tuple[list[Row], bool]:
    """All checks as ``(check, status, detail)`` rows, and whether nothing essential failed."""
    rows = [row for check in CHECKS for row in _rows(check())]
    return rows, all(status != FAIL for _, status, _ in rows)


def _rows(found: Row | list[Row]) -> list[Row]:
    return found if isinstance(found, list) else [found]


def format_rows(rows: list[Row]) -> str:
    """A plain aligned table."""
    width = max(len(check) for check, _, _ in rows)
    return "\n".join(f"{check:<{width}}  {status:<7}  {detail}" for check, status, detail in rows)
