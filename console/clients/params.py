"""The controls table: the controls of the schema (``backend_model.contract.controls``) the consoles offer.

The click options, the TUI fields and the web controls are made from :data:`CONTROLS`, a view over the schema's offered
rows; a request (:class:`GenerationParams`) may also set ``logprobs``, ``structured_outputs`` and ``lora_name``
(:data:`BY_NAME`: the OpenAI front asks for them), and the wire inputs are made from those it sets. :func:`check` and
:func:`parse` apply a row's rule and name the control by its label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backend_model.contract import controls as schema
from backend_model.contract import errors as backend
from backend_model.contract.controls import Control

from .errors import BadRequest

CONTROLS: tuple[Control, ...] = tuple(c for c in schema.CONTROLS if c.offered)
REQUEST_ONLY = ("logprobs", "structured_outputs", "lora_name")  # no form offers them: the OpenAI front sets them
# (lora_name: the LoRA adapter a request names as its model, or a console's model picker)
MESSAGES = "messages"  # the bundled backend's input of conversations it renders with the model's chat template
EXTRAS = ("request_id", "status_key", "continuations", "chats", "images")  # what a request carries besides controls
BY_NAME: dict[str, Control] = {c.name: c for c in schema.CONTROLS if c.offered or c.name in REQUEST_ONLY}


def check(control: Control, value: Any) -> Any:
    """``value`` as the control's type (None: not set); ClientError naming the control."""
    try:
        return control.check(value, control.label)
    except backend.BadRequest as exc:  # the backend's (it shares the rule), as the console's
        raise BadRequest(str(exc)) from None


def parse(control: Control, text: str) -> Any:
    """A form field's text as a checked value (blank: not set); ClientError naming the control."""
    try:
        return control.parse(text, control.label)
    except backend.BadRequest as exc:  # the backend's (it shares the rule), as the console's
        raise BadRequest(str(exc)) from None


def _checked(values: Mapping[str, Any]) -> dict[str, Any]:
    """Each value by its control's rule (None: unset); ClientError for a name that is no control."""
    unknown = set(values) - set(BY_NAME)
    if unknown:
        raise BadRequest(f"unknown control {sorted(unknown)[0]!r} (controls: {', '.join(BY_NAME)})")
    return {n: check(BY_NAME[n], v) for n, v in values.items()}


class GenerationParams:
    """The controls a request sets (checked once, when made; unset ones are absent), the request id and the
    status key.

    ``GenerationParams(max_tokens=16, temperature=0.7)``; ``params.max_tokens`` reads a control
    (None when unset); :meth:`replace` makes a changed copy (checking only what changed).
    """

    __slots__ = ("values", "request_id", "status_key", "continuations", "chats", "images")

    def __init__(self, values: Mapping[str, Any] | None = None, request_id: str | None = None,
                 status_key: str | None = None, continuations: tuple[str | list[int], ...] | None = None,
                 chats: bool = False, images: tuple[bytes, ...] = (), **controls: Any) -> None:
        checked = _checked({**(values or {}), **controls})
        self.values: dict[str, Any] = {n: v for n, v in checked.items() if v is not None}
        self.request_id = request_id  # sent as Triton's request id (and the generate ``id``)
        self.status_key = status_key  # sent as ``status_key`` where the model has it: status questions bring it
        self.continuations = continuations  # per prompt, text or token ids to score instead of generating
        self.chats = chats  # the prompts are conversations (JSON) the model's chat template renders: sent as MESSAGES
        self.images = images  # the one prompt's images, each its encoded bytes (the interface's image input)

    @classmethod
    def from_checked(cls, values: Mapping[str, Any]) -> GenerationParams:
        """From values :func:`check` or :func:`parse` made (None: unset), not checked again."""
        params = cls()
        params.values = {n: v for n, v in values.items() if v is not None}
        return params

    def __getattr__(self, name: str) -> Any:
        if name in BY_NAME:
            return self.values.get(name)
        raise AttributeError(name)

    def get(self, name: str) -> Any:
        """A control's value, or None when unset."""
        return self.values.get(name)

    def replace(self, **changes: Any) -> GenerationParams:
        """A copy with these fields or controls changed (a control set to None is unset)."""
        fields = {k: changes.pop(k, getattr(self, k)) for k in EXTRAS}
        copy = GenerationParams.from_checked({**self.values, **_checked(changes)})
        for name, value in fields.items():
            setattr(copy, name, value)
        return copy

    def _key(self) -> tuple[Any, ...]:
        return self.values, *(getattr(self, k) for k in EXTRAS)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GenerationParams) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = {"request_id": self.request_id, "status_key": "..." if self.status_key else None}  # a secret
        shown = {**self.values, **{k: v for k, v in extra.items() if v is not None}}
        return f"GenerationParams({', '.join(f'{k}={v!r}' for k, v in shown.items())})"
