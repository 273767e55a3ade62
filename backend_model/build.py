"""From a model's settings to a running engine: pick QAIC or CPU, load or compile, report the choice."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import compile_config
from .contract import Dims, SessionError
from .engine import Engine
from .models import EMBEDDED, Progress, eos_ids, load_pretrained
from .parameters import BOOLEANS, ENGINES, TRUE
from .qaic_session import QaicSession, qaic_available

CPU_CAUSAL_MAX_TOKENS = 32  # a causal model on the CPU recomputes the whole sequence for every token

__all__ = ["ENGINES", "BackendSettings", "build_engine", "choose_engine"]


@dataclass
class BackendSettings:
    """What a model folder says about its model (config.pbtxt parameters + compile_config.json)."""

    use_kv_cache: bool = True
    engine: str = "auto"
    aic_binary_dir: str = ""
    hf_model_name: str = EMBEDDED
    precision: str = "fp32"
    device_ids: list[int] | None = None
    cpu_threads: int = 0  # 0: torch's default
    compile: dict[str, Any] = field(default_factory=lambda: compile_config.validate({}))

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, parameters: dict[str, str]) -> BackendSettings:
        """Read Triton's string parameters and ``<model_dir>/compile_config.json`` (defaults if absent)."""
        path = Path(model_dir) / "compile_config.json"
        compiled = compile_config.load(path) if path.is_file() else compile_config.validate({})
        engine = parameters.get("engine", "auto") or "auto"
        if engine not in ENGINES:
            raise SessionError(f"parameter engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        kv = parameters.get("use_kv_cache", "true").strip().lower()
        if kv not in BOOLEANS:
            raise SessionError(f"parameter use_kv_cache must be true or false, got {kv!r}")
        devices = parameters.get("device_ids", "").strip()
        threads = parameters.get("cpu_threads", "0").strip() or "0"
        if not threads.isdigit():
            raise SessionError(f"parameter cpu_threads must be an integer >= 0, got {threads!r}")
        return cls(
            use_kv_cache=kv in TRUE,
            engine=engine,
            aic_binary_dir=parameters.get("aic_binary_dir", "").strip(),
            hf_model_name=parameters.get("hf_model_name", "").strip() or EMBEDDED,
            precision=parameters.get("precision", "fp32").strip() or "fp32",
            device_ids=[int(d) for d in devices.split(",")] if devices else None,
            cpu_threads=int(threads),
            compile=compiled,
        )

    def dims(self, vocab: int) -> Dims:
        c = self.compile
        return Dims(
            batch_size=1 if c["full_batch_size"] else c["batch_size"],
            prefill_seq_len=c["prefill_seq_len"] if self.use_kv_cache else c["ctx_len"],
            ctx_len=c["ctx_len"],
            vocab=vocab,
            full_batch_size=c["full_batch_size"] or 0,
        )


def choose_engine(settings: BackendSettings) -> str:
    """'qaic' or 'cpu' for the requested engine; 'auto' takes the card when it can be driven."""
    if settings.engine == "cpu":
        return "cpu"
    if settings.engine == "qaic":
        if not qaic_available():
            raise SessionError(
                "engine=qaic but QEfficient/qaicrt are not importable: activate /opt/qeff-env "
                "inside Qualcomm's container, or set engine to auto or cpu"
            )
        return "qaic"
    return "qaic" if qaic_available() else "cpu"


def _compile_qpc(settings: BackendSettings, progress: Progress) -> str:
    """Compile ``hf_model_name`` on the card with QEfficient (no QPC given)."""
    from QEfficient import QEFFAutoModelForCausalLM

    progress(f"compiling {settings.hf_model_name} with QEfficient (this can take a long time) ...")
    options = {k: v for k, v in settings.compile.items() if v is not None}
    model = QEFFAutoModelForCausalLM.from_pretrained(
        settings.hf_model_name, continuous_batching=bool(options.get("full_batch_size"))
    )
    return str(model.compile(**options))


def build_engine(settings: BackendSettings, progress: Progress = print) -> tuple[Engine, str]:
    """The engine for these settings and a one-line description of what was chosen."""
    kind = choose_engine(settings)
    if kind == "qaic":
        from transformers import AutoTokenizer

        qpc = settings.aic_binary_dir or _compile_qpc(settings, progress)
        session = QaicSession(qpc, settings.device_ids)
        tokenizer = AutoTokenizer.from_pretrained(settings.hf_model_name)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        engine = Engine(session, tokenizer)
        extra = ""
    else:
        import torch

        from .cpu_session import CpuKVSession, CpuRecomputeSession

        if settings.cpu_threads:
            torch.set_num_threads(settings.cpu_threads)
        model, tokenizer = load_pretrained(settings.hf_model_name, progress)
        dims = settings.dims(model.config.vocab_size)
        session_cls = CpuKVSession if settings.use_kv_cache else CpuRecomputeSession
        session = session_cls(model, dims, settings.precision)
        engine = Engine(session, tokenizer, eos_ids(model, tokenizer))
        extra = f" precision={settings.precision} threads={torch.get_num_threads()}"
        if not settings.use_kv_cache:  # recomputing every token on the CPU is slow: a short answer by default
            engine.default_max_tokens = CPU_CAUSAL_MAX_TOKENS
            extra += f" default max_tokens={CPU_CAUSAL_MAX_TOKENS} (causal on the CPU: slow)"
    d = engine.dims
    mode = f"continuous batching full_batch_size={d.full_batch_size}" if d.continuous else f"batch_size={d.batch_size}"
    what = "kv_cache" if settings.use_kv_cache else "causal"
    return engine, (
        f"engine={kind} model={settings.hf_model_name} type={what} {mode} "
        f"prefill_seq_len={d.prefill_seq_len} ctx_len={d.ctx_len}{extra}"
    )

