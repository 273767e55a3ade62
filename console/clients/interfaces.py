"""Which Triton LLM interface a model speaks, and how to build its inputs and read its outputs.

:func:`~.interface_registry.interface_of` reads a model's config (:class:`ModelInfo`) and returns its interface,
bound to it:

* ``qaic-console`` — the bundled backend (and the seed's ``{"prompt", "id"}``): ``prompt`` [-1] in,
  several prompts in one request, controls by their own names -> ``text_output``, ``finish_reason``,
  ``input_tokens``, ``output_tokens``, and ``logprobs`` (JSON per prompt) when asked.
* ``vllm`` — Triton's vLLM backend: ``text_input``, ``stream``, ``sampling_parameters`` (every
  control, as JSON), ``exclude_input_in_output``, ``return_*`` -> ``text_output``; one prompt per
  request. Versions before ``exclude_input_in_output`` stream the whole text so far, prompt first.
* ``tensorrt-llm`` — TensorRT-LLM's ensemble: ``text_input``, ``max_tokens`` (required), ``stream``,
  ``stop_words``, ``temperature``/``top_p`` FP32, ``top_k`` INT32, ``seed`` or ``random_seed`` UINT64,
  ... -> ``text_output``; one prompt per request, a leading batch dimension when max_batch_size > 0.
* ``text`` — any model with one required STRING input and one STRING output.
* ``openai`` — a model of an OpenAI-compatible server (:mod:`.openai_interface`): the API's request fields
  and the extensions the server is known to take, one prompt per request.

Only the inputs a model declares are sent, with the model's own datatypes;
:meth:`Interface.ignored` names the set controls a model has no input for. A model that answers
once to a request that is not streamed (a decoupled model with a ``stream`` switch) also serves
batch mode (:attr:`ModelInfo.modes`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend_model.contract.parameters import IMAGE_TEXT_TO_TEXT

from .errors import BadRequest, ServerFault
from .events import ModelInfo, Tensor
from .images import placed
from .params import BY_NAME, CONTROLS, MESSAGES, Control, GenerationParams
from .wire import output_list, tensor

OUTPUTS = ("text_output", "finish_reason", "input_tokens", "output_tokens", "logprobs")
Outputs = dict[str, list | None]
KINDS = {"BYTES": str, "BOOL": bool, "FP16": float, "FP32": float, "FP64": float,
         **{f"{s}INT{b}": int for s in ("", "U") for b in (8, 16, 32, 64)}}


@dataclass(frozen=True)
class InputValue:
    """One input to send: its name, Triton datatype and values (``many``: always a list in JSON)."""

    name: str
    datatype: str
    values: tuple[Any, ...]
    many: bool = False


def entries(text: str) -> list[dict[str, Any]]:
    """One prompt's ``logprobs`` output (a JSON array: ``backend_model.engine.logprobs`` gives its shape) as entries."""
    try:
        value = json.loads(text)
    except ValueError:
        raise ServerFault(f"the model's logprobs output is not JSON: {text[:60]!r}") from None
    if not isinstance(value, list):
        raise ServerFault("the model's logprobs output is not a JSON array")
    return value


def is_text(t: Tensor | None) -> bool:
    return t is not None and t.datatype == "BYTES"


