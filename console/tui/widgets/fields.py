"""Form helpers: a labelled one-line row, and a text field whose old value typing replaces."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual import events
from textual.containers import Horizontal
from textual.validation import ValidationResult, Validator
from textual.widget import Widget
from textual.widgets import Input, Label

from console.clients import ClientError


def row(label: str, widget: Widget) -> Horizontal:
    """``label`` and ``widget`` side by side, one line high (compact widgets)."""
    return Horizontal(Label(label, classes="field-label"), widget, classes="field")


class Field(Input):
    """An Input whose whole value is selected when it gets focus, by Tab, by a key or by a click, so typing
    replaces it ("100", not "70100"); once focused, clicks and arrows edit as usual.

    Textual calls these handlers before Input's own ones of the same name.
    """

    _fresh = False  # focus just came: the click that brought it must not drop the selection

    def _on_focus(self, event: events.Focus) -> None:
        self._fresh = True  # Input's handler then selects the value

    def _on_blur(self, event: events.Blur) -> None:
        self._fresh = False

    async def _on_key(self, event: events.Key) -> None:
        self._fresh = False

    async def _on_mouse_down(self, event: events.MouseDown) -> None:
        if self._fresh:  # Input's handler will put the cursor where the click was: select after it
            self._fresh = False
            self.call_next(self.select_all)


def value(widget: Widget, selector: str) -> str:
    """The stripped value of the Input ``selector`` under ``widget``."""
    return widget.query_one(selector, Input).value.strip()


class Checked(Validator):
    """Valid when ``check(text)`` takes the text; else its ClientError says why (shown as it is typed)."""

    def __init__(self, check: Callable[[str], Any]) -> None:
        super().__init__()
        self.check = check

    def validate(self, value: str) -> ValidationResult:
        try:
            self.check(value)
        except ClientError as exc:
            return self.failure(str(exc))
        return self.success()
