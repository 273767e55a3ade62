"""A request's inputs, read and checked: the bundled interface and the Triton vLLM backend's names.

The bundled interface takes ``prompt`` (one or more prompts) and each control of the schema
(:mod:`.controls`) as its own input. The Triton vLLM backend's names are accepted too, so NVIDIA's
tools (genai-perf ``--backend vllm``, AIPerf) run against this model unmodified: ``text_input`` (one
prompt), ``stream`` (BOOL), ``sampling_parameters`` (a JSON object of the same controls) and
``exclude_input_in_output``. ``status_of`` with ``status_key`` asks whether the asker's own request
(the one sent with that ``status_key``) runs here.

Cheap checks come first: the number of prompts and their size in bytes (against what the model's
context can hold at most) before decoding or tokenising; the JSON's size and depth before parsing;
each value once, by its control's rule (integers before any cast). Free of
``triton_python_backend_utils``: ``read(name)`` gives an input's array, or None when absent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Callable, Optional

import numpy as np

from .controls import CONTROLS, Control
from .errors import BadRequest
from .sampling import SamplingParams

MAX_PROMPTS = 256
MAX_JSON_BYTES = 64 * 1024  # sampling_parameters
MAX_JSON_DEPTH = 32
MAX_NAME_BYTES = 256  # id, status_of, status_key
Read = Callable[[str], Optional[np.ndarray]]
_ABSENT = object()
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


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


def _prompts(read: Read, max_bytes: int | None) -> list[str]:
    """The prompts, each refused by its size in bytes before it is decoded (or tokenised)."""
    name, array = "prompt", read("prompt")
    if array is None:
        name, array = "text_input", read("text_input")
    items = array.reshape(-1) if array is not None else ()
    if not len(items):
        raise BadRequest("no prompt given (the input 'prompt', or 'text_input')")
    if len(items) > MAX_PROMPTS:
        raise BadRequest(f"at most {MAX_PROMPTS} prompts per request, got {len(items)}")
    prompts = []
    for i, item in enumerate(items):
        which = _which(i, len(items))
        if max_bytes is not None and len(item) > max_bytes:
            raise BadRequest(f"{which} is {len(item)} bytes, over the {max_bytes} bytes this model's context "
                             "(ctx_len) holds at most: shorten it")
        prompt = _decode(item, f"{name}[{i}]")
        if not prompt.strip():
            raise BadRequest(f"{which} is empty")
        prompts.append(prompt)
    return prompts


def _depth(text: str) -> int:
    """How deep a JSON text nests (brackets inside strings do not count)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _sampling_parameters(read: Read) -> dict[str, Any]:
    """The vLLM backend's ``sampling_parameters`` JSON object; its size and depth are checked before parsing."""
    text = _text(read, "sampling_parameters", MAX_JSON_BYTES)
    if not text:
        return {}
    if _depth(text) > MAX_JSON_DEPTH:
        raise BadRequest(f"sampling_parameters nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        given = json.loads(text)
    except Exception as exc:  # whatever the parser raises is said in one line
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise BadRequest(f"sampling_parameters is not JSON: {reason}") from None
    if not isinstance(given, dict):
        raise BadRequest("sampling_parameters must be a JSON object")
    return given


def _own(read: Read, control: Control) -> Any:
    """The raw value of the control's own input, or _ABSENT."""
    array = read(control.name)
    if array is None:
        return _ABSENT
    if control.multiple:  # counted before the strings are decoded
        items = _items(array, control.name, array.size if control.maximum is None else int(control.maximum))
        return [_decode(item, f"{control.name}[{i}]") for i, item in enumerate(items)]
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
    prompts = _prompts(read, max_prompt_bytes)
    controls = _controls(read)
    return Inputs(prompts, controls, _text(read, "id") or "", _flag(read, "exclude_input_in_output"),
                  _flag(read, "stream"), key)


def _which(index: int, count: int) -> str:
    """``prompt 2 of 3`` (1-based, as the console numbers them), or ``the prompt``."""
    return f"prompt {index + 1} of {count}" if count > 1 else "the prompt"


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
