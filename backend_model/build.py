"""From a model's settings to a running engine: pick QAIC, its ONNX twin or CPU, load or compile, report it.

``engine=onnx`` runs ``compile_config.json``'s ``onnx_path`` (QEfficient's export or ours: the
.onnx file or its folder, relative to the model folder unless absolute) through ``QaicSession`` on
the card's ONNX Runtime twin: the card's code path with real numbers, before a long compile. A
graph without specializations.json beside it is compiled for the compile config's dimensions.

LoRA adapters (``lora_adapters``, ``contract.adapters``): the CPU's Llama-family session applies them itself; a
card runs a QPC compiled with them by QEfficient's finite LoRAX (``QEffAutoLoraModelForCausalLM``, its
``lora_ids`` input), whose adapters are the compile config's ``lora_adapters`` in the same order. (The card's path
is written against QEfficient's API; no card runs here.)
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .contract import adapters as lora
from .contract import compile_config, cpu_support, devices, specializations
from .contract.parameters import BOOLEANS, DEFAULT_MAX_IMAGES, ENGINES, IMAGE_TEXT_TO_TEXT, TRUE, VARIES_WITH_BATCH
from .engine.loop import Engine
from .models import (
    EMBEDDED,
    Progress,
    eos_ids,
    load_config,
    load_pretrained,
    load_tokenizer,
    read_tensors,
    safetensors_files,
)
from .mx_formats import NO_MX, Mx
from .sessions.protocol import Dims, SessionError
from .sessions.qaic import QaicSession, open_qpc, qaic_available
from .sessions.threads import choose_threads

MAX_SPECULATIVE_TOKENS = 16
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
    device_ids: list[int] | None = None  # the SoCs this instance opens (its device group)
    instance: int = 0  # which instance of the model this is (Triton's instance name, devices.instance_index)
    cpu_threads: int = 0  # 0: automatic (threads.choose_threads)
    cpu_models: int = 1  # CPU model instances of the server, for the automatic thread count
    prefix_caching: bool = True  # a prompt that starts as a slot's last one prefills only the rest (Engine)
    speculative_tokens: int = 0  # prompt-lookup drafted tokens a decode step (speculation.py); 0: off
    task: str = ""  # IMAGE_TEXT_TO_TEXT: a vision-language model (vision/); else text generation
    max_images: int = DEFAULT_MAX_IMAGES  # images a request may bring (a vision-language model)
    vision_binary_dir: str = ""  # a vision-language model's vision QPC (aic_binary_dir: its language QPC)
    adapters: dict[str, Path] = field(default_factory=dict)  # LoRA adapters' folders by name, in lora_ids order
    max_loras: int = 0  # adapters one batch mixes
    compile: dict[str, Any] = field(default_factory=lambda: compile_config.validate({}))

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, parameters: dict[str, str],
                       instance_name: str = "") -> BackendSettings:
        """Read Triton's string parameters and ``<model_dir>/compile_config.json`` (defaults if absent); the
        instance Triton named (``args["model_instance_name"]``) takes its device group, which must hold the SoCs
        the QPC runs on."""
        path = Path(model_dir) / "compile_config.json"
        compiled = compile_config.load(path) if path.is_file() else compile_config.validate({})
        if compiled["onnx_path"]:  # a relative graph path belongs to the model folder
            compiled["onnx_path"] = str(Path(model_dir) / Path(compiled["onnx_path"]).expanduser())
        engine = parameters.get("engine", "auto") or "auto"
        if engine not in ENGINES:
            raise SessionError(f"parameter engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        kv = parameters.get("use_kv_cache", "true").strip().lower()
        if kv not in BOOLEANS:
            raise SessionError(f"parameter use_kv_cache must be true or false, got {kv!r}")
        try:
            group, instance = devices.group_of(parameters, instance_name, compiled)
        except devices.DeviceError as exc:
            raise SessionError(str(exc)) from None
        threads = parameters.get("cpu_threads", "0").strip() or "0"
        reuse = parameters.get("enable_prefix_caching", "true").strip().lower() or "true"
        if reuse not in BOOLEANS:
            raise SessionError(f"parameter enable_prefix_caching must be true or false, got {reuse!r}")
        drafts = parameters.get("num_speculative_tokens", "0").strip() or "0"
        if not drafts.isdigit() or int(drafts) > MAX_SPECULATIVE_TOKENS:
            raise SessionError(f"parameter num_speculative_tokens must be an integer from 0 to "
                               f"{MAX_SPECULATIVE_TOKENS}, got {drafts!r}")
        if not threads.isdigit():
            raise SessionError(f"parameter cpu_threads must be an integer >= 0, got {threads!r}")
        task = parameters.get("task", "").strip()
        if task not in ("", "text_generation", IMAGE_TEXT_TO_TEXT):
            raise SessionError(f"parameter task must be text_generation or {IMAGE_TEXT_TO_TEXT}, got {task!r}")
        images = parameters.get("max_images", "").strip() or str(DEFAULT_MAX_IMAGES)
        if not images.isdigit() or int(images) < 1:
            raise SessionError(f"parameter max_images must be an integer >= 1, got {images!r}")
        try:
            folders = lora.parse_adapters(parameters.get(lora.PARAMETER, ""))
            max_loras = lora.parse_max_loras(parameters.get(lora.MAX_PARAMETER, ""), len(folders))
            adapters = {name: lora.folder_in(Path(model_dir), folder) for name, folder in folders.items()}
        except lora.AdapterError as exc:
            raise SessionError(str(exc)) from None
        return cls(
            use_kv_cache=kv in TRUE,
            engine=engine,
            aic_binary_dir=parameters.get("aic_binary_dir", "").strip(),
            hf_model_name=parameters.get("hf_model_name", "").strip() or EMBEDDED,
            precision=parameters.get("precision", "fp32").strip() or "fp32",
            device_ids=group,
            instance=instance,
            cpu_threads=int(threads),
            prefix_caching=reuse in TRUE,
            speculative_tokens=int(drafts),
            task=task,
            max_images=int(images),
            vision_binary_dir=parameters.get("vision_binary_dir", "").strip(),
            adapters=adapters,
            max_loras=max_loras,
            compile=compiled,
        )

    @property
    def vision(self) -> bool:
        """A vision-language model: images in, text out."""
        return self.task == IMAGE_TEXT_TO_TEXT

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
    """'qaic', 'onnx' or 'cpu' for the requested engine; 'auto' takes the card when it can be driven."""
    if settings.engine == "onnx" and not settings.use_kv_cache:
        raise SessionError("engine=onnx runs a KV-cache graph: set use_kv_cache to true")
    return pick_engine(settings)


def pick_engine(settings: Any) -> str:
    """'qaic', 'onnx' or 'cpu' for ``settings``' engine, onnx_path and aic_binary_dir (a decoder's or an encoder's)."""
    if settings.engine == "cpu":
        return "cpu"
    if settings.engine == "onnx":
        if not settings.compile["onnx_path"]:
            raise SessionError("engine=onnx needs onnx_path in compile_config.json (the exported graph)")
        if importlib.util.find_spec("onnxruntime") is None:
            raise SessionError("engine=onnx needs onnxruntime: pip install onnxruntime")
        return "onnx"
    if qaic_available():
        return "qaic"
    if settings.engine == "qaic":
        raise SessionError(
            "engine=qaic but QEfficient/qaicrt are not importable: activate /opt/qeff-env "
            "inside Qualcomm's container, or set engine to auto or cpu"
        )
    if settings.aic_binary_dir:  # a QPC names a card: running its HF model on the CPU instead is no fallback
        raise SessionError(
            f"aic_binary_dir is set ({settings.aic_binary_dir}) but QEfficient/qaicrt are not importable: "
            "activate /opt/qeff-env inside Qualcomm's container, or clear aic_binary_dir (or set engine=cpu) "
            "to run hf_model_name on the CPU"
        )
    return "cpu"


