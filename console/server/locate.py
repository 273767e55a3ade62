"""Where tritonserver and its Python backend are, and the environment that makes the backend find this venv.

Two kinds of server are supported:

* the Qualcomm container's ``/opt/tritonserver/bin/tritonserver`` (its default backends are kept);
* the CPU-only server shipped in the ``nvidia-pytriton`` wheel. Its Python backend is assembled once
  into a cache directory (``libtriton_python.so``, ``triton_python_backend_utils.py`` and the stub for
  the running Python), ``nvidia_pytriton.libs`` goes on ``LD_LIBRARY_PATH`` and the running
  interpreter's ``bin/`` goes first on ``PATH`` (the stub's embedded Python takes its environment from
  the first ``python3`` on ``PATH``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from backend_model.models import cache_root

from .errors import ServerError

SYSTEM_TRITONSERVER = Path("/opt/tritonserver/bin/tritonserver")
ENV_TRITONSERVER = "QAIC_TRITONSERVER"
STUB_NAME = "triton_python_backend_stub"
PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def pytriton_dir() -> Path | None:
    """``<site-packages>/pytriton/tritonserver`` of the installed wheel (found without importing it)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    return root if root.is_dir() else None


def find_tritonserver(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The tritonserver to run: ``explicit``, ``$QAIC_TRITONSERVER``, /opt/tritonserver, the pytriton wheel."""
    for given, origin in ((explicit, "--tritonserver"), (os.environ.get(ENV_TRITONSERVER), ENV_TRITONSERVER)):
        if given:
            path = Path(given).expanduser()
            if not _executable(path):
                raise ServerError(f"{origin}: {path} is not an executable tritonserver")
            return path.absolute()
    if _executable(SYSTEM_TRITONSERVER):
        return SYSTEM_TRITONSERVER
    wheel = pytriton_dir()
    if wheel is not None and _executable(wheel / "bin" / "tritonserver"):
        return wheel / "bin" / "tritonserver"
    raise ServerError(
        f"tritonserver not found: `pip install nvidia-pytriton` (CPU) or set {ENV_TRITONSERVER}=/path/to/tritonserver"
    )


def wheel_root(binary: Path) -> Path | None:
    """The wheel's ``tritonserver`` directory when ``binary`` is the nvidia-pytriton one, else None."""
    root = binary.resolve().parent.parent
    has_stubs = (root / "python_backend_stubs").is_dir()
    return root if has_stubs and (root / "backends" / "python").is_dir() else None


def python_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def stub_for_python(binary: Path) -> Path:
    """The Python backend stub the server will use for this Python; ServerError when there is none."""
    root = wheel_root(binary)
    if root is None:
        stub = binary.resolve().parent.parent / "backends" / "python" / STUB_NAME
        if not stub.is_file():
            raise ServerError(f"the Python backend stub is missing: {stub}")
        return stub
    stub = root / "python_backend_stubs" / python_tag() / STUB_NAME
    if not stub.is_file():
        have = sorted(p.name for p in (root / "python_backend_stubs").iterdir() if (p / STUB_NAME).is_file())
        raise ServerError(
            f"nvidia-pytriton has no Python backend stub for Python {python_tag()} "
            f"(it has {', '.join(have) or 'none'}): use one of those Python versions"
        )
    return stub


def wheel_version(binary: Path) -> str | None:
    """Version of the nvidia-pytriton wheel that ships ``binary`` (None when not from the wheel)."""
    if wheel_root(binary) is None:
        return None
    try:
        return importlib.metadata.version("nvidia-pytriton")
    except importlib.metadata.PackageNotFoundError:
        return None


def triton_version(binary: Path) -> str:
    """A cheap description of the server version (tritonserver has no ``--version``)."""
    version_file = binary.resolve().parent.parent / "TRITON_VERSION"
    with contextlib.suppress(OSError):
        return f"Triton {version_file.read_text().strip()}"
    wheel = wheel_version(binary)
    return f"nvidia-pytriton {wheel} wheel" if wheel else "version unknown"


def _link(src: Path, dst: Path) -> None:
    """Make ``dst`` point at ``src`` (symlink, else copy), atomically and only when needed."""
    if dst.is_symlink() and Path(os.readlink(dst)) == src:
        return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        tmp.symlink_to(src)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def backend_directory(binary: Path) -> Path | None:
    """For the wheel's server, the assembled ``--backend-directory``; None for other servers."""
    root = wheel_root(binary)
    if root is None:
        return None
    stub = stub_for_python(binary)
    key = hashlib.sha256(str(root).encode()).hexdigest()[:8]
    backends = cache_root() / "triton-backends" / f"py{python_tag()}-{key}"
    python_dir = backends / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for name in PYTHON_BACKEND_FILES:
        _link(root / "backends" / "python" / name, python_dir / name)
    _link(stub, python_dir / STUB_NAME)
    return backends


def _prepend(env: dict[str, str], var: str, path: Path | str) -> None:
    parts = [p for p in env.get(var, "").split(os.pathsep) if p and p != str(path)]
    env[var] = os.pathsep.join([str(path), *parts])


def server_env(binary: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for tritonserver: the interpreter's bin/ first on PATH, wheel libs on LD path."""
    env = dict(os.environ)
    env.update(extra or {})
    _prepend(env, "PATH", Path(sys.executable).parent)
    root = wheel_root(binary)
    if root is not None:
        libs = root.parent.parent / "nvidia_pytriton.libs"
        if libs.is_dir():
            _prepend(env, "LD_LIBRARY_PATH", libs)
        # The stub links libpython3.X by soname: give it this interpreter's, not the system's
        # (an older patch release lacks symbols that this interpreter's extension modules need).
        libdir = sysconfig.get_config_var("LIBDIR")
        if libdir and any(Path(libdir).glob(f"libpython{sys.version_info.major}.{sys.version_info.minor}*.so*")):
            _prepend(env, "LD_LIBRARY_PATH", Path(libdir))
    return env
