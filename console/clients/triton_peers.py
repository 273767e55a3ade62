"""The interfaces of Triton backends that are not ours: vLLM's, TensorRT-LLM's, and any plain text model
(see :mod:`.interfaces` for what each sends and reads)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

from .events import ModelInfo, Tensor
from .interfaces import InputValue, Interface, is_text
from .params import BY_NAME, Control, GenerationParams


class VllmInterface(Interface):
    """Triton's vLLM backend (decoupled; ``stream`` switches streaming; controls in ``sampling_parameters``)."""

    name = "vllm"
    prompt_input = "text_input"
    samples_by_default = True  # vLLM's SamplingParams: temperature 1.0
    unlimited = None  # its SamplingParams take no "up to the context"
    default_note = "vLLM's default of 16 tokens applies"
    batches_prompts = False
    extra_outputs = {"finish_reason": "finish_reason", "input_tokens": "num_input_tokens",
                     "output_tokens": "num_output_tokens"}
    image_input = "image"  # each element one image, base64 (its model.py decodes it and opens it with PIL)
    images_need = "a model with vLLM's image input"
    FLAGS = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")
    REASONS = {"None": "", "abort": "cancelled"}

    @classmethod
    def matches(cls, info: ModelInfo) -> bool:
        return super().matches(info) and is_text(info.input("sampling_parameters"))

    def wire_input(self, control: Control) -> Tensor | None:
        return self.info.input("sampling_parameters") if control.vllm else None  # vLLM's SamplingParams fields

    def controls(self, params: GenerationParams) -> list[InputValue]:
        sampling = {n: list(v) if BY_NAME[n].multiple else v for n, v in self.sent(params).values.items()
                    if BY_NAME[n].vllm}
        return [InputValue("sampling_parameters", "BYTES", (json.dumps(sampling),))] if sampling else []

    @property
    def takes_images(self) -> bool:
        return is_text(self.info.input(self.image_input))  # whether the model has vision is vLLM's to say

    def encoded(self, images: Sequence[bytes]) -> tuple[bytes | str, ...]:
        return tuple(base64.b64encode(image).decode("ascii") for image in images)

    def switches(self, params: GenerationParams, streaming: bool) -> list[InputValue]:
        flags = [InputValue(f, "BOOL", (True,)) for f in self.FLAGS if self.info.input(f) is not None]
        return [*super().switches(params, streaming), *flags]

    @property
    def cumulative(self) -> bool:
        """Before ``exclude_input_in_output`` (2024) the backend streamed the prompt and all text so far."""
        return self.info.input("exclude_input_in_output") is None

    def new_text(self, prompt: str, so_far: str, piece: str) -> str:
        if not self.cumulative:
            return piece
        whole = piece[len(prompt):] if piece.startswith(prompt) else piece
        return whole[len(so_far):] if whole.startswith(so_far) else whole

    def counts_are_deltas(self, streaming: bool) -> bool:
        return streaming

    def reason(self, value: str) -> str:
        return self.REASONS.get(value, value)


class TrtLlmInterface(Interface):
    """TensorRT-LLM's ensemble (``max_tokens`` required; decoupled ensembles stream when ``stream`` is set)."""

    name = "tensorrt-llm"
    prompt_input = "text_input"
    unlimited = None  # its max_tokens is required
    batches_prompts = False
    aliases = {"seed": ("seed", "random_seed"), "stop": ("stop_words",)}
    extra_outputs: dict[str, str] = {}

    @classmethod
    def matches(cls, info: ModelInfo) -> bool:
        return super().matches(info) and info.input("max_tokens") is not None


class TextInterface(Interface):
    """Any model with one required STRING input (the prompt) and one STRING output (the text)."""

    name = "text"
    batches_prompts = False
    extra_outputs: dict[str, str] = {}

    @classmethod
    def matches(cls, info: ModelInfo) -> bool:
        required = [t for t in info.inputs if not t.optional]
        return (len(required) == 1 and is_text(required[0])
                and len([t for t in info.outputs if is_text(t)]) == 1)

    @property
    def prompt_name(self) -> str:
        return next(t.name for t in self.info.inputs if not t.optional)

    @property
    def text_name(self) -> str:
        return next(t.name for t in self.info.outputs if is_text(t))

