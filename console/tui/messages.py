"""The messages the TUI's widgets post; workers post them from their threads (``post_message`` is thread-safe)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.message import Message

from console.clients import Event
from console.core.controller import Snapshot
from console.core.request import Exchange


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
    """An event of ``exchange``'s call, already folded into its turn."""

    exchange: Exchange
    event: Event


@dataclass
class TurnEnded(Message):
    """``exchange``'s call is over (answered, failed or stopped)."""

    exchange: Exchange


@dataclass
class TemplateLoaded(Message):
    """The chat template for ``key`` (model, tokenizer folder) is loaded, or ``error`` says why not."""

    key: tuple[str, str]
    error: str = ""


@dataclass
class Generated(Message):
    """The generator form wrote the model folder ``path``."""

    path: Path
