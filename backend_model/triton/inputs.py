"""A request's inputs, read and checked: the bundled interface and the Triton vLLM backend's names.

The bundled interface takes ``prompt`` (one or more prompts) and each control of the schema
(:mod:`..contract.controls`) as its own input. The Triton vLLM backend's names are accepted too, so NVIDIA's
tools (genai-perf ``--backend vllm``, AIPerf) run against this model unmodified: ``text_input`` (one
prompt), ``stream`` (BOOL), ``sampling_parameters`` (a JSON object of the same controls) and
``exclude_input_in_output``. ``status_of`` with ``status_key`` asks whether the asker's own request
(the one sent with that ``status_key``) runs here. ``continuation`` (one JSON value per prompt: its text
as a JSON string, or its token ids as a JSON array) asks to score that continuation instead of generating.
``messages`` (one JSON array of ``{"role", "content"}`` messages per prompt, in place of ``prompt``) asks the model
to render each conversation with its own chat template (:func:`prompts_of`), so a client needs no tokenizer; a
message's content is text, or a list of parts (``{"type": "text", "text": ...}``, ``{"type": "image"}``).
``images`` (the encoded bytes of each image) goes with one prompt to a vision-language model: the n-th image part
of its messages takes the n-th image, or a plain prompt gets the images before its text (:func:`image_prompt`).

Cheap checks come first: the number of prompts and their size in bytes (against what the model's
context can hold at most) before decoding or tokenising; the JSON's size and depth before parsing;
each value once, by its control's rule (integers before any cast). Free of
``triton_python_backend_utils``: ``read(name)`` gives an input's array, or None when absent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ..contract.controls import CONTROLS, MAX_JSON_BYTES, Control, json_object
from ..contract.errors import BadRequest
from ..engine.media import Media
from ..engine.sampling import SamplingParams
from ..vision.prompts import image_parts

MAX_PROMPTS = 256
MAX_NAME_BYTES = 256  # id, status_of, status_key
MAX_CONTINUATION_BYTES = 1024 * 1024  # one prompt's continuation, as JSON
MAX_IMAGES = 64  # counted before any is decoded; a model's max_images is checked by its ImagePrompts
Read = Callable[[str], Optional[np.ndarray]]
_ABSENT = object()


@dataclass
class Inputs:
    """What a request asks for (prompts not yet tokenized; controls checked, the set ones only)."""

    prompts: list[str] = field(default_factory=list)
    controls: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""  # the ``id`` input (the generate endpoint's "id")
    exclude_input: bool | None = None
    stream: bool | None = None  # None: the model's transaction policy decides
    status_key: str = ""  # the key a status question about this request must bring
    status_of: str | None = None  # a status question: the request id asked about
    continuations: list[str | list[int]] | None = None  # per prompt: text or token ids to score (not generate)
    chats: list[list[dict[str, Any]]] | None = None  # ``messages``: the prompts as conversations (see prompts_of)
    images: list[bytes] | None = None  # ``images``: the encoded images of the one prompt (see image_prompt)

    def params(self) -> SamplingParams:
        """The engine's sampling parameters of these controls."""
        return SamplingParams.of(self.controls)


def _items(array: np.ndarray, name: str, most: int) -> np.ndarray:
    items = array.reshape(-1)
    if items.size > most:
        raise BadRequest(f"{name} takes at most {most} value{'s' if most > 1 else ''}, got {items.size}")
    return items


def _decode(item: Any, where: str) -> str:
    if not isinstance(item, bytes):
        return str(item)
    try:
        return item.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"{where} is not valid UTF-8 (byte {exc.start})") from None


def _text(read: Read, name: str, max_bytes: int = MAX_NAME_BYTES) -> str | None:
    """A one-string input (``id``, ``sampling_parameters`` ...), or None when absent."""
    array = read(name)
    if array is None:
        return None
    items = _items(array, name, 1)
    if not items.size:
        return ""
    if len(items[0]) > max_bytes:
        raise BadRequest(f"{name} is {len(items[0])} bytes, over the {max_bytes} this model reads")
    return _decode(items[0], name)


def _one(array: np.ndarray, name: str) -> Any:
    """The one value of a scalar input, as a Python value."""
    values = array.reshape(-1)
    if values.size != 1:
        raise BadRequest(f"{name} takes one value, got {values.size}")
    return values[0].item()


def _flag(read: Read, name: str) -> bool | None:
    array = read(name)
    return None if array is None else bool(_one(array, name))


def _sized(array: np.ndarray | None, max_bytes: int | None) -> list[tuple[str, Any]]:
    """Each prompt's raw value with its name for messages (``prompt 2 of 3``): counted, and refused by its size in
    bytes before it is decoded (or tokenised)."""
    items = array.reshape(-1) if array is not None else ()
    if not len(items):
        raise BadRequest("no prompt given (the input 'prompt', or 'text_input')")
    if len(items) > MAX_PROMPTS:
        raise BadRequest(f"at most {MAX_PROMPTS} prompts per request, got {len(items)}")
    out = []
    for i, item in enumerate(items):
        which = _which(i, len(items))
        if max_bytes is not None and len(item) > max_bytes:
            raise BadRequest(f"{which} is {len(item)} bytes, over the {max_bytes} bytes this model's context "
                             "(ctx_len) holds at most: shorten it")
        out.append((which, item))
    return out