class Interface:
    """The bundled backend's interface; the others change names, switches and the one-prompt rule."""

    name = "qaic-console"
    prompt_input = "prompt"
    text_output = "text_output"
    batches_prompts = True  # several prompts in one request (the model's batch)
    aliases: dict[str, tuple[str, ...]] = {}  # control -> the model's input names, where they differ
    extra_outputs = {"finish_reason": "finish_reason", "input_tokens": "input_tokens", "output_tokens": "output_tokens",
                     "logprobs": "logprobs"}
    samples_by_default = False  # the server samples when no temperature is sent (vLLM, OpenAI-compatible servers)
    unlimited: int | None = 0  # what a control whose 0 means "up to the context" goes as (None: it cannot be asked)
    default_note = ""  # what applies then, in words
    image_input = "images"  # the model's input of a request's images, one element each (where it declares one)
    images_need = "an image_text_to_text model with an images input"  # what a model that takes images is, in words

    def __init__(self, info: ModelInfo) -> None:
        self.info = info

    @classmethod
    def matches(cls, info: ModelInfo) -> bool:
        return is_text(info.input(cls.prompt_input)) and is_text(info.output(cls.text_output))

    @property
    def label(self) -> str:
        """How the consoles name it under a model."""
        return f"interface {self.name}"

    # ---- what is sent

    @property
    def takes_images(self) -> bool:
        """The model declares the image input, and is an image_text_to_text model (its ``task`` parameter: every
        bundled model declares the input)."""
        return is_text(self.info.input(self.image_input)) and self.info.parameters.get("task") == IMAGE_TEXT_TO_TEXT

    def no_images(self) -> str:
        """Why the model takes no images, in a sentence ("" when it takes them)."""
        return "" if self.takes_images else (f"model {self.info.name} takes no images: it is not {self.images_need} "
                                             f"({self.name} interface)")

    def encoded(self, images: Sequence[bytes]) -> tuple[bytes | str, ...]:
        """The image input's elements: each image's bytes as they came (the bundled backend opens them with PIL)."""
        return tuple(images)

    def images(self, params: GenerationParams, n: int) -> list[InputValue]:
        """The image input of a request carrying ``params.images`` (one prompt); BadRequest when the model takes
        none."""
        if not params.images:
            return []
        if not self.takes_images:
            raise BadRequest(self.no_images())
        if n != 1:
            raise BadRequest(f"a request with images carries one prompt, not {n}")
        return [InputValue(self.image_input, "BYTES", self.encoded(params.images), True)]

    @property
    def prompt_name(self) -> str:
        return self.prompt_input

    @property
    def text_name(self) -> str:
        return self.text_output

    def wire_input(self, control: Control) -> Tensor | None:
        """The model's input for ``control`` (a declared one of a fitting type: a JSON object goes as text), or None."""
        kind = str if control.kind is dict else control.kind
        for name in self.aliases.get(control.name, (control.name,)):
            declared = self.info.input(name)
            if declared is not None and KINDS.get(declared.datatype) is kind:
                return declared
        return None

    def ignored(self, params: GenerationParams | None = None) -> list[str]:
        """Controls (the set ones, or all when ``params`` is None) this model would not receive."""
        names = [c.name for c in CONTROLS] if params is None else list(params.values)  # None: the offered ones
        return [n for n in names if self.wire_input(BY_NAME[n]) is None]

    def whole_context(self) -> int | None:
        """What ``max_tokens`` 0 (up to the model's context) is sent as; None: this server cannot be asked for it."""
        return self.unlimited

    def sent(self, params: GenerationParams) -> GenerationParams:
        """The controls as they go out: the consoles' default is greedy (a server that samples unless told,
        :attr:`samples_by_default`, is sent ``temperature`` 0), and 0 tokens ("up to the context") is what this
        server understands by it (:meth:`whole_context`), or not sent."""
        changes: dict[str, Any] = {}
        if self.samples_by_default and params.get("temperature") is None and self.wire_input(BY_NAME["temperature"]):
            changes["temperature"] = 0.0
        for control in CONTROLS:
            if control.zero_means_all and params.get(control.name) == 0 and self.whole_context() != 0:
                changes[control.name] = self.whole_context()
        return params.replace(**changes) if changes else params

    def notes(self, params: GenerationParams) -> list[str]:
        """What a front end should say about how the controls go out (a limit this server cannot be asked for)."""
        out = []
        for control in CONTROLS:
            if control.zero_means_all and params.get(control.name) == 0 and self.whole_context() is None:
                declared = self.wire_input(control)
                applies = (f"the console's default of {control.default} is sent" if declared and not declared.optional
                           else self.default_note or "the server's own default applies")
                out.append(f"{control.name} 0 (up to the context) cannot be asked of {self.info.name} ({self.name}): "
                           f"{applies}; give a number to choose")
        return out

    def controls(self, params: GenerationParams) -> list[InputValue]:
        """The set controls the model declares, and its required ones (at the console's default) when unset."""
        params = self.sent(params)
        out = []
        for control in BY_NAME.values():
            declared = self.wire_input(control)
            value = params.get(control.name)
            if declared is None or (value is None and (declared.optional or control.default is None)):
                continue
            value = control.default if value is None else value
            out.append(InputValue(declared.name, declared.datatype, control.wire(value), control.multiple))
        return out

    def switches(self, params: GenerationParams, streaming: bool) -> list[InputValue]:
        """``stream`` (streamed only from a decoupled model), ``exclude_input_in_output`` (always: the console asks
        for new text only, and adds an echo where a user wants one when it renders) and ``status_key``."""
        out = []
        if self.info.stream_switch:
            out.append(InputValue("stream", "BOOL", (streaming and self.info.decoupled,)))
        if self.info.input("exclude_input_in_output") is not None:
            out.append(InputValue("exclude_input_in_output", "BOOL", (True,)))
        if params.status_key and self.info.input("status_key") is not None:  # the key its status questions bring
            out.append(InputValue("status_key", "BYTES", (params.status_key,)))
        return out

    def request(self, prompts: Sequence[str], params: GenerationParams, streaming: bool) -> list[InputValue]:
        """Every input of one request for ``prompts`` (one of them unless :attr:`batches_prompts`)."""
        if len(prompts) > 1 and not self.batches_prompts:
            raise BadRequest(f"model {self.info.name} ({self.name}) takes one prompt per request")
        many = self.batches_prompts and len(prompts) > 1
        if params.chats and params.images:  # the image parts the images take, where the conversation has none
            parts = [{"type": "image"}] * len(params.images)
            prompts = [json.dumps(placed(json.loads(p), parts), ensure_ascii=False) for p in prompts]
        prompt = InputValue(self.chat_input() if params.chats else self.prompt_name, "BYTES", tuple(prompts), many)
        return [prompt, *self.images(params, len(prompts)), *self.controls(params), *self.switches(params, streaming),
                *self.continuation(params, len(prompts), many)]

    def chat_input(self) -> str:
        """The input of conversations the model renders with its chat template; BadRequest when it has none."""
        if self.info.input(MESSAGES) is None:
            raise BadRequest(f"model {self.info.name} ({self.name}) does not apply its chat template on the server "
                              f"(no {MESSAGES} input): give a tokenizer folder, or send raw prompts")
        return MESSAGES

    def continuation(self, params: GenerationParams, n: int, many: bool) -> list[InputValue]:
        """The ``continuation`` input (each prompt's text or token ids to score, as JSON) when the request has one;
        ClientError when the model cannot score."""
        if params.continuations is None:
            return []
        if self.info.input("continuation") is None:
            raise BadRequest(f"model {self.info.name} ({self.name}) has no continuation input: it cannot score")
        if len(params.continuations) != n:
            raise BadRequest(f"{len(params.continuations)} continuations for {n} prompts")
        return [InputValue("continuation", "BYTES", tuple(json.dumps(c) for c in params.continuations), many)]

    def inputs(self, module: Any, prompts: Sequence[str], params: GenerationParams,
               streaming: bool = True) -> list[Any]:
        """InferInputs for tritonclient.http or .grpc (``module``); a leading batch dimension when batching."""
        batch = [1] if self.info.max_batch_size > 0 else []
        return [tensor(module, w.name, w.datatype, w.values, [*batch, len(w.values)])
                for w in self.request(prompts, params, streaming)]

    def generate_body(self, prompts: Sequence[str], params: GenerationParams, request_id: str) -> dict[str, Any]:
        """The generate endpoint's JSON (a request that is not streamed), e.g. ``{"prompt": ..., "id": ...}``."""
        if params.images:
            raise BadRequest("images do not go over the generate endpoint (JSON): send them in stream or batch mode")
        body = {w.name: list(w.values) if w.many else w.values[0] for w in self.request(prompts, params, False)}
        if self.info.input("id") is not None:
            body["id"] = request_id
        return body

    # ---- what comes back

    def reason(self, value: str) -> str:
        return value

    def outputs(self, result: Any, n: int) -> Outputs:
        """``text_output``, ``finish_reason``, token counts as lists of ``n`` values (None when not sent)."""
        out: Outputs = {"text_output": output_list(result, self.text_name, n, texts=True)}
        for ours, theirs in self.extra_outputs.items():
            out[ours] = output_list(result, theirs, n, texts=ours in ("finish_reason", "logprobs"))
        reasons, logprobs = out.get("finish_reason"), out.get("logprobs")
        if reasons:
            out["finish_reason"] = [self.reason(r) for r in reasons]
        if logprobs:
            out["logprobs"] = [entries(v) for v in logprobs]
        return out

    def parse_generate(self, data: dict[str, Any], n: int) -> Outputs:
        """The generate endpoint's answer as :meth:`outputs` lists (one value per prompt)."""
        out: Outputs = {}
        for ours, theirs in {"text_output": self.text_name, **self.extra_outputs}.items():
            value = data.get(theirs)
            if value is None:
                out[ours] = None
                continue
            values = value if isinstance(value, list) else [value]
            if len(values) != n:
                raise ServerFault(f"the model returned {len(values)} {theirs} values for {n} prompts")
            out[ours] = [self.reason(v) for v in values] if ours == "finish_reason" else \
                [entries(v) for v in values] if ours == "logprobs" else values
        return {k: out.get(k) for k in OUTPUTS}

    def new_text(self, prompt: str, so_far: str, piece: str) -> str:
        """The new text a streamed response carries (``piece`` itself: streams send only new text)."""
        return piece

    def counts_are_deltas(self, streaming: bool) -> bool:
        """Whether each streamed response's output token count is for that response only (then they add up)."""
        return False

    def finish(self, prompt: str, text: str) -> str:
        """The new text of a reply that arrived whole.

        A model that declares ``exclude_input_in_output`` was told; another decides for itself, so a prompt it
        echoes is cut off here (the one place an echo is removed).
        """
        if self.info.input("exclude_input_in_output") is None and prompt and text.startswith(prompt):
            return text[len(prompt):]
        return text
