"""A model's spec from the generator's inputs (a sample's defaults under the given values), and writing it.

A library, standard library only and Python 3.8: the seed's command (:mod:`repo_gen.command`, also
exported as ``generate_llm_model_repo.py``) and the consoles' generator forms all use it.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from backend_model.contract import adapters as lora
from backend_model.contract import compile_config, cpu_support, devices
from backend_model.contract.errors import SessionError
from backend_model.contract.qpc import find_qpc, model_type_of

from . import memory
from .samples import SAMPLES
from .writer import FolderExists, ModelSpec, RepoError, check_backend_dir, check_name, write_model

Note = Callable[[str], None]
CUSTOM_NEEDS = ("a custom model needs --aic_binary_dir <path/to/qpc> or --hf_model_name <org/model> "
                "(--hf_model_name embedded: the embedded SmolLM2)")


def _quiet(_: str) -> None:
    pass


def read_compile_config(path: Path) -> dict[str, Any]:
    """The keys a compile_config.json gives (a small regular file: a device or a FIFO is refused at once),
    validated; copied as given but for a relative onnx_path, which is taken relative to the file and written
    absolute."""
    raw = compile_config.read(path)
    compile_config.validate(raw, str(path))  # errors name the file and the key
    if raw.get("onnx_path"):
        raw["onnx_path"] = str((path.parent / Path(raw["onnx_path"]).expanduser()).resolve())
    return raw


def qpc_dir(aic_binary_dir: Path | None) -> str:
    """The QPC folder as an absolute path (the server may run elsewhere), or ''."""
    if aic_binary_dir is None:
        return ""
    try:
        find_qpc(aic_binary_dir)
    except SessionError as exc:
        raise RepoError(f"--aic_binary_dir: {exc}") from None
    return str(aic_binary_dir.expanduser().resolve())


def sample_like(name: str) -> str | None:
    """The sample ``name`` looks like a typo of (case and '-' for '_' aside), or None."""
    names = {sample.lower(): sample for sample in SAMPLES}
    close = difflib.get_close_matches(name.lower().replace("-", "_"), list(names), n=1, cutoff=0.8)
    return names[close[0]] if close else None


def check_custom(model_name: str, source: str, note: Note = _quiet) -> None:
    """A name that is not a sample's needs something to load (``source``: a QPC, a Hugging Face model, an ONNX
    graph), else RepoError; a name close to a sample's is said either way."""
    like = sample_like(model_name)
    if not source:
        guess = f"did you mean {like}?" if like else "the samples are in --help"
        raise RepoError(f"{model_name} is not a sample ({guess}): {CUSTOM_NEEDS}")
    if like:
        note(f"note: {model_name} is not a sample (did you mean {like}?): writing a custom model")


def resolve_spec(
    model_name: str,
    *,
    aic_binary_dir: Path | None = None,
    compile_config_path: Path | None = None,
    hf_model_name: str | None = None,
    model_type: str | None = None,
    decoupled: bool | None = None,
    engine: str | None = None,
    precision: str | None = None,
    cpu_threads: int | None = None,
    device_groups: str | None = None,
    lora_adapters: Sequence[str] = (),
    max_loras: int | None = None,
    note: Note = _quiet,
) -> ModelSpec:
    """Flags over a sample's defaults (or the template's); the model type may come from the QPC
    (``note`` hears what takes long and what was found)."""
    check_name(model_name)
    base = SAMPLES.get(model_name, ModelSpec(model_name))
    qpc = qpc_dir(aic_binary_dir)
    compiled = read_compile_config(compile_config_path) if compile_config_path else dict(base.compile)
    if model_name not in SAMPLES:
        check_custom(model_name, qpc or hf_model_name or compiled.get("onnx_path") or "", note)
    if model_type is None and qpc and model_name not in SAMPLES:
        model_type = model_type_of(qpc, note)
        note(f"model type: {model_type}")
    return dataclasses.replace(
        base,
        model_type=model_type or base.model_type,
        decoupled=base.decoupled if decoupled is None else decoupled,
        aic_binary_dir=qpc or base.aic_binary_dir,
        hf_model_name=hf_model_name or base.hf_model_name,
        compile=compiled,
        engine=engine or base.engine,
        precision=precision or base.precision,
        cpu_threads=base.cpu_threads if cpu_threads is None else cpu_threads,
        device_groups=_groups(device_groups) if device_groups is not None else base.device_groups,
        adapters=_adapter_folders(lora_adapters) if lora_adapters else base.adapters,
        max_loras=base.max_loras if max_loras is None else max_loras,
    )


def _adapter_folders(entries: Sequence[str]) -> dict[str, str]:
    """``--lora NAME=PATH`` entries as {name: absolute folder}, in order; RepoError naming a bad one."""
    folders: dict[str, str] = {}
    for entry in entries:
        name, sep, path = entry.partition("=")
        try:
            lora.check_name(name)
        except lora.AdapterError as exc:
            raise RepoError(f"--lora {entry}: {exc}") from None
        if not sep or not path:
            raise RepoError(f"--lora {entry}: give NAME=PATH (PATH: a PEFT adapter folder)")
        if name in folders:
            raise RepoError(f"--lora {name} is given twice: adapter names are unique")
        folders[name] = str(Path(path).expanduser().resolve())
    return folders