def _prompts(read: Read, max_bytes: int | None) -> list[str]:
    """The prompts, as text."""
    name, array = "prompt", read("prompt")
    if array is None:
        name, array = "text_input", read("text_input")
    prompts = []
    for i, (which, item) in enumerate(_sized(array, max_bytes)):
        prompt = _decode(item, f"{name}[{i}]")
        if not prompt.strip():
            raise BadRequest(f"{which} is empty")
        prompts.append(prompt)
    return prompts


def _content(value: Any) -> str | list[dict[str, str]] | None:
    """A message's content as the model reads it: text, or its parts (text and image), other keys left out; None
    when it is neither."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not all(isinstance(p, dict) for p in value):
        return None
    parts = []
    for part in value:
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image":
            parts.append({"type": "image"})
        else:
            return None
    return parts


def _chats(read: Read, max_bytes: int | None) -> list[list[dict[str, Any]]] | None:
    """The ``messages`` input: one conversation per prompt, a JSON array of ``{"role", "content"}`` objects (text,
    or a list of text and image parts; other keys are left out); None when absent."""
    array = read("messages")
    if array is None:
        return None
    if read("prompt") is not None or read("text_input") is not None:
        raise BadRequest("give prompt (text) or messages (conversations), not both")
    chats = []
    for i, (which, item) in enumerate(_sized(array, max_bytes)):
        try:
            value = json.loads(_decode(item, f"messages[{i}]"))
        except (ValueError, RecursionError):
            value = None
        contents = [_content(m.get("content")) if isinstance(m, dict) else None for m in value] \
            if isinstance(value, list) else []
        if not contents or not all(isinstance(m.get("role"), str) for m in value) or None in contents:
            raise BadRequest(f"the messages of {which} must be JSON: an array of "
                             '{"role": ..., "content": ...} objects of text (or of text and image parts)')
        chats.append([{"role": m["role"], "content": c} for m, c in zip(value, contents)])
    return chats


def _images(read: Read) -> list[bytes] | None:
    """The ``images`` input's elements (counted before anything is decoded), or None when absent or empty."""
    array = read("images")
    if array is None or not array.size:
        return None
    return [bytes(item) if isinstance(item, (bytes, bytearray)) else item for item in _items(array, "images",
                                                                                              MAX_IMAGES)]


def _sampling_parameters(read: Read) -> dict[str, Any]:
    """The vLLM backend's ``sampling_parameters`` JSON object; its size and depth are checked before parsing."""
    text = _text(read, "sampling_parameters", MAX_JSON_BYTES)
    return json_object(text, "sampling_parameters") if text else {}


def _continuations(read: Read, count: int) -> list[str | list[int]] | None:
    """The ``continuation`` input: one JSON string (text) or JSON array of token ids per prompt."""
    array = read("continuation")
    if array is None:
        return None
    items = array.reshape(-1)
    if len(items) != count:
        raise BadRequest(f"continuation takes one value per prompt ({count}), got {len(items)}")
    values = []
    for i, item in enumerate(items):
        where = f"the continuation of {_which(i, count)}"
        if len(item) > MAX_CONTINUATION_BYTES:
            raise BadRequest(f"{where} is {len(item)} bytes, over the {MAX_CONTINUATION_BYTES} this model reads")
        try:
            value = json.loads(_decode(item, where))
        except (ValueError, RecursionError):
            value = None
        ids = isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
        if not (isinstance(value, str) or ids):
            raise BadRequest(f"{where} must be JSON: a string (its text) or an array of token ids")
        values.append(value)
    return values


def _own(read: Read, control: Control) -> Any:
    """The raw value of the control's own input, or _ABSENT."""
    array = read(control.name)
    if array is None:
        return _ABSENT
    if control.multiple:  # counted before the strings are decoded
        items = _items(array, control.name, array.size if control.maximum is None else int(control.maximum))
        return [_decode(item, f"{control.name}[{i}]") for i, item in enumerate(items)]
    if control.kind is dict:  # a JSON object's text, measured before it is decoded
        return _text(read, control.name, MAX_JSON_BYTES)
    if control.kind is str:  # one string (an adapter's name)
        return _text(read, control.name)
    return _one(array, control.name)


def _controls(read: Read) -> dict[str, Any]:
    """Each control's checked value: its own input, else the ``sampling_parameters`` key (the unset ones absent)."""
    shared = _sampling_parameters(read)
    values = {}
    for control in CONTROLS:
        value = _own(read, control)
        if value is not _ABSENT:  # an input of its own wins over sampling_parameters
            value = control.check(value)
        elif control.vllm and control.name in shared:
            value = shared[control.name]  # genai-perf sends numbers as strings ("max_tokens": "16")
            value = control.parse(value) if isinstance(value, str) and not control.multiple else control.check(value)
        else:
            continue
        if value is not None:
            values[control.name] = value
    return values


