"""The messages the TUI's widgets post; workers post them from their threads (``post_message`` is thread-safe)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.message import Message

from console.core.controller import Snapshot
from console.core.request import Exchange, Step


@dataclass
class Notice(Message):
    """Something the user should see as a notification (``severity``: information, warning, error)."""

    text: str
    severity: str = "information"


@dataclass
class ServerChanged(Message):
    """The server controller has a new snapshot (the pane renders it; the app tells the chat panes)."""

    snapshot: Snapshot


@dataclass
class ServerLog(Message):
    """A line of the server's log (the controller already dropped a GPU-less machine's noise)."""

    line: str


@dataclass
class ServerDown(Message):
    """The tritonserver started here is down (the app may close)."""


@dataclass
class TurnEvent(Message):
    """A step of ``exchange`` (the request sent, an event of its call), to fold into its turn on the UI thread."""

    exchange: Exchange
    step: Step


@dataclass
class TurnEnded(Message):
    """``exchange``'s call is over (answered, failed or stopped)."""

    exchange: Exchange


@dataclass
class TemplateLoaded(Message):
    """The chat template for ``key`` (model, tokenizer folder) is loaded, or could not be (its Warmup says)."""

    key: tuple[str, str]


@dataclass
class Generated(Message):
    """The generator form wrote the model folder ``path``."""

    path: Path
