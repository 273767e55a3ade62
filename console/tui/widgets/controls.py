"""A chat pane's controls: the model, the timeout, one field per entry of the controls table, the system prompt,
the chat template and its tokenizer. Each pane has its own.

Every field is checked as it is typed, by its row's rule: the line under the fields shows the focused field's rule,
or why its value is refused (a letter in a number field is shown and refused, not dropped).
"""

from __future__ import annotations

from functools import partial

from textual import events, on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Checkbox, Input, Label, Select, Static

from console.clients import CONTROLS, ClientError, ModelInfo, interface_of
from console.clients.params import parse
from console.core.controls import TIMEOUT_RULE, form_default, form_placeholder, settings_from_form, timeout_seconds
from console.core.request import Settings

from .fields import Checked, Field, row, value

OTHER_PANE = {"stream": "Batch (F4)", "batch": "Stream (F3)"}
BACK = "Ctrl+O or Enter: back to the message"


def control_id(name: str) -> str:
    """The id of a control's field (``control-max_tokens``)."""
    return f"control-{name}"


def offered(mode: str, info: ModelInfo) -> bool:
    """Whether a pane offers the model: one whose interface the console speaks; batch: one that can answer once."""
    try:
        interface_of(info)
    except ClientError:
        return False
    return mode == "stream" or "batch" in info.modes


def model_options(mode: str, infos: dict[str, ModelInfo]) -> list[tuple[str, str]]:
    """(label, name) for the model select: the pane's own kind first, the others say what they are; a model's LoRA
    adapters under it."""
    def label(info: ModelInfo) -> str:
        if info.adapter:
            return f"  {info.adapter} · LoRA adapter of {info.name}"
        notes = ["batch model: one response"] if mode == "stream" and not info.decoupled else []
        notes += [] if info.use_kv_cache else ["causal: slow on a CPU"]
        return " · ".join([info.name, *notes])

    ordered = sorted(infos.values(), key=lambda i: (mode == "stream" and not i.decoupled, i.name, bool(i.adapter)))
    return [(label(info), info.choice) for info in ordered]


class Controls(VerticalScroll, can_focus=False):
    """The settings of one chat pane (``mode`` stream or batch); Ctrl+O focuses them, Tab walks them."""

    def __init__(self, mode: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.mode = mode

    def compose(self) -> ComposeResult:
        yield Label(f"{self.mode.title()} controls (this pane only)", classes="title")
        yield Static(f"{OTHER_PANE[self.mode]} has its own. Ctrl+O comes here; blank asks the model's default.",
                     classes="controls-note")
        yield row("Model", Select([], id="model", prompt="(not connected)", compact=True))
        yield row("Timeout s", Field(placeholder="model default", id="timeout", compact=True,
                                     tooltip=f"Seconds for the whole call: {TIMEOUT_RULE}.",
                                     validators=[Checked(timeout_seconds)], validate_on=["changed"]))
        for control in CONTROLS:
            yield row(control.label, Field(form_default(control), placeholder=form_placeholder(control),
                                           id=control_id(control.name), compact=True, tooltip=control.help,
                                           validators=[Checked(partial(parse, control))], validate_on=["changed"]))
        yield row("System", Field(placeholder="with the chat template", id="system", compact=True))
        yield Checkbox("Chat template + history", True, id="chat", compact=True,
                       tooltip="The model's chat template, when it has one here (off: the prompt as typed).")
        yield row("Tokenizer", Field(placeholder="embedded: built in", id="tokenizer", compact=True,
                                     tooltip="Local tokenizer folder whose chat template the model uses."))
        yield Static(BACK, id="control-rule", classes="controls-note")

    # ---- each field's rule, and why a value is refused, as it is typed

    def rule_of(self, field_id: str | None) -> str:
        """The rule of the field ``field_id`` in words ('' for a field without one)."""
        if field_id == "timeout":
            return f"Timeout s: {TIMEOUT_RULE}"
        control = next((c for c in CONTROLS if control_id(c.name) == field_id), None)
        return f"{control.label}: {control.rule()}" if control else ""

    def _explain(self, field: Input) -> None:
        result = field.validate(field.value)
        refused = result is not None and not result.is_valid
        said = f"✖ {result.failure_descriptions[0]}" if refused else self.rule_of(field.id)  # type: ignore[union-attr]
        line = self.query_one("#control-rule", Static)
        line.update(Content(f"{said} · {BACK}" if said else BACK))
        line.set_class(refused, "refused")

    @on(events.DescendantFocus)
    def _focused(self, event: events.DescendantFocus) -> None:
        if isinstance(event.widget, Input):
            self._explain(event.widget)

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        if event.input.has_focus:
            self._explain(event.input)


    # ---- the model

    def set_models(self, options: list[tuple[str, str]], default: str | None) -> None:
        """Offer ``options`` (label, name); keep the current choice when it is still served, else ``default``."""
        select: Select[str] = self.query_one("#model", Select)
        current = select.value
        names = [name for _, name in options]
        select.set_options(options)
        for pick in (current, default, *names[:1]):
            if pick in names:
                select.value = pick
                return

    @property
    def model(self) -> str | None:
        chosen = self.query_one("#model", Select).value
        return chosen if isinstance(chosen, str) else None

    # ---- chat template

    @property
    def chat(self) -> bool:
        """Chat-template mode: the model's chat template when it has one here (else raw prompts)."""
        return self.query_one("#chat", Checkbox).value

    def toggle_chat(self) -> bool:
        """Flip chat-template mode; the new value."""
        box = self.query_one("#chat", Checkbox)
        box.value = not box.value
        return box.value

    @property
    def tokenizer(self) -> str:
        return value(self, "#tokenizer")

    # ---- values

    def set_value(self, name: str, text: str) -> None:
        """Set a field by name: a control's (``max_tokens``), ``timeout``, ``system``, ``tokenizer`` or ``chat``."""
        if name == "chat":
            self.query_one("#chat", Checkbox).value = text.lower() in ("1", "true", "yes", "on")
            return
        selector = f"#{control_id(name)}" if self.query(f"#{control_id(name)}") else f"#{name}"
        self.query_one(selector, Input).value = text

    def focus_first(self) -> None:
        """Focus the first control of the table (Max tokens), its value selected for typing over."""
        self.query_one(f"#{control_id(CONTROLS[0].name)}", Input).focus()

    def settings(self) -> Settings:
        """What one send uses; ClientError naming the bad field."""
        form = {c.name: value(self, f"#{control_id(c.name)}") for c in CONTROLS}
        return settings_from_form({**form, "model": self.model, "mode": self.mode, "timeout": value(self, "#timeout"),
                                   "chat": self.chat, "system": value(self, "#system"), "tokenizer": self.tokenizer},
                                  "the Server pane, F2")