SAMPLER_KEYS = ("include_sampler", "max_top_k_ids")  # QEfficient's qaic_config (from_pretrained), not compile()'s


def qaic_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """QEfficient ``from_pretrained``'s ``qaic_config``: the on-device sampler, when the compile config asks it."""
    return {k: config[k] for k in SAMPLER_KEYS} if config.get("include_sampler") else None


def compile_options(config: dict[str, Any]) -> dict[str, Any]:
    """QEfficient ``compile()`` keyword arguments: extra options become compiler flags as given, so
    ``mos`` goes only when >= 1 and ``aic_enable_depth_first`` only when true (the sampler's keys go to
    ``qaic_config``; the compute-context length lists are ``compile()``'s own)."""
    options = {k: v for k, v in config.items() if v is not None and k not in SAMPLER_KEYS and k != "lora_adapters"}
    if options.get("mos", -1) < 1:
        options.pop("mos", None)
    if not options.get("aic_enable_depth_first"):
        options.pop("aic_enable_depth_first", None)
    return options


def _compile_qpc(settings: BackendSettings, progress: Progress) -> str:
    """Compile ``hf_model_name`` on the card with QEfficient (no QPC given)."""
    from QEfficient import QEFFAutoModelForCausalLM

    progress(f"compiling {settings.hf_model_name} with QEfficient (this can take a long time) ...")
    options = compile_options(settings.compile)
    sampler = qaic_config(settings.compile)
    continuous = bool(options.get("full_batch_size"))
    extra = {"qaic_config": sampler} if sampler else {}  # only when it says something, as QEfficient's examples
    if settings.adapters:  # finite LoRAX: every adapter compiled in, lora_ids from 1 in order (0: the base)
        from QEfficient.peft.lora import QEffAutoLoraModelForCausalLM

        model = QEffAutoLoraModelForCausalLM.from_pretrained(settings.hf_model_name, continuous_batching=continuous,
                                                             **extra)
        for name, folder in settings.adapters.items():
            model.load_adapter(str(folder), name)
    else:
        model = QEFFAutoModelForCausalLM.from_pretrained(settings.hf_model_name, continuous_batching=continuous,
                                                         **extra)
    return str(model.compile(**options))


