"""What an embedding model's folder says: its config.pbtxt parameters and compile_config.json, checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract import devices, embedding_config
from ..contract.embedding_config import PRECISIONS
from ..contract.errors import SessionError
from ..contract.parameters import ENGINES
from ..models import EMBEDDED


@dataclass
class EmbeddingSettings:
    """An encoder's settings (the interface's parameters and the compile config of QEfficient's ``QEFFAutoModel``)."""

    engine: str = "auto"
    hf_model_name: str = EMBEDDED
    aic_binary_dir: str = ""
    precision: str = "fp32"
    pooling: str = "mean"
    normalize: bool = True
    max_seq_len: int = 256
    dimensions: list[int] = field(default_factory=list)  # the sizes a client may truncate to (the front's concern)
    cpu_threads: int = 0
    cpu_models: int = 1
    device_ids: list[int] | None = None
    instance: int = 0
    compile: dict = field(default_factory=lambda: embedding_config.validate({}))

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, parameters: dict[str, str], instance_name: str = "") -> Any:
        """The settings of ``model_dir`` (SessionError naming the first bad parameter or key)."""
        path = Path(model_dir) / "compile_config.json"
        try:
            compiled = embedding_config.load(path) if path.is_file() else embedding_config.validate({})
        except embedding_config.CompileConfigError as exc:
            raise SessionError(str(exc)) from None
        if compiled["onnx_path"]:  # relative to the model folder
            compiled["onnx_path"] = str(Path(model_dir) / Path(compiled["onnx_path"]).expanduser())
        get = {k: v.strip() for k, v in parameters.items()}.get
        engine, precision, threads = get("engine") or "auto", get("precision") or "fp32", get("cpu_threads") or "0"
        pooling, normalize = get("pooling") or "mean", (get("normalize") or "true").lower()
        longest = get("max_seq_len") or str(compiled["seq_len"][-1])
        dimensions = get("dimensions") or ""
        problem = embedding_config.check_parameters(pooling, normalize, longest, dimensions, compiled["seq_len"])
        if engine not in ENGINES:
            problem = f"parameter engine must be one of {', '.join(ENGINES)}, got {engine!r}"
        if precision not in PRECISIONS:
            problem = f"parameter precision of an embedding model must be {' or '.join(PRECISIONS)}, got {precision!r}"
        if not threads.isdigit():
            problem = f"parameter cpu_threads must be an integer >= 0, got {threads!r}"
        if problem:
            raise SessionError(problem)
        try:
            group, instance = devices.group_of(parameters, instance_name, compiled)
        except devices.DeviceError as exc:
            raise SessionError(str(exc)) from None
        return cls(engine=engine, hf_model_name=get("hf_model_name") or EMBEDDED,
                   aic_binary_dir=get("aic_binary_dir") or "", precision=precision, pooling=pooling,
                   normalize=normalize == "true", max_seq_len=int(longest),
                   dimensions=[int(d) for d in dimensions.split(",") if d], cpu_threads=int(threads), device_ids=group,
                   instance=instance, compile=compiled)
