"""How the commands end: one ``error:`` line (their signals: :mod:`console.infra.signals`)."""

from __future__ import annotations

import sys

import click

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def fail(message: str) -> None:
    """One line on stderr prefixed ``error:``, exit code 1."""
    click.echo(f"error: {message}", err=True)
    sys.exit(1)