def read_inputs(read: Read, max_prompt_bytes: int | None = None, unknown: Sequence[str] = ()) -> Inputs:
    """The request's inputs; BadRequest (a one-line message for the client) when they cannot be used.

    ``unknown``: names the request carries that are not inputs (the generate endpoint makes request
    parameters of them, where HTTP and gRPC inference refuse them): refused alike.
    """
    if unknown:
        raise BadRequest(f"unexpected inference input '{unknown[0]}' (not an input of this model)")
    key = _text(read, "status_key") or ""
    asked = _text(read, "status_of")
    if asked:
        if not key:
            raise BadRequest("status_of needs status_key: the key the asked request was sent with")
        return Inputs(status_key=key, status_of=asked)
    chats = _chats(read, max_prompt_bytes)
    prompts = _prompts(read, max_prompt_bytes) if chats is None else []
    controls = _controls(read)
    images = _images(read)
    if images and len(chats or prompts) > 1:
        raise BadRequest(f"a request with images carries one prompt, got {len(chats or prompts)}")
    return Inputs(prompts, controls, _text(read, "id") or "", _flag(read, "exclude_input_in_output"),
                  _flag(read, "stream"), key, continuations=_continuations(read, len(chats or prompts)), chats=chats,
                  images=images)


def _which(index: int, count: int) -> str:
    """``prompt 2 of 3`` (1-based, as the console numbers them), or ``the prompt``."""
    return f"prompt {index + 1} of {count}" if count > 1 else "the prompt"


def prompts_of(engine: Any, inputs: Inputs) -> list[str]:
    """The prompts as the model reads them: as sent, or each conversation of ``messages`` as the model's chat
    template renders it, the assistant's turn opened (what a client with the model's tokenizer would send)."""
    if inputs.chats is None:
        return inputs.prompts
    if any(image_parts(chat) for chat in inputs.chats):
        raise BadRequest("this model reads text only: an image part of the messages is for an image_text_to_text "
                         "model")
    tokenizer = engine.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise BadRequest("this model has no chat template (its tokenizer has none): send the prompt as text "
                         "(the input 'prompt')")
    prompts = []
    for i, chat in enumerate(inputs.chats):
        try:
            prompts.append(tokenizer.apply_chat_template([{"role": m["role"], "content": _joined(m["content"])}
                                                          for m in chat], tokenize=False, add_generation_prompt=True))
        except Exception as exc:  # the template's own refusal (jinja's raise_exception: "roles must alternate")
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise BadRequest(f"the chat template refuses the messages of {_which(i, len(inputs.chats))}: "
                             f"{reason}") from None
    return prompts


def _joined(content: str | list[dict[str, str]]) -> str:
    """A text model's content: the text of its parts, joined."""
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


def image_prompt(engine: Any, inputs: Inputs) -> tuple[list[str], list[list[int]], list[Media]] | None:
    """(the prompt, its tokens, its Media) of a request with images, checked against the compile dimensions; None
    for a request without images (the time its images took told to the engine's meter). BadRequest for images to a
    text model."""
    chat = inputs.chats[0] if inputs.chats else None
    if not inputs.images and not (chat is not None and image_parts(chat)):
        return None
    if engine.images is None:
        raise BadRequest("this model reads text only: the input 'images' is for an image_text_to_text model "
                         "(its task parameter)")
    started = time.perf_counter()
    text, ids, media = engine.images.prepare(None if chat else inputs.prompts[0], chat, inputs.images or [])
    engine.meter.vision_encoded(time.perf_counter() - started)
    engine.check_prompt(ids)
    return [text], [ids], [media]


def encode(engine: Any, prompts: list[str]) -> list[list[int]]:
    """Each prompt's tokens, checked against the compile dimensions (the message names the prompt)."""
    encoded = []
    for i, prompt in enumerate(prompts):
        ids = engine.encode(prompt)
        try:
            engine.check_prompt(ids, _which(i, len(prompts)))
        except BadRequest as exc:
            whole = f"; nothing was generated for the {len(prompts)} prompts of this request" if len(prompts) > 1 \
                else ""
            raise BadRequest(f"{exc}{whole}") from None
        encoded.append(ids)
    return encoded


def encode_continuations(engine: Any, prompt_ids: list[list[int]], continuations: list[str | list[int]]
                         ) -> list[list[int]]:
    """Each continuation's tokens (text tokenised without special tokens: give its leading space), checked
    against the prompt it follows (the message names the prompt)."""
    encoded = []
    for i, (ids, value) in enumerate(zip(prompt_ids, continuations)):
        forced = engine.tokenizer(value, add_special_tokens=False)["input_ids"] if isinstance(value, str) else value
        engine.check_continuation(ids, forced, f"the continuation of {_which(i, len(prompt_ids))}")
        encoded.append(forced)
    return encoded
