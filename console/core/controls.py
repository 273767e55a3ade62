"""The controls table (:data:`console.clients.CONTROLS`) as option and form values.

Every front end builds its controls here: the CLI's options' values (:func:`params_from_options`; the options
themselves: :func:`console.commands.options.click_options`), the TUI's text fields and the web's boxes
(:func:`form_default`, :func:`form_placeholder`, :func:`params_from_form`), and a chat form's settings
(:func:`settings_from_form`, with the timeout's rule :data:`TIMEOUT_RULE`). Each value is checked once, where it
comes in, by its row's rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.clients import CAUSAL_TIMEOUT, CONTROLS, KV_TIMEOUT, BadRequest, Control, GenerationParams
from console.clients.params import check, parse

from .request import Settings

TIMEOUT_DEFAULTS = f"{KV_TIMEOUT:g} s for KV-cache models, {CAUSAL_TIMEOUT:g} s for causal ones"
TIMEOUT_RULE = f"a number >= 0 (blank: the model's default, {KV_TIMEOUT:g} s KV / {CAUSAL_TIMEOUT:g} s causal; 0: none)"
NO_MODEL = "no model chosen: start a server or connect to one ({where})"


def params_from_options(values: Mapping[str, Any]) -> GenerationParams:
    """GenerationParams from the values the controls' options checked (other keys are ignored)."""
    return GenerationParams.from_checked({c.name: values.get(c.name) for c in CONTROLS})


def form_default(control: Control) -> str:
    """The text a form field starts with (blank: not sent)."""
    return "" if control.default is None else str(control.default)


def form_placeholder(control: Control) -> str:
    """What a blank form field says: a list's blank sends none (``a|b``: two), another's asks the model's default."""
    return "a|b (blank: none)" if control.multiple else "model default"


def params_from_form(fields: Mapping[str, Any]) -> GenerationParams:
    """GenerationParams from form values: text (parsed) or numbers; blank/None leaves a control unset.

    ClientError names the first bad field.
    """
    values = {}
    for control in CONTROLS:
        value = fields.get(control.name)
        values[control.name] = parse(control, value) if isinstance(value, str) else check(control, value)
    return GenerationParams.from_checked(values)


def timeout_seconds(text: str) -> float | None:
    """A form's Timeout field as seconds (blank: None, the model's default); ClientError saying what is wrong."""
    text = text.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise BadRequest(f"Timeout s: {text[:40]!r} is not a number") from None
    if not seconds >= 0:
        raise BadRequest(f"Timeout s must be {TIMEOUT_RULE}, got {text}")
    return seconds


def settings_from_form(form: Mapping[str, Any], where: str) -> Settings:
    """The Settings of a chat form: ``model``, ``mode``, ``timeout``, ``chat``, ``system``, ``tokenizer``, ``echo``
    and one value per control (text or values); ClientError naming the first bad field (``where``: where a server is
    started or connected, said when no model is chosen)."""
    if not form.get("model"):
        raise BadRequest(NO_MODEL.format(where=where))
    params = params_from_form({c.name: form.get(c.name) for c in CONTROLS})
    return Settings(form["model"], mode=form.get("mode") or "stream", params=params,
                    timeout=timeout_seconds(str(form.get("timeout") or "")), chat=None if form.get("chat") else False,
                    system=form.get("system") or "", tokenizer=(form.get("tokenizer") or "").strip(),
                    echo=bool(form.get("echo")))
