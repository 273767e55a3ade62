"""Small layout helpers shared by the forms."""

from __future__ import annotations

from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import Label


def row(label: str, widget: Widget) -> Horizontal:
    """``label`` and ``widget`` side by side, one line high (compact widgets)."""
    return Horizontal(Label(label, classes="field-label"), widget, classes="field")


def text(widget: Widget, selector: str) -> str:
    """The stripped value of the Input ``selector`` under ``widget``."""
    from textual.widgets import Input

    return widget.query_one(selector, Input).value.strip()
