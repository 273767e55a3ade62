"""Render and write one model folder: config.pbtxt, compile_config.json and 1/ with the backend.

An ``engine=onnx`` model without an ``onnx_path`` also gets its graph, exported into ``onnx/``
(``onnx_path`` then names it relative to the model folder). Everything is written into a
temporary folder beside the target and renamed into place, so a failure never leaves a
half-written model.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from backend_model import compile_config, specializations
from backend_model.build import ENGINES
from backend_model.models import Progress

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "assets"
BACKEND_SRC = ROOT / "backend_model"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MODEL_TYPES = ("kv_cache", "causal")
ONNX_DIR = "onnx"  # where an engine=onnx model's exported graph goes, inside the model folder
PRECISIONS = ("fp32", "bf16", "int8", "int4")  # the CPU engine's (backend_model.cpu_session.DTYPES)


class RepoError(ValueError):
    """A model folder that cannot be written; nothing was written."""


@dataclass
class ModelSpec:
    """What the generator needs to know about one model."""

    model_name: str
    model_type: str = "kv_cache"
    decoupled: bool = False
    aic_binary_dir: str = ""
    hf_model_name: str = ""
    compile: dict[str, Any] = field(default_factory=dict)  # only the keys that were given
    engine: str = "auto"
    precision: str = "fp32"
    cpu_threads: int = 0  # 0: torch's default

    def parameters(self) -> dict[str, str]:
        return {
            "use_kv_cache": "true" if self.model_type == "kv_cache" else "false",
            "engine": self.engine,
            "aic_binary_dir": self.aic_binary_dir,
            "hf_model_name": self.hf_model_name,
            "precision": self.precision,
            "cpu_threads": str(self.cpu_threads),
        }


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name or "") or ".." in name:
        raise RepoError(
            f"unsafe model name {name!r}: use letters, digits, '_', '-' and '.', starting with a letter "
            "or digit (no path separators, no '..')"
        )
    return name


def check_spec(spec: ModelSpec) -> None:
    """RepoError / CompileConfigError naming the first bad field of ``spec``."""
    check_name(spec.model_name)
    for flag, value, allowed in (
        ("--model_type", spec.model_type, MODEL_TYPES),
        ("--engine", spec.engine, ENGINES),
        ("--precision", spec.precision, PRECISIONS),
    ):
        if value not in allowed:
            raise RepoError(f"{flag} must be one of {', '.join(allowed)}, got {value!r}")
    if spec.aic_binary_dir and not Path(spec.aic_binary_dir).expanduser().is_dir():
        raise RepoError(f"--aic_binary_dir {spec.aic_binary_dir} is not a directory")
    compiled = compile_config.validate(spec.compile, "compile config")
    if spec.engine == "onnx":
        if spec.model_type != "kv_cache":
            raise RepoError("--engine onnx runs a KV-cache graph: use --model_type kv_cache")
        graph = compiled["onnx_path"]
        if graph and not Path(graph).expanduser().is_absolute():
            raise RepoError(f"onnx_path {graph} must be absolute in the compile config given to the generator")
        if graph and not Path(graph).exists():
            raise RepoError(f"onnx_path {graph} does not exist")


def render_config(spec: ModelSpec) -> str:
    decoupled = "model_transaction_policy { decoupled: true }" if spec.decoupled else ""
    params = "\n".join(
        f'parameters: {{ key: "{k}" value: {{ string_value: {json.dumps(v)} }} }}'
        for k, v in spec.parameters().items()
    )
    template = Template((ASSETS / "config.pbtxt.tmpl").read_text())
    return template.substitute(name=spec.model_name, decoupled_block=decoupled, parameters=params)


def check_backend_dir(python_backend_dir: str | Path) -> Path:
    """The seed's --python_backend_dir: a backend folder holding model.py."""
    src = Path(python_backend_dir).expanduser()
    if not (src / "model.py").is_file():
        raise RepoError(f"--python_backend_dir {src} has no model.py")
    return src


def _copy_backend(version_dir: Path, python_backend_dir: str | None) -> None:
    if python_backend_dir:
        src = check_backend_dir(python_backend_dir)
        shutil.copytree(src, version_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        return
    version_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ASSETS / "model.py", version_dir / "model.py")
    shutil.copytree(BACKEND_SRC, version_dir / "backend_model", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def write_model(spec: ModelSpec, out_dir: str | Path, python_backend_dir: str | None = None,
                force: bool = False, progress: Progress = lambda message: None) -> Path:
    """Write ``out_dir/<model_name>/`` atomically and return it (``progress``: the export's steps)."""
    check_spec(spec)
    out = Path(out_dir)
    target = out / spec.model_name
    if target.exists() and not force:
        raise RepoError(f"{target} already exists (use --force to replace it)")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.model_name}.", dir=out))  # private (0700) holder
    staged, old = tmp / "model", tmp / "old"  # staged by mkdir: the umask's permissions, kept by the rename
    try:
        staged.mkdir()
        _fill(staged, spec, python_backend_dir, progress)
        if target.exists():
            os.replace(target, old)
        os.replace(staged, target)
    except BaseException:
        if old.exists() and not target.exists():  # put the replaced model back
            os.replace(old, target)
        shutil.rmtree(tmp, ignore_errors=True)
        if created:  # leave no empty output folder behind either
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _fill(folder: Path, spec: ModelSpec, python_backend_dir: str | None, progress: Progress) -> None:
    """Write the model folder's contents into ``folder``."""
    compiled = dict(spec.compile)
    if spec.engine == "onnx" and not compiled.get("onnx_path"):
        compiled["onnx_path"] = _export_graph(folder, spec, progress)
    elif spec.engine == "onnx":
        compiled = _with_graph_dims(compiled)
    (folder / "config.pbtxt").write_text(render_config(spec))
    (folder / "compile_config.json").write_text(json.dumps(compiled, indent=2) + "\n")
    _copy_backend(folder / "1", python_backend_dir)


def _with_graph_dims(compiled: dict[str, Any]) -> dict[str, Any]:
    """A named graph's specializations.json is its compile: its dimensions go into compile_config.json
    (so ``repo list`` shows them); a compile config that says otherwise is refused."""
    beside = Path(compiled["onnx_path"]).expanduser().parent / specializations.FILE
    if not beside.is_file():
        return compiled  # the backend compiles the graph for the compile config's dimensions
    try:
        dims = specializations.compile_dims(specializations.read(beside))
    except ValueError as exc:
        raise RepoError(str(exc)) from None
    expected = {"full_batch_size": None, **dims}  # a regular graph has no full_batch_size
    for key, value in expected.items():
        if compiled.get(key, value) != value:
            raise RepoError(f"compile config {key} {compiled[key]} differs from {beside}: {value}")
    return {**compiled, **dims}


def _export_graph(folder: Path, spec: ModelSpec, progress: Progress) -> str:
    """Export the model's QEfficient-style graph for its compile dimensions; its path in the folder."""
    from .onnx_export import export

    c = compile_config.validate(spec.compile)
    done = export(spec.hf_model_name or "embedded", folder / ONNX_DIR, ctx_len=c["ctx_len"],
                  prefill_seq_len=c["prefill_seq_len"], batch_size=c["batch_size"],
                  full_batch_size=c["full_batch_size"] or 0, progress=progress)
    return f"{ONNX_DIR}/{done.graph.name}"
