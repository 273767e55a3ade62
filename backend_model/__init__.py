"""The bundled QAIC Python backend for Triton: its entry, ``triton_model``, and the rooms behind it.

``triton_model`` (what every model's ``model.py`` imports) reads requests through ``triton/``, builds the engine
(``build``: weights and tokenizers from ``models``) and serves it: ``engine/`` runs the generation loop on one of
``sessions/`` (the card, the CPU) or on ``twin/`` (the card's ONNX Runtime twin). ``contract/`` is what the backend and
the generator share. This package is copied into every generated model's ``1/`` directory, so it depends only on
numpy, torch/transformers (CPU path) or QEfficient (QAIC path) — never on ``console``.
"""

from __future__ import annotations

import os

SHARED = "contract"  # the sub-package the generator shares: standard library only, Python 3.8


def shared_files() -> tuple[str, ...]:
    """The files the release artifacts' generator ships beside it, relative to this folder: this one and
    ``contract/``'s (``repo_gen.artifacts`` copies them; ``tests/fast/test_py38.py`` imports them under Python 3.8)."""
    names = sorted(name for name in os.listdir(os.path.join(os.path.dirname(__file__), SHARED)) if name.endswith(".py"))
    return ("__init__.py", *(f"{SHARED}/{name}" for name in names))
