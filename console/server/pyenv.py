"""The Python environment the backend stubs run: this interpreter's, or another one (``serve --python-env``).

Triton's Python backend stub embeds the Python it was built for (the nvidia-pytriton wheel ships one stub per
X.Y) and takes its environment (``sys.prefix``, site-packages) from the first ``python3`` on ``PATH``. So another
environment needs the stub of its own Python version, its ``bin/`` first on ``PATH`` and its ``libpython`` on
the loader path. What the stub needs of an environment is read once, by running its interpreter isolated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .errors import ServerError

# Runs in the other environment's interpreter (Python 3.8 or newer): its version, libpython's folder, numpy's version.
_PROBE = """\
import json, sys, sysconfig
from importlib import metadata
try:
    numpy = metadata.version("numpy")
except metadata.PackageNotFoundError:
    numpy = ""
print(json.dumps({"version": "%d.%d" % sys.version_info[:2], "libdir": sysconfig.get_config_var("LIBDIR") or "",
                  "numpy": numpy}))
"""


def _numpy_version() -> str:
    try:
        return metadata.version("numpy")
    except metadata.PackageNotFoundError:
        return ""


@dataclass(frozen=True)
class PythonEnv:
    """An environment for the stubs: ``bin`` goes first on PATH, ``libdir`` holds ``libpython<version>``."""

    bin: Path
    version: str  # "3.11"
    libdir: str
    numpy: str = ""  # numpy's version there, "" when it has none

    @classmethod
    def current(cls) -> PythonEnv:
        """The console's own interpreter."""
        return cls(Path(sys.executable).parent, f"{sys.version_info.major}.{sys.version_info.minor}",
                   sysconfig.get_config_var("LIBDIR") or "", _numpy_version())

    @classmethod
    def at(cls, folder: str | os.PathLike[str]) -> PythonEnv:
        """The virtual or conda environment in ``folder``; ServerError saying why when it is not one."""
        root = Path(folder).expanduser().absolute()
        python = root / "bin" / "python3"
        if not (python.is_file() and os.access(python, os.X_OK)):
            raise ServerError(f"python env {root}: no bin/python3 there (give the folder of a virtual or conda "
                              "environment)")
        try:
            done = subprocess.run([str(python), "-I", "-c", _PROBE], capture_output=True, text=True, timeout=60)
            found = json.loads(done.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
            raise ServerError(f"python env {root}: its python3 does not run: {exc}") from None
        return cls(root / "bin", found["version"], found["libdir"], found["numpy"])

    def describe(self) -> str:
        """``the Python of <environment folder>``."""
        return f"the Python of {self.bin.parent}"

    @property
    def numpy_too_new(self) -> bool:
        """numpy 2 or newer: the nvidia-pytriton wheel's stub (built for numpy 1) breaks on string tensors."""
        major = self.numpy.split(".")[0]
        return major.isdigit() and int(major) >= 2

    @property
    def libpython_dir(self) -> Path | None:
        """The folder holding this Python's shared ``libpython``, when it has one."""
        libdir = Path(self.libdir) if self.libdir else None
        return libdir if libdir and any(libdir.glob(f"libpython{self.version}*.so*")) else None
