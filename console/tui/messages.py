"""Messages the panes send up to the app."""

from __future__ import annotations

from textual.message import Message

from console.clients import ModelInfo


class Notice(Message):
    """Something the user should see as a notification (``severity``: information, warning, error)."""

    def __init__(self, text: str, severity: str = "information") -> None:
        super().__init__()
        self.text, self.severity = text, severity


class Connected(Message):
    """The server at these endpoints serves ``models`` (the READY ones)."""

    def __init__(self, http_url: str, grpc_url: str | None, models: dict[str, ModelInfo]) -> None:
        super().__init__()
        self.http_url, self.grpc_url, self.models = http_url, grpc_url, models


class Disconnected(Message):
    """No server to talk to any more (stopped, died, or another one is being set up)."""
