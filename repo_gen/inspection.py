"""Look at what a generated repository holds: its model folders, their settings and what is wrong with them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from backend_model.contract import compile_config, devices, embedding_config, specializations
from backend_model.contract.errors import SessionError
from backend_model.contract.parameters import BOOLEANS, ENGINES, IMAGE_TEXT_TO_TEXT, PRECISIONS, TRUE

from .spec import cpu_refusal
from .staging import model_names
from .writer import RepoError

# --------------------------------------------------------------------------- listing a repository


@dataclass
class ModelFolder:
    """One model folder as ``repo list`` reports it."""

    name: str
    path: str
    model_type: str = "?"
    decoupled: bool | None = None
    modes: str = "?"  # how it answers, as the consoles say it: stream (decoupled), batch, or stream+batch
    source: str = "?"
    engine: str = ""
    precision: str = ""
    compile: dict[str, Any] | None = None
    device_groups: str = ""  # "0,1;2,3": one instance per group
    instances: int = 1  # instance_group's count
    problems: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

    def compile_summary(self) -> str:
        c = self.compile
        if c is None:
            return "?"
        if self.model_type == embedding_config.TASK:
            return f"seq_len={','.join(map(str, c['seq_len']))} bs={c['batch_size']}"
        rows = f"fbs={c['full_batch_size']}" if c["full_batch_size"] else f"bs={c['batch_size']}"
        return f"ctx={c['ctx_len']} prefill={c['prefill_seq_len']} {rows}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "valid": self.valid}


def list_models(repo: str | Path) -> list[ModelFolder]:
    """Every model folder of ``repo`` (hidden folders, e.g. a killed write's, are not models: see
    :func:`~.staging.leftovers`)."""
    root = Path(repo)
    if not root.is_dir():
        raise RepoError(f"no model repository at {root}")
    return [inspect_model(root / name) for name in model_names(root)]


def inspect_model(folder: Path) -> ModelFolder:
    """Read one model folder; ``problems`` says what would keep it from loading."""
    info = ModelFolder(folder.name, str(folder))
    _read_config(folder, info)
    _read_compile(folder, info)
    info.problems += _group_problems(info)
    if info.engine == "onnx":
        info.problems += _onnx_problems(folder, info)
    decoder = info.model_type != embedding_config.TASK  # the CPU's rule is a decoder's
    if decoder and info.engine == "cpu" and info.source.startswith("hf ") and info.compile is not None:
        refusal = cpu_refusal(info.source[3:], info.model_type, info.precision, info.compile)
        if refusal:
            info.problems.append(f"the CPU engine refuses it: {refusal}")
    if not (folder / "1" / "model.py").is_file():
        info.problems.append("no 1/model.py")
    return info


def _read_config(folder: Path, info: ModelFolder) -> None:
    path = folder / "config.pbtxt"
    if not path.is_file():
        info.problems.append("no config.pbtxt")
        return
    try:
        config = _parse_pbtxt(path.read_text(encoding="utf-8"))
    except Exception as exc:  # text_format.ParseError or an unreadable file
        info.problems.append(f"config.pbtxt does not parse: {' '.join(str(exc).split())}")
        return
    params = {k: v.string_value for k, v in config.parameters.items()}
    info.decoupled = config.model_transaction_policy.decoupled
    switch = any(i.name == "stream" and i.data_type == _model_config_pb2().TYPE_BOOL for i in config.input)
    info.modes = ("stream+batch" if switch else "stream") if info.decoupled else "batch"
    info.engine = params.get("engine", "auto") or "auto"
    info.precision = params.get("precision", "fp32") or "fp32"
    info.source = _source(params)
    info.device_groups = params.get(devices.PARAMETER, "").strip()
    info.instances = sum(group.count or 1 for group in config.instance_group) or 1
    kv = params.get("use_kv_cache", "").strip().lower()
    if params.get("task") == embedding_config.TASK:
        info.model_type = embedding_config.TASK
    elif kv in BOOLEANS:
        info.model_type = "kv_cache" if kv in TRUE else "causal"
    if params.get("task", "").strip() == IMAGE_TEXT_TO_TEXT:
        info.model_type = IMAGE_TEXT_TO_TEXT
    info.problems += _config_problems(config, folder.name, params, kv)


def _model_config_pb2():
    from tritonclient.grpc import model_config_pb2  # lazy: tritonclient.grpc takes ~0.5 s to import

    return model_config_pb2


def _parse_pbtxt(text: str):
    from google.protobuf import text_format

    return text_format.Parse(text, _model_config_pb2().ModelConfig())


def _source(params: dict[str, str]) -> str:
    if params.get("aic_binary_dir"):
        return f"qpc {params['aic_binary_dir']}"
    name = params.get("hf_model_name", "")
    return "embedded" if name in ("", "embedded") else f"hf {name}"


def _config_problems(config: Any, folder_name: str, params: dict[str, str], kv: str) -> list[str]:
    problems = []
    if config.backend != "python":
        problems.append(f"backend is {config.backend!r}, not 'python'")
    if config.name and config.name != folder_name:
        problems.append(f"config name {config.name!r} differs from the folder name")
    if params.get("task") == embedding_config.TASK:
        pass  # an encoder: no KV cache
    elif "use_kv_cache" not in params:
        problems.append("parameter use_kv_cache is missing")
    elif kv not in BOOLEANS:
        problems.append(f"parameter use_kv_cache must be true or false, got {params['use_kv_cache']!r}")
    for key, value, allowed in (("engine", params.get("engine"), ENGINES),
                                ("precision", params.get("precision"), PRECISIONS)):
        if value and value not in allowed:
            problems.append(f"parameter {key} must be one of {', '.join(allowed)}, got {value!r}")
    if not any(i.data_type == _model_config_pb2().TYPE_STRING for i in config.input):
        problems.append("no TYPE_STRING input (a prompt)")
    return problems


def _onnx_problems(folder: Path, info: ModelFolder) -> list[str]:
    """An engine=onnx model runs the graph its compile config names (relative to the model folder)."""
    graph = (info.compile or {}).get("onnx_path")
    if not graph:
        return ["engine onnx needs onnx_path in compile_config.json"]
    info.source = f"onnx {graph}"
    try:
        specializations.find_graph(folder / Path(graph).expanduser())
    except SessionError as exc:
        return [f"onnx_path: {exc}"]
    return []


def _group_problems(info: ModelFolder) -> list[str]:
    """Device groups the backend would refuse: unreadable, not one per instance, or not the QPC's num_devices."""
    try:
        groups = devices.parse_groups(info.device_groups)
        if groups and len(groups) != info.instances:
            return [f"device_groups {info.device_groups} has {len(groups)} groups for {info.instances} instances"]
        if groups and info.compile is not None:
            qpc = info.source[4:] if info.source.startswith("qpc ") else ""
            devices.check_size(groups, *devices.compiled_devices(qpc, info.compile))
    except (devices.DeviceError, SessionError) as exc:
        return [str(exc)]
    return []


def device_review(models: list[ModelFolder], listed: tuple[list[devices.Device], str]) -> list[str]:
    """The device groups of the models a server loads, against the SoCs ``listed`` (:func:`devices.query`) and each
    other: DeviceError when a SoC is in two models' groups, or missing, not Ready or busy; the warnings and notes."""
    owner: dict[int, str] = {}
    notes: list[str] = []
    for model in models:
        groups = devices.parse_groups(model.device_groups) if model.valid else []
        for qid in (q for group in groups for q in group):
            if qid in owner:
                raise devices.DeviceError(f"QID {qid} is in device groups of both {owner[qid]} and {model.name}: "
                                          "a SoC serves one instance")
            owner[qid] = model.name
        if groups and listed[0]:
            notes += [f"{model.name}: {line}" for line in devices.check_devices(groups, listed[0])]
    if owner and not listed[0]:
        notes.append(f"note: device groups not checked against the SoCs ({listed[1]})")
    return notes


def _read_compile(folder: Path, info: ModelFolder) -> None:
    path = folder / "compile_config.json"
    try:
        info.compile = embedding_config.of_model(path, info.model_type)
    except compile_config.CompileConfigError as exc:
        info.problems.append(str(exc).replace(str(path), "compile_config.json", 1))
