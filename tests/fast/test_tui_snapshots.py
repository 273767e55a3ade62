"""The TUI's screens before any server, as SVG snapshots (``--snapshot-update`` after checking them by eye)."""

from __future__ import annotations

from tui_pilot import SIZE, steady

from console.tui.app import QaicConsoleApp


def test_snapshot_server_pane(snap_compare) -> None:
    assert snap_compare(QaicConsoleApp(), terminal_size=SIZE, run_before=steady())


def test_snapshot_stream_pane(snap_compare) -> None:
    assert snap_compare(QaicConsoleApp(), terminal_size=SIZE, run_before=steady("f3"))


def test_snapshot_command_palette(snap_compare) -> None:
    assert snap_compare(QaicConsoleApp(), terminal_size=SIZE, run_before=steady("f3", "ctrl+p"))