def _card_adapters(settings: BackendSettings, session: QaicSession) -> None:
    """A QPC's adapters: its ``lora_ids`` input, and the compile config's list (their ids) the same as the model's."""
    names = list(settings.adapters)
    has_input = "lora_ids" in session.session.input_names
    if names and not has_input:
        raise SessionError("lora_adapters are set but the QPC has no lora_ids input: compile it with the adapters "
                           "(QEfficient's QEffAutoLoraModelForCausalLM), or leave aic_binary_dir empty to compile")
    listed = settings.compile.get("lora_adapters")
    if names and settings.aic_binary_dir and listed != names:
        raise SessionError(f"compile_config.json lora_adapters {listed} must name the QPC's adapters in their order: "
                           f"config.pbtxt serves {names}")
    session.adapters = tuple(names)


def _compiled_session(kind: str, settings: BackendSettings, progress: Progress, threads: int) -> QaicSession:
    """The card's session on a QPC, or its ONNX twin's on the exported graph (``threads`` for the twin)."""
    if kind == "qaic":
        if settings.hf_model_name == EMBEDDED:  # the tokenizer must be the QPC's model's, not SmolLM2's
            raise SessionError("engine qaic needs hf_model_name: the model the QPC was compiled from (its tokenizer)")
        session = QaicSession(settings.aic_binary_dir or _compile_qpc(settings, progress), settings.device_ids,
                              open_qpc)
        _card_adapters(settings, session)
        return session
    if settings.adapters:
        raise SessionError("engine=onnx runs no LoRA adapters: serve them on the CPU (engine cpu) or a card")
    from .twin.session import onnx_opener

    c = settings.compile
    fallback = specializations.of_config(c)
    top_k = c["max_top_k_ids"] if c["include_sampler"] else 0
    opener = onnx_opener(fallback, threads, "compile_config.json", Mx.of(c), max_top_k_ids=top_k)
    return QaicSession(c["onnx_path"], settings.device_ids, opener)


def open_cpu_session(model, dims: Dims, use_kv_cache: bool, precision: str, mx: Mx = NO_MX,
                     adapters: dict | None = None):
    """The CPU session ``cpu_support`` picks for the model's config (SessionError naming the field none serves);
    ``adapters`` (LoRA, by name): the Llama-family session's."""
    from .sessions.cpu import CpuKVSession
    from .sessions.hf import CpuRecomputeSession, TransformersKVSession

    kind = cpu_support.session_for(model.config.to_dict(), use_kv_cache, precision, dims.ctx_len)
    _check_lora_session(kind, adapters)
    if kind == cpu_support.LLAMA_FAMILY:
        return CpuKVSession.of(model, dims, precision, mx, adapters)
    _refuse_mx(mx, model.config.model_type)
    open_session = {cpu_support.TRANSFORMERS_KV: TransformersKVSession, cpu_support.RECOMPUTE: CpuRecomputeSession}
    return open_session[kind](model, dims, precision)


def _refuse_mx(mx: Mx, model_type: str) -> None:
    """The CPU computes the card's MX formats in the Llama-family KV session only: anywhere else a compile config
    asking for them is refused, never run in fp32 as if it were what the card computes."""
    if mx:
        key = "mxfp6_matmul" if mx.mxfp6_matmul else "mxint8_kv_cache"
        raise SessionError(f"{key}: the CPU engine computes the card's MX formats for the Llama family "
                           f"({', '.join(cpu_support.LLAMA_LIKE)}) with use_kv_cache only, not for a {model_type} "
                           "model; set it false in compile_config.json, or run the ONNX twin (engine=onnx)")


def _check_lora_session(kind: str, adapters: dict | None) -> None:
    if adapters and kind != cpu_support.LLAMA_FAMILY:
        raise SessionError(f"LoRA adapters run on the CPU's Llama-family KV session (or a card), not the {kind} "
                           "session this model takes")


def read_adapters(settings: BackendSettings, config) -> dict:
    """The model's LoRA adapters, read and checked against the base model's config (SessionError)."""
    from .sessions.lora import Adapter

    read = {name: Adapter.read(folder, config.to_dict()) for name, folder in settings.adapters.items()}
    try:
        lora.check_alike({name: adapter.config for name, adapter in read.items()})
    except lora.AdapterError as exc:
        raise SessionError(str(exc)) from None
    return read