def check_lora(spec: ModelSpec) -> None:
    """Each adapter against the base model before anything is written: a LoRA adapter this project serves, of the
    base model (its name, and its sizes when the base's config.json is here), all of one rank and target modules
    (QEfficient's finite LoRAX). RepoError naming the adapter."""
    base = local_config(spec.hf_model_name)
    configs = {}
    for name, folder in spec.adapters.items():
        try:
            config = lora.read_config(Path(folder))
            lora.check_weights(Path(folder), config, base)
        except lora.AdapterError as exc:
            raise RepoError(f"--lora {name}: {exc}") from None
        if not lora.same_base(config.base, spec.hf_model_name):
            raise RepoError(f"--lora {name}: trained on {config.base}, not on {spec.hf_model_name or 'embedded'} "
                            "(its adapter_config.json's base_model_name_or_path)")
        configs[name] = config
    try:
        lora.check_alike(configs)
    except lora.AdapterError as exc:
        raise RepoError(f"--lora: {exc}") from None


def _groups(text: str) -> str:
    """--device-groups as written into the model ('' when none); RepoError naming what is wrong."""
    try:
        return devices.format_groups(devices.parse_groups(text))
    except devices.DeviceError as exc:
        raise RepoError(f"--device-groups: {exc}") from None


def check_groups(spec: ModelSpec, note: Note, listed: tuple[list[devices.Device], str] | None = None) -> None:
    """The device groups against the QPC's num_devices and the SoCs qaic-util lists (``listed``: default, read
    now): RepoError when they cannot serve, the warnings said."""
    if not spec.device_groups:
        return
    try:
        sized = devices.compiled_devices(spec.aic_binary_dir, compile_config.validate(spec.compile))
        for line in devices.review(devices.parse_groups(spec.device_groups), sized, listed or devices.query()):
            note(line)
    except devices.DeviceError as exc:
        raise RepoError(f"--device-groups: {exc}") from None


def local_config(hf_model_name: str) -> dict[str, Any] | None:
    """The model's ``config.json`` when it is on this machine (a folder, or the Hugging Face cache), else None."""
    if not hf_model_name or hf_model_name == "embedded":
        return None
    folder = Path(hf_model_name).expanduser()
    found = [folder / "config.json"]
    if "/" in hf_model_name and not folder.exists():  # a hub name: the snapshots the hub cache holds
        hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
            os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub")
        found = sorted(Path(hub, "models--" + hf_model_name.replace("/", "--"), "snapshots").glob("*/config.json"))
    for path in found:
        try:
            config = json.loads(compile_config.read_small(path))  # a small regular file: never a FIFO's wait
        except (OSError, ValueError):
            continue
        if isinstance(config, dict):
            return config
    return None


def cpu_refusal(hf_model_name: str, model_type: str, precision: str, compiled: dict[str, Any]) -> str | None:
    """Why the CPU engine would refuse the model (the backend's rule, on its config.json when it is at hand)."""
    config = local_config(hf_model_name)
    if config is None:
        return None
    ctx_len = compile_config.validate(compiled)["ctx_len"]
    try:
        cpu_support.session_for(config, model_type == "kv_cache", precision, ctx_len)
    except SessionError as exc:
        return str(exc)
    return None


def _check_cpu(spec: ModelSpec, note: Note) -> None:
    """engine=cpu: refuse a model the CPU engine would refuse; auto without a QPC: warn (a card may serve it)."""
    if spec.engine not in ("cpu", "auto") or spec.aic_binary_dir:
        return
    refusal = cpu_refusal(spec.hf_model_name, spec.model_type, spec.precision, spec.compile)
    if refusal and spec.engine == "cpu":
        raise RepoError(f"the CPU engine would refuse {spec.hf_model_name}: {refusal}")
    if refusal:
        note(f"warning: without a QAIC card (engine auto runs the CPU then) this model is refused: {refusal}")


def generate(model_name: str, output_dir: Path, *, python_backend_dir: Path | None = None, force: bool = False,
             note: Note = _quiet, **fields: Any) -> tuple[ModelSpec, Path]:
    """Write ``<output_dir>/<model_name>/`` from :func:`resolve_spec` (``fields``: its keywords); (spec, folder).

    Checked before anything slow (a QPC load may take minutes): the name, an existing folder (unless
    ``force``), the backend folder; then whether the CPU engine serves the model's config (engine cpu:
    refused; auto without a QPC: a warning), and the memory the compile config asks (:mod:`.memory`: refused
    when it cannot fit, said when it is tight). RepoError / CompileConfigError / SessionError on bad input.
    """
    check_name(model_name)
    if (output_dir / model_name).exists() and not force:
        raise FolderExists(output_dir / model_name)
    if python_backend_dir is not None:
        check_backend_dir(python_backend_dir)
    spec = resolve_spec(model_name, note=note, **fields)
    check_groups(spec, note)
    _check_cpu(spec, note)
    check_lora(spec)
    memory.check(spec, note, local_config(spec.hf_model_name))
    return spec, write_model(spec, output_dir, python_backend_dir=python_backend_dir, force=force, progress=note)
