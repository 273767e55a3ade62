"""The controls table (:data:`console.clients.CONTROLS`) as click options and as form values.

Every front end builds its controls here: the CLI's options (:func:`click_options`), the TUI's text
fields and the web's boxes (:func:`form_default`, :func:`params_from_form`). Each value is checked
once, where it comes in, by its row's rule (the click callback returns the checked value).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

import click

from console.clients import CONTROLS, ClientError, Control, GenerationParams
from console.clients.params import check, parse

F = TypeVar("F", bound=Callable[..., Any])
CLICK_TYPES = {bool: click.BOOL, str: str}  # numbers: click's own int and float


def _checker(control: Control) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def checked(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        try:
            return check(control, value)
        except ClientError as exc:
            raise click.BadParameter(str(exc)) from None

    return checked


def click_options(skip: Collection[str] = (), defaults: bool = True) -> Callable[[F], F]:
    """A decorator adding one option per control (``--max-tokens`` ...), checked by the table's rules.

    ``defaults=False`` leaves every control unset unless given (the model's defaults apply).
    """
    def decorate(func: F) -> F:
        for control in reversed(CONTROLS):
            if control.name in skip:
                continue
            default = control.default if defaults else None
            option = click.option(
                control.flag, control.name, type=CLICK_TYPES.get(control.kind, control.kind),
                multiple=control.multiple, default=() if control.multiple else default,
                show_default=default is not None, help=control.help, callback=_checker(control),
            )
            func = option(func)
        return func

    return decorate


def params_from_options(values: Mapping[str, Any]) -> GenerationParams:
    """GenerationParams from the values :func:`click_options` checked (other keys are ignored)."""
    return GenerationParams.from_checked({c.name: values.get(c.name) for c in CONTROLS})


def form_default(control: Control) -> str:
    """The text a form field starts with (blank: not sent)."""
    return "" if control.default is None else str(control.default)


def params_from_form(fields: Mapping[str, Any]) -> GenerationParams:
    """GenerationParams from form values: text (parsed) or numbers; blank/None leaves a control unset.

    ClientError names the first bad field.
    """
    values = {}
    for control in CONTROLS:
        value = fields.get(control.name)
        values[control.name] = parse(control, value) if isinstance(value, str) else check(control, value)
    return GenerationParams.from_checked(values)
