"""The options several commands share: one per control of the controls table (:data:`console.clients.CONTROLS`),
each value checked by its row's rule as click reads it."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, TypeVar

import click

from console.clients import ClientError, Control, params
from console.core.adapters import APIS, api_help

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


# What each address option takes, said once (``server_options``)
ADDRESS_HELP = {
    "--grpc-url": "host:port of the server's gRPC endpoint, when it is not the port after its HTTP one.",
    "--metrics-url": "The server's metrics page (host:port or a URL), when it is not where its kind has it (Triton: "
                     "the HTTP port + 2; an OpenAI-compatible server: /metrics beside /v1).",
    "--prometheus": "A Prometheus that scrapes every server (host:port or a URL): the metrics come from it, the "
                    "fleet's figures per model in total and per instance, and the servers it cannot scrape.",
}


def server_options(*flags: str, url: str = "--url", per_url: bool = False) -> Callable[[F], F]:
    """A decorator adding the address options ``flags`` names, in the order given: ``--api`` (what the ``url``
    option's address is), ``--grpc-url``, ``--metrics-url`` (``per_url``: one per ``url``, in order) and
    ``--prometheus``."""
    def option(flag: str) -> Callable[[F], F]:
        if flag == "--api":
            return click.option("--api", type=click.Choice(APIS), default="auto", show_default=True,
                                help=api_help(url))
        if flag == "--metrics-url" and per_url:
            return click.option(flag, multiple=True, help=f"{ADDRESS_HELP[flag]} One per {url}, in order.")
        return click.option(flag, default=None, help=ADDRESS_HELP[flag])

    def decorate(func: F) -> F:
        for flag in reversed(flags):
            func = option(flag)(func)
        return func

    return decorate
