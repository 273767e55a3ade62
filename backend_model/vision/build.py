"""A vision-language model's engine: its language model in the one text engine, its vision encoder and processor
beside it (``Engine.images``).

On the CPU: the model's own vision tower and projector, and its language model with a cache per slot
(:mod:`.session`). On a card: QEfficient's two QPCs (``kv_offload``): the vision QPC (``vision_binary_dir``) and the
language QPC (``aic_binary_dir``), compiled from ``hf_model_name`` when neither is given, as its examples do
(``QEFFAutoModelForImageTextToText``). Like QEfficient's language QPC, a prompt with images prefills alone: such a
model serves with continuous batching or a batch of one.
"""

from __future__ import annotations

from typing import Any

from ..contract import cpu_support
from ..contract.errors import SessionError
from ..engine.loop import Engine
from ..models import Progress, eos_ids, load_config, load_processor, load_tokenizer, load_vision_pretrained
from .encoders import QaicVisionEncoder, TorchVisionEncoder
from .prompts import ImagePrompts
from .session import VisionKVSession, placeholder_id


def check(settings: Any, kind: str) -> None:
    """SessionError when these settings cannot serve a vision-language model."""
    c = settings.compile
    if not settings.use_kv_cache:
        raise SessionError("an image_text_to_text model runs with a KV cache: set use_kv_cache to true")
    if not c["full_batch_size"] and c["batch_size"] > 1:
        raise SessionError(f"an image_text_to_text model prefills a prompt with images alone: use continuous "
                           f"batching (full_batch_size) or batch_size 1, not batch_size {c['batch_size']}")
    if kind == "onnx":
        raise SessionError("engine=onnx does not run an image_text_to_text model's two graphs yet: use cpu or qaic")


def _compile(settings: Any, progress: Progress) -> tuple[str, str]:
    """(language QPC, vision QPC) compiled with QEfficient from ``hf_model_name``."""
    from QEfficient import QEFFAutoModelForImageTextToText

    from ..build import compile_options

    progress(f"compiling {settings.hf_model_name}'s vision and language QPCs with QEfficient (this can take a long "
             "time) ...")
    options = compile_options(settings.compile)
    options.pop("onnx_path", None)
    model = QEFFAutoModelForImageTextToText.from_pretrained(
        settings.hf_model_name, kv_offload=True, attn_implementation="eager",
        continuous_batching=bool(options.get("full_batch_size")))
    model.compile(**options)
    return str(model.lang_model.qpc_path), str(model.vision_model.qpc_path)


def vision_engine(settings: Any, kind: str, progress: Progress, threads: int) -> tuple[Engine, str]:
    """The engine (``images`` set) and what the model's log line says about it."""
    check(settings, kind)
    if kind == "qaic":
        from .card import QaicLanguageSession

        language, vision = settings.aic_binary_dir, settings.vision_binary_dir
        if bool(language) != bool(vision):
            raise SessionError("an image_text_to_text model on a card needs both QPCs: aic_binary_dir (language) "
                               "and vision_binary_dir (vision), or neither to compile them from hf_model_name")
        if not language:
            language, vision = _compile(settings, progress)
        config = load_config(settings.hf_model_name, progress)
        session: Any = QaicLanguageSession(language, settings.device_ids)
        encoder: Any = QaicVisionEncoder(vision, settings.device_ids)
        processor = load_processor(settings.hf_model_name, progress)
        eos = load_tokenizer(settings.hf_model_name, progress, config)[1]
        token_id, extra = placeholder_id(config), f" vision_qpc={vision}"
    else:
        import torch

        config = load_config(settings.hf_model_name, progress)
        kind_ = cpu_support.vision_session_for(config.to_dict(), settings.precision, settings.compile["ctx_len"])
        torch.set_num_threads(threads)
        model, processor = load_vision_pretrained(settings.hf_model_name, progress)
        session = VisionKVSession(model, settings.dims(config.get_text_config().vocab_size), settings.precision)
        encoder, eos = TorchVisionEncoder(session.model), eos_ids(model, processor.tokenizer)
        token_id = session.token_id
        extra = f" session={kind_} precision={settings.precision}"
    engine = Engine(session, processor.tokenizer, eos)
    engine.images = ImagePrompts(processor, encoder, token_id, settings.max_images)
    return engine, f"{extra} task=image_text_to_text max_images={settings.max_images}"
