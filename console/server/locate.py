"""Where tritonserver and its Python backend are, and the environment that makes the backend find its Python.

Two kinds of server are supported:

* the Qualcomm container's ``/opt/tritonserver/bin/tritonserver`` (its default backends are kept);
* the CPU-only server shipped in the ``nvidia-pytriton`` wheel. Its backend directory is assembled into a
  cache directory: ``python/`` holds hard links (or copies) of ``libtriton_python.so``,
  ``triton_python_backend_utils.py`` and the stub for the stubs' Python (tritonserver refuses a Python-based
  backend, such as Triton's ``vllm``, whose ``libtriton_python.so`` resolves outside that directory, as a
  symlink does), and each Python-based backend given (``NAME/model.py``) is linked beside it.
  ``nvidia_pytriton.libs`` goes on ``LD_LIBRARY_PATH``.

The stubs run this interpreter's environment unless another is given (:class:`~.pyenv.PythonEnv`): its
``bin/`` goes first on ``PATH`` (the stub's embedded Python takes its environment from the first ``python3``
on ``PATH``) and its ``libpython`` on ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from backend_model.models import cache_root
from console.infra.extras import install_line

from .errors import ServerError
from .pyenv import PythonEnv

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
    raise ServerError(f"tritonserver not found: `{install_line('serve')}` (the CPU server of nvidia-pytriton, and the "
                      f"engine) or set {ENV_TRITONSERVER}=/path/to/tritonserver")


def wheel_root(binary: Path) -> Path | None:
    """The wheel's ``tritonserver`` directory when ``binary`` is the nvidia-pytriton one, else None."""
    root = binary.resolve().parent.parent
    has_stubs = (root / "python_backend_stubs").is_dir()
    return root if has_stubs and (root / "backends" / "python").is_dir() else None


def python_tag() -> str:
    """This interpreter's ``X.Y``."""
    return PythonEnv.current().version


def stub_for_python(binary: Path, version: str | None = None) -> Path:
    """The Python backend stub the server will use for Python ``version`` (default: this one's); ServerError when
    there is none."""
    version = version or python_tag()
    root = wheel_root(binary)
    if root is None:
        stub = binary.resolve().parent.parent / "backends" / "python" / STUB_NAME
        if not stub.is_file():
            raise ServerError(f"the Python backend stub is missing: {stub}")
        return stub
    stub = root / "python_backend_stubs" / version / STUB_NAME
    if not stub.is_file():
        have = sorted(p.name for p in (root / "python_backend_stubs").iterdir() if (p / STUB_NAME).is_file())
        raise ServerError(
            f"nvidia-pytriton has no Python backend stub for Python {version} "
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


def _same(src: Path, dst: Path) -> bool:
    """``dst`` is already a hard link or an unchanged copy of ``src`` (not a symlink)."""
    try:
        a, b = src.stat(), dst.lstat()
    except FileNotFoundError:
        return False
    return not dst.is_symlink() and ((a.st_ino, a.st_dev) == (b.st_ino, b.st_dev) or
                                     (a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns))


def _place(src: Path, dst: Path) -> None:
    """Make ``dst`` a hard link of ``src`` (a copy across file systems), atomically and only when needed."""
    if _same(src, dst):
        return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def _symlink(src: Path, dst: Path) -> None:
    """Make ``dst`` a symlink to ``src``, atomically and only when needed."""
    if dst.is_symlink() and Path(os.readlink(dst)) == src:
        return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(src)
    os.replace(tmp, dst)


def python_based_backends(folders: Sequence[str | os.PathLike[str]]) -> dict[str, Path]:
    """``{name: folder}`` of the Python-based backends (``NAME/model.py``) in ``folders``; ServerError when one of
    them holds none."""
    found: dict[str, Path] = {}
    for given in folders:
        folder = Path(given).expanduser().absolute()
        here = {p.name: p for p in sorted(folder.glob("*/model.py")) if p.parent.name != "python"}
        if not here:
            raise ServerError(f"backend folder {folder}: no Python-based backend there (NAME/model.py, e.g. "
                              "Triton's vLLM backend as vllm/model.py)")
        found.update({p.parent.name: p.parent for p in here.values()})
    return found


def backend_directory(binary: Path, python: PythonEnv | None = None,
                      backends: Sequence[str | os.PathLike[str]] = ()) -> Path | None:
    """For the wheel's server, the assembled ``--backend-directory`` (the stub for ``python``'s version, the
    Python-based backends of ``backends`` linked in); None for other servers, which keep their own."""
    root = wheel_root(binary)
    extra = python_based_backends(backends)
    if root is None:
        if extra:
            raise ServerError(f"{binary} keeps its own backend directory: put Python-based backends there "
                              f"({binary.resolve().parent.parent / 'backends'}/NAME/model.py)")
        return None
    python = python or PythonEnv.current()
    stub = stub_for_python(binary, python.version)
    key = hashlib.sha256("|".join([str(root), *map(str, extra.values())]).encode()).hexdigest()[:8]
    folder = cache_root() / "triton-backends" / f"py{python.version}-{key}"
    python_dir = folder / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for name in PYTHON_BACKEND_FILES:
        _place(root / "backends" / "python" / name, python_dir / name)
    _place(stub, python_dir / STUB_NAME)
    for name, source in extra.items():
        _symlink(source, folder / name)
    return folder


def _prepend(env: dict[str, str], var: str, path: Path | str) -> None:
    parts = [p for p in env.get(var, "").split(os.pathsep) if p and p != str(path)]
    env[var] = os.pathsep.join([str(path), *parts])


def server_env(binary: Path, extra: Mapping[str, str] | None = None,
               python: PythonEnv | None = None) -> dict[str, str]:
    """The environment for tritonserver: the stubs' Python (default: this one) first on PATH, its libpython and
    the wheel's libs on the loader path."""
    python = python or PythonEnv.current()
    env = dict(os.environ)
    env.update(extra or {})
    _prepend(env, "PATH", python.bin)
    root = wheel_root(binary)
    if root is not None:
        libs = root.parent.parent / "nvidia_pytriton.libs"
        if libs.is_dir():
            _prepend(env, "LD_LIBRARY_PATH", libs)
        # The stub links libpython3.X by soname: give it the environment's interpreter's, not the system's
        # (an older patch release lacks symbols that the environment's extension modules need).
        if python.libpython_dir is not None:
            _prepend(env, "LD_LIBRARY_PATH", python.libpython_dir)
    return env
