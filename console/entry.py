"""The ``qaic-console`` program: its signals are set before the commands' modules load, so a Ctrl-C at any point,
even while they load, ends with one line and exit code 130 (:func:`console.infra.signals.interrupted`)."""

from __future__ import annotations

from console.infra.signals import install_signals, interrupted


def main() -> None:
    install_signals()
    try:
        from console.cli import main as cli

        cli()
    except KeyboardInterrupt:
        interrupted()
