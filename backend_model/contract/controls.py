"""The generation controls: the one list qaic-console's inputs, checks, options and fields are made from.

A :class:`Control` row says what a control is (name, type, range, help and label), what the consoles
fill in, and how it travels: its Triton datatype and dims, and whether vLLM's ``sampling_parameters``
JSON carries it too. A control is a number, a switch, a list of strings (``stop``), one string
(``lora_name``) or a JSON object (``structured_outputs``, checked for its size and depth before it is parsed).
From :data:`CONTROLS` come the generated ``config.pbtxt`` inputs (``repo_gen.writer``), the backend's parser and checks
(``triton.inputs``), and the consoles' table, CLI options, TUI fields and web inputs of the offered rows
(``console.clients.params``, ``console.core.controls``). Adding a control is one row here plus its
effect in the engine (``engine.sampling``, or ``engine.loop`` for what is not sampling).

Standard library only, Python 3.8: it is copied into every model and the generator ships it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from .errors import BadRequest
from .parameters import BOOLEANS, TRUE

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_TEXT = 256  # characters in one string of a list control (a stop string)
MAX_JSON_BYTES = 64 * 1024  # a JSON text the backend parses (sampling_parameters, a JSON control)
MAX_JSON_DEPTH = 32
DATATYPES = {int: ("INT64", "INT32"), float: ("FP32",), bool: ("BOOL",), str: ("BYTES",), dict: ("BYTES",)}
KIND_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "text", dict: "a JSON object"}
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _depth(text: str) -> int:
    """How deep a JSON text nests (brackets inside strings do not count)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def json_object(text: str, name: str) -> dict:
    """``text`` parsed as a JSON object; its size and depth are checked before parsing (BadRequest naming ``name``)."""
    size = len(text.encode("utf-8"))
    if size > MAX_JSON_BYTES:
        raise BadRequest(f"{name} is {size} bytes, over the {MAX_JSON_BYTES} this model reads")
    if _depth(text) > MAX_JSON_DEPTH:
        raise BadRequest(f"{name} nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        given = json.loads(text)
    except Exception as exc:  # whatever the parser raises is said in one line
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise BadRequest(f"{name} is not JSON: {reason}") from None
    if not isinstance(given, dict):
        raise BadRequest(f"{name} must be a JSON object")
    return given


def _number(value: float) -> str:
    """A bound as written: ``0``, ``2147483647``, ``0.5``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Control:
    """One generation control. ``kind``: int, float, bool or str (str: a list of strings, e.g. stop strings, unless
    ``single``: one string, e.g. an adapter's name)."""

    name: str
    kind: type
    datatype: str  # the Triton datatype on the wire (a list travels with dims [-1], the others [1])
    label: str
    help: str
    default: Any = None  # what the consoles fill in; None: not sent (the model's default)
    minimum: float | None = None
    maximum: float | None = None  # a list: the most strings it takes
    above: bool = False  # the minimum itself is not allowed
    zero_means_all: bool = False  # 0 asks for as many as the context allows (an unset value: the model's default)
    vllm: bool = True  # also read from vLLM's ``sampling_parameters`` JSON
    offered: bool = True  # the consoles offer it (False: the backend reads it, for other tools)
    single: bool = False  # a str control that takes one string (dims [1]; empty: not set)

    def __post_init__(self) -> None:
        if self.datatype not in DATATYPES[self.kind]:
            raise ValueError(f"control {self.name}: a {self.kind.__name__} travels as {DATATYPES[self.kind]}")

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def multiple(self) -> bool:
        return self.kind is str and not self.single

    @property
    def dims(self) -> tuple[int, ...]:
        return (-1,) if self.multiple else (1,)

    def rule(self) -> str:
        """The allowed values in words."""
        if self.multiple:
            most = "" if self.maximum is None else f"up to {_number(self.maximum)} "
            return f"{most}non-empty strings of at most {MAX_TEXT} characters"
        if self.kind is str:
            return f"one string of at most {MAX_TEXT} characters"
        low = "" if self.minimum is None else f"{'>' if self.above else '>='} {_number(self.minimum)}"
        high = "" if self.maximum is None else f"<= {_number(self.maximum)}"
        return " ".join(p for p in (KIND_WORDS[self.kind], low, "and" if low and high else "", high) if p)

    def _bad(self, value: Any, who: str | None) -> BadRequest:
        shown = f"{value:g}" if isinstance(value, float) else repr(value)  # 2.0 is shown 2, as typed
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return BadRequest(f"{who or self.name} must be {self.rule()}, got {shown}")

    def check(self, value: Any, who: str | None = None) -> Any:
        """``value`` as this control's type, or None (not set); BadRequest naming ``who`` (default: the name).

        Integers are compared before any cast: a value out of range is refused, never wrapped. A JSON object
        comes as a dict or as its text (the backend's own input).
        """
        if value is None or (self.multiple and isinstance(value, (list, tuple)) and not value):
            return None
        if self.multiple:
            return self._strings(value, who)
        if self.kind is dict:
            return self._object(value, who)
        if self.kind is str:
            if not isinstance(value, str) or len(value) > MAX_TEXT:
                raise self._bad(value, who)
            return value or None
        if self.kind is bool:
            if not isinstance(value, bool):
                raise self._bad(value, who)
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._bad(value, who)
        if isinstance(value, float) and not math.isfinite(value):
            raise self._bad(value, who)
        if self.kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise self._bad(value, who)
            value = int(value)
        else:
            value = float(value)
        low_ok = self.minimum is None or (value > self.minimum if self.above else value >= self.minimum)
        if not low_ok or (self.maximum is not None and value > self.maximum):
            raise self._bad(value, who)
        return value

    def _strings(self, value: Any, who: str | None) -> tuple[str, ...]:
        items = (value,) if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or (self.maximum is not None and len(items) > self.maximum):
            raise self._bad(value, who)
        if not all(isinstance(v, str) and 0 < len(v) <= MAX_TEXT for v in items):
            raise self._bad(value, who)
        return tuple(items)

    def _object(self, value: Any, who: str | None) -> dict | None:
        if isinstance(value, dict):  # parsed already: its size as text is checked all the same
            value = json.dumps(value)
        if not isinstance(value, str):
            raise self._bad(value, who)
        return json_object(value, who or self.name) if value.strip() else None

    def wire(self, value: Any) -> tuple[Any, ...]:
        """A set value as the values of its Triton input (a JSON object as its text)."""
        if self.multiple:
            return tuple(value)
        return (json.dumps(value),) if self.kind is dict else (value,)

    def parse(self, text: str, who: str | None = None) -> Any:
        """Text (a form field, genai-perf's JSON strings) as a checked value; blank: not set.

        A list takes ``a|b``; a number any decimal notation; a switch true/false, 1/0 or yes/no.
        """
        text = text.strip()
        if not text:
            return None
        if self.multiple:
            return self.check(tuple(p for p in text.split("|") if p), who)
        if self.kind in (dict, str):
            return self.check(text, who)
        if self.kind is bool:
            if text.lower() not in BOOLEANS:
                raise self._bad(text, who)
            return text.lower() in TRUE
        try:
            number = int(text) if self.kind is int and text.lstrip("+-").isdigit() else float(text)
        except (ValueError, OverflowError):
            raise BadRequest(f"{who or self.name}: {text[:40]!r} is not a number") from None
        return self.check(number, who)


CONTROLS: tuple[Control, ...] = (
    Control("max_tokens", int, "INT64", "Max tokens", "Tokens to generate per prompt (0: up to the model's context "
            "length).", default=128, minimum=0, maximum=INT32_MAX, zero_means_all=True),
    Control("temperature", float, "FP32", "Temperature", "Sampling temperature (0: greedy, the default).", minimum=0),
    Control("top_p", float, "FP32", "Top p", "Nucleus sampling: keep the most likely tokens up to this probability.",
            minimum=0, maximum=1, above=True),
    Control("top_k", int, "INT64", "Top k", "Sample from the k most likely tokens (0: all).", minimum=0,
            maximum=INT32_MAX),
    Control("seed", int, "INT64", "Seed", "Sampling seed (any integer >= 0; 0 is a seed too).", minimum=0,
            maximum=INT64_MAX),
    Control("repetition_penalty", float, "FP32", "Repetition penalty", "Penalise tokens already seen (1: none).",
            minimum=0, above=True),
    Control("min_tokens", int, "INT64", "Min tokens", "Tokens before an end-of-sequence may end a reply (benchmarks: "
            "equal to max tokens for fixed lengths).", minimum=0, maximum=INT32_MAX),
    Control("stop", str, "BYTES", "Stop", "Stop string, not included in the output (repeatable; a|b in forms).",
            maximum=16),
    # genai-perf's fixed output lengths send it; the consoles get the same with min tokens = max tokens
    Control("ignore_eos", bool, "BOOL", "Ignore EOS", "Generate to max tokens whatever the model says.",
            offered=False),
    # the OpenAI front and accuracy checks ask for these; the consoles show no log-probabilities or grammars
    Control("logprobs", int, "INT64", "Logprobs", "Return each generated token's log-probability and this many "
            "most likely alternatives (0: the chosen token's only).", minimum=0, maximum=20, offered=False),
    Control("structured_outputs", dict, "BYTES", "Structured outputs", "Constrain the reply (vLLM's "
            'StructuredOutputsParams): {"json": <schema>}, {"json_object": true}, {"regex": "<pattern>"} or '
            '{"choice": [...]}.',
            offered=False),
    # a LoRA adapter the model serves (config.pbtxt's lora_adapters); the front maps model="<adapter>" to it, the
    # consoles' model pickers set it
    Control("lora_name", str, "BYTES", "Adapter", "The LoRA adapter that answers (blank: the base model).",
            single=True, offered=False),
)
BY_NAME: dict[str, Control] = {c.name: c for c in CONTROLS}
