"""The options several commands share: one per control of the controls table (:data:`console.clients.CONTROLS`),
each value checked by its row's rule as click reads it."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, TypeVar

import click

from console.clients import ClientError, Control, params

F = TypeVar("F", bound=Callable[..., Any])
CLICK_TYPES = {bool: click.BOOL, str: str}  # numbers: click's own int and float


def _checker(control: Control) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def checked(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        try:
            return params.check(control, value)
        except ClientError as exc:
            raise click.BadParameter(str(exc)) from None

    return checked


def click_options(skip: Collection[str] = (), defaults: bool = True) -> Callable[[F], F]:
    """A decorator adding one option per control (``--max-tokens`` ...), checked by the table's rules; the command
    turns the values into GenerationParams with :func:`console.core.controls.params_from_options`.

    ``defaults=False`` leaves every control unset unless given (the model's defaults apply).
    """
    def decorate(func: F) -> F:
        for control in reversed(params.CONTROLS):  # the table as it is when the command is built
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
