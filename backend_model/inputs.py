"""A request's inputs, read and checked: the bundled interface and the Triton vLLM backend's names.

The bundled interface takes ``prompt`` (one or more prompts) and each control as its own input
(``max_tokens``, ``temperature`` ...). The Triton vLLM backend's names are accepted too, so NVIDIA's
tools (genai-perf ``--backend vllm``, AIPerf) run against this model unmodified: ``text_input`` (one
prompt), ``stream`` (BOOL), ``sampling_parameters`` (a JSON object of the same controls) and
``exclude_input_in_output``. ``status_of`` (a request id) asks whether that request is running here.

Free of ``triton_python_backend_utils``: ``read(name)`` gives an input's array, or None when absent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from .sampling import BadRequest, SamplingParams

MAX_PROMPTS = 256
CONTROLS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "repetition_penalty", "min_tokens", "ignore_eos")
INTEGERS = ("max_tokens", "top_k", "seed", "min_tokens")
Read = Callable[[str], Optional[np.ndarray]]


@dataclass
class Inputs:
    """What a request asks for (prompts not yet tokenized)."""

    prompts: list[str] = field(default_factory=list)
    controls: dict[str, Any] = field(default_factory=dict)
    stop: list[str] = field(default_factory=list)
    request_id: str = ""  # the ``id`` input (the generate endpoint's "id")
    exclude_input: bool | None = None
    stream: bool | None = None  # None: the model's transaction policy decides
    status_of: str | None = None

    def params(self) -> SamplingParams:
        """The checked sampling parameters (BadRequest names the bad one)."""
        given = {k: v for k, v in self.controls.items() if v is not None}
        if given.get("max_tokens") == 0:  # 0 asks for the default: until EOS or ctx_len
            del given["max_tokens"]
        return SamplingParams(**given, stop=tuple(self.stop))


def _strings(read: Read, name: str) -> list[str] | None:
    array = read(name)
    if array is None:
        return None
    out = []
    for i, item in enumerate(array.reshape(-1)):
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadRequest(f"{name}[{i}] is not valid UTF-8 (byte {exc.start})") from None
        out.append(str(item))
    return out


def _scalar(read: Read, name: str) -> Any:
    array = read(name)
    if array is None:
        return None
    values = array.reshape(-1)
    if values.size != 1:
        raise BadRequest(f"{name} takes one value, got {values.size}")
    return values[0].item()


def _sampling_parameters(read: Read) -> dict[str, Any]:
    """The vLLM backend's ``sampling_parameters`` JSON: the controls it shares with this backend."""
    texts = _strings(read, "sampling_parameters")
    if not texts:
        return {}
    try:
        given = json.loads(texts[0])
    except ValueError as exc:
        raise BadRequest(f"sampling_parameters is not JSON: {exc}") from None
    if not isinstance(given, dict):
        raise BadRequest("sampling_parameters must be a JSON object")
    out = {k: _number(k, given[k]) for k in CONTROLS if k in given}
    if "stop" in given:
        stop = given["stop"]
        out["stop"] = [stop] if isinstance(stop, str) else stop
    return out


def _number(name: str, value: Any) -> Any:
    """A JSON value as its control's type: genai-perf sends numbers as strings (``"max_tokens": "16"``)."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if name == "ignore_eos" and text in ("true", "false"):
        return text == "true"
    try:
        return int(text) if name in INTEGERS else float(text)
    except ValueError:
        return value  # SamplingParams names the bad value


def read_inputs(read: Read) -> Inputs:
    """The request's inputs; BadRequest (a message for the client) when they cannot be used."""
    status_of = _strings(read, "status_of")
    if status_of:
        return Inputs(status_of=status_of[0])
    prompts = _strings(read, "prompt")
    if prompts is None:
        prompts = _strings(read, "text_input")
    if not prompts:
        raise BadRequest("no prompt given (the input 'prompt', or 'text_input')")
    if len(prompts) > MAX_PROMPTS:
        raise BadRequest(f"at most {MAX_PROMPTS} prompts per request, got {len(prompts)}")
    for i, prompt in enumerate(prompts):
        if not prompt.strip():
            raise BadRequest(f"{_which(i, len(prompts))} is empty")
    shared = _sampling_parameters(read)
    controls = {name: shared.get(name) for name in CONTROLS}
    for name in CONTROLS:  # an input of its own wins over sampling_parameters
        value = _scalar(read, name)
        if value is not None:
            controls[name] = value
    ids = _strings(read, "id")
    stop = _strings(read, "stop")
    if stop is None:
        stop = shared.get("stop") or []
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise BadRequest(f"stop must be a list of strings, got {stop!r}")
    exclude, stream = _scalar(read, "exclude_input_in_output"), _scalar(read, "stream")
    return Inputs(prompts, controls, stop, (ids[0] if ids else "") or "",
                  None if exclude is None else bool(exclude), None if stream is None else bool(stream))


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
