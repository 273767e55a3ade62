"""Triton entry point of a qaic-console embedding model: the bundled backend sits beside this file.

The model folder is self-contained: ``backend_model/`` here is a copy of the backend, so it runs
in Qualcomm's Triton container (with /opt/qeff-env active) without qaic-console installed.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from backend_model.embedding.triton_model import TritonPythonModel  # noqa: E402

__all__ = ["TritonPythonModel"]
