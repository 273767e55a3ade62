"""The optional parts of qaic-console: which extra installs each, and the one line a command says when its part is
missing (docs/install.md lists them; pyproject.toml's ``[project.optional-dependencies]`` holds the pins).

The base install talks to running servers (headless, ``tui``, ``models``, ``metrics``, ``bench``); the rest is
imported by the commands that run it, when they run it, so a missing extra surfaces as a ModuleNotFoundError
that :func:`missing` turns into ``... pip install 'qaic-console[EXTRA]'``.
"""

from __future__ import annotations

# extra -> (what it adds, the top-level modules it brings)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "web": ("the web console and its server control", ("gradio",)),
    "front": ("the OpenAI-compatible front", ("fastapi", "uvicorn", "starlette", "PIL")),
    "serve": ("serving models (tritonserver and the CPU engine)",
              ("torch", "pytriton", "gguf", "accelerate", "llguidance")),
    "twin": ("the card's ONNX twin", ("onnx", "onnxruntime")),
    "bench": ("the bench's plots", ("matplotlib",)),
}


def install_line(extra: str) -> str:
    """The command that adds ``extra`` to an installed qaic-console."""
    return f"pip install 'qaic-console[{extra}]'"


def extra_of(module: str) -> str | None:
    """The extra that brings ``module`` (a dotted name), or None when no extra does."""
    top = module.partition(".")[0]
    return next((extra for extra, (_, modules) in EXTRAS.items() if top in modules), None)


def needs(extra: str, module: str) -> str:
    """The line that says ``module`` is missing and how to add it."""
    return f"{module.partition('.')[0]} is not installed ({EXTRAS[extra][0]} need it): {install_line(extra)}"


def missing(exc: ModuleNotFoundError) -> str | None:
    """The one line for a missing module an extra brings, or None (a module of no extra: a real error)."""
    extra = extra_of(exc.name or "")
    return needs(extra, exc.name or "") if extra else None
