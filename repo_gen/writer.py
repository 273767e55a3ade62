"""Render and write one model folder: config.pbtxt, compile_config.json and 1/ with the backend.

Everything is written into a hidden holder beside the target and renamed into place
(:mod:`.staging`), so a failure never leaves a half-written model, and a killed write leaves nothing the
next write does not sweep. An ``engine=onnx`` model without an ``onnx_path`` also
gets its graph, exported into ``onnx/`` (``onnx_path`` then names it relative to the model folder).
Standard library only, and Python 3.8 (the export, which needs torch, is imported only when used):
the release artifacts' ``generate_llm_model_repo.py`` runs this module under a bare ``python``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any, Callable

from backend_model.contract import adapters as lora
from backend_model.contract import compile_config, devices, specializations
from backend_model.contract.controls import CONTROLS
from backend_model.contract.errors import SessionError
from backend_model.contract.parameters import ENGINES, PRECISIONS

from . import staging

TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAME = "config.pbtxt.tmpl"
ENTRY_NAME = "model.py"
BACKEND_PACKAGE = "backend_model"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MODEL_TYPES = ("kv_cache", "causal")
SKIPPED = ("__pycache__", "*.pyc")
CONFIG_TYPES = {"BYTES": "TYPE_STRING"}  # a Triton datatype as config.pbtxt names it (else TYPE_<datatype>)

__all__ = [
    "ENGINES", "MODEL_TYPES", "PRECISIONS", "Backend", "ModelSpec", "RepoError", "bundled_backend_package",
    "check_backend_dir", "check_name", "check_spec", "declared_io", "render_config", "write_model",
]
ONNX_DIR = "onnx"  # where an engine=onnx model's exported graph goes, inside the model folder
Progress = Callable[[str], None]  # typing.Callable: evaluated at run time, so 3.8-safe


class RepoError(ValueError):
    """A model folder that cannot be written; nothing was written."""


class FolderExists(RepoError):
    """The model folder ``path`` is there and replacing it was not asked (the message names the command line's
    ``--force``; a form names its own control)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} already exists (use --force to replace it)")
        self.path = path


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
    cpu_threads: int = 0  # 0: automatic (backend_model.sessions.threads)
    device_groups: str = ""  # "0,1;2,3": one model instance per group, each opening its SoCs
    adapters: dict[str, str] = field(default_factory=dict)  # LoRA adapters' source folders by name, in order
    max_loras: int = 0  # adapters one batch mixes (0: all of them)

    @property
    def instances(self) -> int:
        """Model instances: one per device group, else one."""
        return len(devices.parse_groups(self.device_groups)) or 1

    def parameters(self) -> dict[str, str]:
        groups = {devices.PARAMETER: self.device_groups} if self.device_groups else {}
        loras = {lora.PARAMETER: json.dumps({name: f"{lora.FOLDER}/{name}" for name in self.adapters}),
                 lora.MAX_PARAMETER: str(self.max_loras or len(self.adapters))} if self.adapters else {}
        return {
            **groups,
            **loras,
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
    if spec.adapters and (spec.engine == "onnx" or spec.model_type != "kv_cache"):
        raise RepoError("--lora: LoRA adapters are served by a KV-cache model on the CPU or a card (not by --engine "
                        "onnx or a causal model)")
    if not 0 <= spec.max_loras <= len(spec.adapters):
        raise RepoError(f"--max-loras must be from 1 to the adapters given ({len(spec.adapters)}), got "
                        f"{spec.max_loras}")
    if spec.aic_binary_dir and not Path(spec.aic_binary_dir).expanduser().is_dir():
        raise RepoError(f"--aic_binary_dir {spec.aic_binary_dir} is not a directory")
    compiled = compile_config.validate(spec.compile, "compile config")
    if spec.engine == "onnx":
        if spec.model_type != "kv_cache":
            raise RepoError("--engine onnx runs a KV-cache graph: use --model_type kv_cache")
        graph = compiled["onnx_path"]
        if graph and not Path(graph).expanduser().is_absolute():
            raise RepoError(f"onnx_path {graph} must be absolute in the compile config given to the generator")
        if graph:
            try:
                specializations.find_graph(graph)
            except SessionError as exc:
                raise RepoError(f"onnx_path: {exc}") from None


def control_inputs() -> str:
    """The config's input entries of the controls (``backend_model.contract.controls``), a line each, with a comma."""
    return "\n".join(
        f'  {{ name: "{c.name}" data_type: {CONFIG_TYPES.get(c.datatype, "TYPE_" + c.datatype)} '
        f'dims: [ {", ".join(map(str, c.dims))} ] optional: true }},'
        for c in CONTROLS
    )


def render_config(spec: ModelSpec, template: Path | None = None) -> str:
    """config.pbtxt from ``template`` (default: the bundled backend's) with the spec's values."""
    decoupled = "model_transaction_policy { decoupled: true }" if spec.decoupled else ""
    params = "\n".join(
        f'parameters: {{ key: "{k}" value: {{ string_value: {json.dumps(v)} }} }}'
        for k, v in spec.parameters().items()
    )
    text = (template or TEMPLATES / TEMPLATE_NAME).read_text(encoding="utf-8")
    try:
        return Template(text).substitute(name=spec.model_name, decoupled_block=decoupled, parameters=params,
                                         control_inputs=control_inputs(), instances=spec.instances)
    except (KeyError, ValueError) as exc:
        raise RepoError(f"config template {template}: cannot fill it in ({exc!r}); it may use $name, "
                        "$decoupled_block, $control_inputs, $instances and $parameters") from None


def _block(text: str, keyword: str) -> str:
    """The text inside ``keyword [ ... ]`` of a config (brackets matched), or ''."""
    match = re.search(rf"(?m)^\s*{keyword}\s*\[", text)
    if match is None:
        return ""
    depth, start = 1, match.end()
    for i in range(start, len(text)):
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    return text[start:]


def declared_io(config_text: str) -> tuple[list[str], list[str]]:
    """(input names, output names) a config.pbtxt (or its template) declares."""
    names = re.compile(r'\bname\s*:\s*"([^"]*)"')
    return names.findall(_block(config_text, "input")), names.findall(_block(config_text, "output"))


def bundled_backend_package() -> Path:
    """The bundled backend's package folder (``backend_model/``) in this installation."""
    return Path(compile_config.__file__).resolve().parents[1]


@dataclass(frozen=True)
class Backend:
    """What a model's ``1/`` folder gets: the bundled backend, or a ``--python_backend_dir`` folder."""

    folder: Path | None = None  # None: the bundled backend of this installation

    @property
    def ours(self) -> bool:
        """This project's backend: the bundled one, or a folder holding a copy of it (the exported one)."""
        folder = self.folder
        return folder is None or (folder / BACKEND_PACKAGE / "triton_model.py").is_file()

    @property
    def template(self) -> Path:
        """The folder's own config template when it has one, else the bundled backend's."""
        own = self.folder / TEMPLATE_NAME if self.folder is not None else None
        return own if own is not None and own.is_file() else TEMPLATES / TEMPLATE_NAME

    def copy_into(self, version_dir: Path) -> None:
        """Fill ``version_dir`` (``<model>/1``) with the backend."""
        ignore = shutil.ignore_patterns(*SKIPPED, TEMPLATE_NAME)
        if self.folder is not None:  # as the seed does: the folder's contents, as they are
            shutil.copytree(self.folder, version_dir, dirs_exist_ok=True, ignore=ignore)
            return
        package = bundled_backend_package()
        if not (package / "triton_model.py").is_file():  # the generator's own copy holds only what it shares
            raise RepoError(f"the bundled backend is not installed beside this generator ({package} holds only "
                            "the generator's modules): pass --python_backend_dir")
        version_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(TEMPLATES / ENTRY_NAME, version_dir / ENTRY_NAME)
        shutil.copytree(package, version_dir / BACKEND_PACKAGE, ignore=ignore)

    def note(self) -> str | None:
        """For a backend that is not this project's: which interface the written config.pbtxt declares."""
        if self.ours:
            return None
        inputs, outputs = declared_io(Template(self.template.read_text(encoding="utf-8")).safe_substitute(
            control_inputs=control_inputs()))
        source = (f"its own {TEMPLATE_NAME}" if self.template.parent == self.folder
                  else f"qaic-console's template (the folder has no {TEMPLATE_NAME})")
        return (f"note: {self.folder} is not qaic-console's backend: copied into 1/ as it is; the written "
                f"config.pbtxt comes from {source} and declares inputs {', '.join(inputs) or 'none'} -> outputs "
                f"{', '.join(outputs) or 'none'}: check that this backend reads those names")


def check_backend_dir(python_backend_dir: str | Path) -> Path:
    """The seed's --python_backend_dir: a backend folder holding model.py."""
    src = Path(python_backend_dir).expanduser()
    if not (src / ENTRY_NAME).is_file():
        raise RepoError(f"--python_backend_dir {src} has no {ENTRY_NAME}")
    return src


def write_model(spec: ModelSpec, out_dir: str | Path, python_backend_dir: str | Path | None = None,
                force: bool = False, progress: Progress = lambda message: None) -> Path:
    """Write ``out_dir/<model_name>/`` atomically and return it (``python_backend_dir`` None: the bundled
    backend; ``progress``: an ONNX export's steps, and what a sweep of killed writes did)."""
    check_spec(spec)
    backend = Backend(check_backend_dir(python_backend_dir) if python_backend_dir else None)
    out = Path(out_dir)
    staging.sweep(out, progress)  # first: it may put back the model a killed --force moved aside
    target = out / spec.model_name
    if target.exists() and not force:
        raise FolderExists(target)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    tmp = staging.holder(out, spec.model_name)  # private (0700)
    staged, old = tmp / staging.STAGED, tmp / staging.OLD  # staged by mkdir: the umask's permissions, renamed
    try:
        staged.mkdir()
        (staged / "config.pbtxt").write_text(render_config(spec, backend.template), encoding="utf-8")
        compiled = _compiled(staged, spec, progress)
        (staged / "compile_config.json").write_text(json.dumps(compiled, indent=2) + "\n", encoding="utf-8")
        backend.copy_into(staged / "1")
        for name, source in spec.adapters.items():  # the files PEFT wrote; the checks read them (spec.check_lora)
            (staged / lora.FOLDER / name).mkdir(parents=True)
            for file in (lora.CONFIG_FILE, lora.WEIGHTS_FILE):
                shutil.copy2(Path(source) / file, staged / lora.FOLDER / name / file)
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


def _compiled(folder: Path, spec: ModelSpec, progress: Progress) -> dict[str, Any]:
    """The compile config to write: an engine=onnx model's graph (exported into ``folder`` unless named)."""
    compiled = dict(spec.compile)
    if spec.adapters:  # what QEfficient compiles in, in lora_ids order
        compiled["lora_adapters"] = list(spec.adapters)
    if spec.engine == "onnx" and not compiled.get("onnx_path"):
        compiled["onnx_path"] = _export_graph(folder, spec, progress)
    elif spec.engine == "onnx":
        compiled = _with_graph_dims(compiled)
    return compiled


def _with_graph_dims(compiled: dict[str, Any]) -> dict[str, Any]:
    """A named graph's specializations.json is its compile: its dimensions go into compile_config.json
    (so ``repo list`` shows them); a compile config that says otherwise is refused."""
    beside = specializations.beside(specializations.find_graph(compiled["onnx_path"]))
    if beside is None:
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
