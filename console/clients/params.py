"""The controls table: every optional generation input the consoles offer, in one place.

Each :class:`Control` names a model input (the bundled backend's name), its Triton type, the
consoles' default, the allowed range and the help text. The click options, the TUI fields, the web
controls, the wire inputs and the validation are all made from :data:`CONTROLS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ClientError


@dataclass(frozen=True)
class Control:
    """One optional input. ``kind`` int, float or str (str: a list of strings, e.g. stop strings)."""

    name: str
    kind: type
    wire: str  # Triton datatype on the wire: INT32, INT64, FP32, BYTES
    label: str
    help: str
    default: Any = None  # what the consoles fill in; None: not sent (the model's default)
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False  # the minimum itself is not allowed
    zero_means_default: bool = False  # 0 asks for the model's default (sent as nothing)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def multiple(self) -> bool:
        return self.kind is str

    def rule(self) -> str:
        """The allowed values in words."""
        what = {int: "an integer", float: "a number", str: "text"}[self.kind]
        low = "" if self.minimum is None else f"{'>' if self.above else '>='} {self.minimum:g}"
        high = "" if self.maximum is None else f"<= {self.maximum:g}"
        return " ".join(p for p in (what, low, "and" if low and high else "", high) if p)

    def check(self, value: Any) -> Any:
        """``value`` as this control's type; ClientError naming the control. None: not set."""
        if value is None or (self.multiple and not value):
            return None
        if self.multiple:
            items = (value,) if isinstance(value, str) else tuple(value)
            if not all(isinstance(v, str) and v for v in items):
                raise ClientError(f"{self.label}: each value must be non-empty text")
            return items
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ClientError(f"{self.label} must be {self.rule()}, got {value!r}")
        if self.kind is int:
            if not float(value).is_integer():
                raise ClientError(f"{self.label} must be {self.rule()}, got {value!r}")
            value = int(value)
        else:
            value = float(value)
            if not math.isfinite(value):
                raise ClientError(f"{self.label} must be {self.rule()}, got {value!r}")
        low_ok = self.minimum is None or (value > self.minimum if self.above else value >= self.minimum)
        if not low_ok or (self.maximum is not None and value > self.maximum):
            raise ClientError(f"{self.label} must be {self.rule()}, got {value:g}")
        return None if self.zero_means_default and value == 0 else value

    def parse(self, text: str) -> Any:
        """A form field's text as a checked value (blank: not set)."""
        text = text.strip()
        if not text:
            return None
        if self.multiple:
            return self.check(tuple(p for p in text.split("|") if p))
        try:
            number = float(text)
        except ValueError:
            raise ClientError(f"{self.label}: {text!r} is not a number") from None
        return self.check(number)


CONTROLS: tuple[Control, ...] = (
    Control("max_tokens", int, "INT32", "Max tokens", "Tokens to generate per prompt (0: up to the model's context "
            "length).", default=128, minimum=0, zero_means_default=True),
    Control("temperature", float, "FP32", "Temperature", "Sampling temperature (0: greedy, the default).", minimum=0),
    Control("top_p", float, "FP32", "Top p", "Nucleus sampling: keep the most likely tokens up to this probability.",
            minimum=0, maximum=1, above=True),
    Control("top_k", int, "INT32", "Top k", "Sample from the k most likely tokens (0: all).", minimum=0),
    Control("seed", int, "INT64", "Seed", "Sampling seed (any integer >= 0; 0 is a seed too).", minimum=0),
    Control("repetition_penalty", float, "FP32", "Repetition penalty", "Penalise tokens already seen (1: none).",
            minimum=0, above=True),
    Control("min_tokens", int, "INT32", "Min tokens", "Tokens before an end-of-sequence may end a reply (benchmarks: "
            "equal to max tokens for fixed lengths).", minimum=0),
    Control("stop", str, "BYTES", "Stop", "Stop string, not included in the output (repeatable; a|b in forms)."),
)
BY_NAME: dict[str, Control] = {c.name: c for c in CONTROLS}


class GenerationParams:
    """The controls a request sets (checked; unset ones are absent), the echo choice and the request id.

    ``GenerationParams(max_tokens=16, temperature=0.7)``; ``params.max_tokens`` reads a control
    (None when unset); :meth:`replace` makes a changed copy.
    """

    __slots__ = ("values", "exclude_input_in_output", "request_id")

    def __init__(self, values: Mapping[str, Any] | None = None, exclude_input_in_output: bool | None = None,
                 request_id: str | None = None, **controls: Any) -> None:
        merged = {**(values or {}), **controls}
        unknown = set(merged) - set(BY_NAME)
        if unknown:
            raise ClientError(f"unknown control {sorted(unknown)[0]!r} (controls: {', '.join(BY_NAME)})")
        checked = {n: BY_NAME[n].check(v) for n, v in merged.items()}
        self.values: dict[str, Any] = {n: v for n, v in checked.items() if v is not None}
        self.exclude_input_in_output = exclude_input_in_output
        self.request_id = request_id  # sent as Triton's request id (and the generate ``id``)

    def __getattr__(self, name: str) -> Any:
        if name in BY_NAME:
            return self.values.get(name)
        raise AttributeError(name)

    def get(self, name: str) -> Any:
        """A control's value, or None when unset."""
        return self.values.get(name)

    def replace(self, **changes: Any) -> GenerationParams:
        """A copy with these fields or controls changed (a control set to None is unset)."""
        exclude = changes.pop("exclude_input_in_output", self.exclude_input_in_output)
        request_id = changes.pop("request_id", self.request_id)
        return GenerationParams({**self.values, **changes}, exclude, request_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GenerationParams) and (self.values, self.exclude_input_in_output,
                                                         self.request_id) == (other.values,
                                                                              other.exclude_input_in_output,
                                                                              other.request_id)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = {"exclude_input_in_output": self.exclude_input_in_output, "request_id": self.request_id}
        shown = {**self.values, **{k: v for k, v in extra.items() if v is not None}}
        return f"GenerationParams({', '.join(f'{k}={v!r}' for k, v in shown.items())})"
