"""The request settings of a chat pane: model, timeout, sampling, system prompt, chat template."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Checkbox, Input, Label, Select

from console.clients import ClientError, GenerationParams
from console.headless import DEFAULT_MAX_TOKENS

from .fields import row

# (id, label, placeholder, parser) of the numeric fields; blank leaves the model's default
_NUMBERS: tuple[tuple[str, str, str, type], ...] = (
    ("timeout", "Timeout s", "model default", float),
    ("max_tokens", "Max tokens", "context length", int),
    ("temperature", "Temperature", "0 = greedy", float),
    ("top_p", "Top p", "model default", float),
    ("top_k", "Top k", "model default", int),
    ("seed", "Seed", "random", int),
)


@dataclass(frozen=True)
class Settings:
    """What one submit sends; ``timeout`` None: the model's default (600 s KV, 6000 s causal), 0: none."""

    model: str
    timeout: float | None
    params: GenerationParams
    system: str
    chat: bool
    tokenizer: str


class Controls(VerticalScroll):
    """The settings sidebar of one chat pane."""

    def compose(self) -> ComposeResult:
        yield Label("Controls", classes="title")
        yield row("Model", Select([], id="model", prompt="(not connected)", compact=True))
        for key, label, hint, kind in _NUMBERS:
            value = str(DEFAULT_MAX_TOKENS) if key == "max_tokens" else ""
            yield row(label, Input(value, placeholder=hint, id=key, compact=True,
                                    type="integer" if kind is int else "number"))
        yield row("System", Input(placeholder="system prompt", id="system", compact=True))
        yield Checkbox("Chat template + history", True, id="chat", compact=True)
        yield row("Tokenizer", Input(placeholder="embedded: built in", id="tokenizer", compact=True))

    def set_models(self, names: list[str], default: str | None) -> None:
        """Offer ``names``; keep the current choice when it is still served, else ``default``."""
        select: Select[str] = self.query_one("#model", Select)
        current = select.value
        select.set_options([(n, n) for n in names])
        if current in names:
            select.value = current
        elif default in names:
            select.value = default
        elif names:
            select.value = names[0]

    @property
    def chat(self) -> bool:
        """Chat-template mode (else raw prompts)."""
        return self.query_one("#chat", Checkbox).value

    def toggle_chat(self) -> bool:
        """Flip chat-template mode; the new value."""
        box = self.query_one("#chat", Checkbox)
        box.value = not box.value
        return box.value

    def set_value(self, key: str, value: str) -> None:
        """Set a field by id (``max_tokens``, ``timeout``, ...)."""
        widget = self.query_one(f"#{key}")
        if isinstance(widget, Checkbox):
            widget.value = value.lower() in ("1", "true", "yes", "on")
        else:
            widget.value = value  # type: ignore[attr-defined]

    def settings(self) -> Settings:
        """The current settings; ClientError naming the bad field."""
        model = self.query_one("#model", Select).value
        if not isinstance(model, str):
            raise ClientError("no model chosen: connect to a server or start one on the Server pane (F2)")
        numbers: dict[str, float | int | None] = {}
        for key, label, _, kind in _NUMBERS:
            text = self.query_one(f"#{key}", Input).value.strip()
            try:
                numbers[key] = kind(text) if text else None
            except ValueError:
                raise ClientError(f"{label}: {text!r} is not a{'n integer' if kind is int else ' number'}") from None
            if numbers[key] is not None and numbers[key] < 0 and key != "seed":  # type: ignore[operator]
                raise ClientError(f"{label} must be >= 0, got {text}")
        timeout = numbers.pop("timeout")
        numbers["max_tokens"] = numbers["max_tokens"] or None  # 0: up to the context length
        return Settings(
            model=model,
            timeout=None if timeout is None else float(timeout),
            params=GenerationParams(**numbers),  # type: ignore[arg-type]
            system=self.query_one("#system", Input).value.strip(),
            chat=self.query_one("#chat", Checkbox).value,
            tokenizer=self.query_one("#tokenizer", Input).value.strip(),
        )