def _cpu_engine(settings: BackendSettings, progress: Progress, threads: int) -> tuple[Engine, str]:
    """The CPU engine and what the model's log line says about it; the config is checked before the weights load.

    The Llama-family session reads the safetensors files itself when they are here: it never runs transformers'
    model, so building one (importing its modelling code, initialising its weights) is skipped.
    """
    import torch

    config = load_config(settings.hf_model_name, progress)
    kind = cpu_support.session_for(config.to_dict(), settings.use_kv_cache, settings.precision,
                                   settings.compile["ctx_len"])
    _check_lora_session(kind, settings.adapters)
    adapters = read_adapters(settings, config)
    torch.set_num_threads(threads)
    dims = settings.dims(config.vocab_size)
    mx = Mx.of(settings.compile)
    if kind != cpu_support.LLAMA_FAMILY:
        _refuse_mx(mx, config.model_type)
    files = safetensors_files(settings.hf_model_name, progress) if kind == cpu_support.LLAMA_FAMILY else None
    if files:
        from .sessions.cpu import CpuKVSession

        tokenizer, eos = load_tokenizer(settings.hf_model_name, progress, config)
        session = CpuKVSession(config, read_tensors(files), dims, settings.precision, mx, adapters)
    else:
        model, tokenizer = load_pretrained(settings.hf_model_name, progress)
        session = open_cpu_session(model, dims, settings.use_kv_cache, settings.precision, mx, adapters)
        eos = eos_ids(model, tokenizer)
    engine = Engine(session, tokenizer, eos)
    varies = VARIES_WITH_BATCH.get(settings.precision)
    extra = f" session={kind} precision={settings.precision}" + (f" ({varies})" if varies else "")
    extra += f" mx={mx.label}" if mx else ""
    if not settings.use_kv_cache:  # recomputing every token on the CPU is slow: a short answer by default
        engine.default_max_tokens = CPU_CAUSAL_MAX_TOKENS
        extra += f" default max_tokens={CPU_CAUSAL_MAX_TOKENS} (causal on the CPU: slow)"
    return engine, extra


def build_engine(settings: BackendSettings, progress: Progress = print) -> tuple[Engine, str]:
    """The engine for these settings and a one-line description of what was chosen."""
    kind = choose_engine(settings)
    threads, chosen = choose_threads(settings.cpu_threads, settings.cpu_models)  # the CPU's and the twin's
    if settings.vision:
        from .vision.build import vision_engine

        engine, extra = vision_engine(settings, kind, progress, threads)
        if kind == "cpu":
            extra += f" threads={threads} ({chosen})"
    elif kind in ("qaic", "onnx"):
        session = _compiled_session(kind, settings, progress, threads)
        tokenizer, eos = load_tokenizer(settings.hf_model_name, progress)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        engine = Engine(session, tokenizer, eos)
        engine.card_sampling = engine.on_card or settings.compile["max_top_k_ids"]  # sampled as the card does
        extra = f" sampler={'card' if engine.on_card else 'host'} max_top_k_ids={engine.card_sampling}"
        if session.ccl:
            extra += f" comp_ctx_lengths={session.ccl}"
        if kind == "onnx":
            mx = Mx.of(settings.compile)
            extra += (f" graph={settings.compile['onnx_path']} specializations={session.session.specializations_from}"
                      f" threads={threads} ({chosen})" + (f" mx={mx.label}" if mx else ""))
    else:
        engine, extra = _cpu_engine(settings, progress, threads)
        extra += f" threads={threads} ({chosen})"
    engine.prefix_caching = engine.prefix_caching and settings.prefix_caching
    if engine.adapters:
        engine.max_loras = settings.max_loras
        extra += f" lora_adapters={','.join(engine.adapters)} max_loras={engine.max_loras}"
    if engine.prefix_caching:
        extra += " prefix_caching=on"
    if settings.speculative_tokens:
        if not getattr(engine.session, "speculates", False):
            raise SessionError(f"num_speculative_tokens {settings.speculative_tokens}: prompt-lookup speculation "
                               "runs on the CPU's Llama-family KV session only (a card needs a QPC compiled for it)")
        engine.speculative_tokens = settings.speculative_tokens
        extra += f" num_speculative_tokens={settings.speculative_tokens} (prompt lookup)"
    d = engine.dims
    mode = f"continuous batching full_batch_size={d.full_batch_size}" if d.continuous else f"batch_size={d.batch_size}"
    what = "kv_cache" if settings.use_kv_cache else "causal"
    return engine, (
        f"engine={kind} model={settings.hf_model_name} type={what} {mode} "
        f"prefill_seq_len={d.prefill_seq_len} ctx_len={d.ctx_len}{extra}"
    )

