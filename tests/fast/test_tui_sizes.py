"""The TUI at the terminal sizes users have (``tests/sizes.py``), connected to the fake server with a metrics page
read: each pane saved as an SVG in the tests' artifacts, and measured: every table shows all its columns, every
field's placeholder fits the field, and the metrics note names the field to give a page in."""

from __future__ import annotations

from pathlib import Path

from fake_server import FakeServer
from sizes import TERMINALS, artifacts, metrics_page
from textual.widgets import DataTable, Input
from tui_pilot import run, until

from console.tui.app import QaicConsoleApp
from console.tui.widgets.metrics_view import MetricsView


def cut_tables(root) -> list[str]:
    """The tables under ``root`` whose columns are wider than the room they are shown in."""
    return [f"{t.id}: {t.virtual_size.width} columns in {t.scrollable_content_region.width}"
            for t in root.query(DataTable) if t.virtual_size.width > t.scrollable_content_region.width]


def cut_placeholders(root) -> list[str]:
    """The fields shown under ``root`` whose placeholder does not fit them."""
    return [f"{field.id}: {field.placeholder!r} in {field.content_region.width}" for field in root.query(Input)
            if field.region and len(field.placeholder) > field.content_region.width]


def test_at_the_sizes_users_have_no_table_or_placeholder_is_cut(fake_server: FakeServer, tmp_path: Path) -> None:
    async def go() -> None:
        app = QaicConsoleApp(http_url=fake_server.url, export_dir=tmp_path)
        with metrics_page(list(fake_server.models)) as page:
            async with app.run_test(size=TERMINALS[0]) as pilot:
                stream = app.chat("stream")
                await until(pilot, lambda: stream.serving and stream.infos, 30, "the connection")
                await pilot.press("f2")
                view = app.server_pane.query_one(MetricsView)
                await until(pilot, lambda: view.look is not None, 10, "the metrics note")
                assert view.look.note.endswith(": type it in the Metrics URL field"), view.look.note
                field = view.query_one("#metrics-url", Input)
                field.value = page  # as typed, then Enter (typing races the pane's own focus as it shows)
                await field.action_submit()
                table = view.query_one("#metrics-table", DataTable)
                await until(pilot, lambda: table.row_count == len(fake_server.models) and all(
                    "-" not in table.get_row_at(i) for i in range(table.row_count)), 30, "every figure, read twice")
                for size in TERMINALS:
                    await look_at(app, pilot, size)

    run(go)


async def look_at(app: QaicConsoleApp, pilot, size: tuple[int, int]) -> None:
    """Each pane at ``size``: saved, and measured."""
    name = "x".join(map(str, size))
    await pilot.resize_terminal(*size)
    await pilot.press("f2")
    await pilot.pause()
    app.save_screenshot(filename=f"tui-server-{name}.svg", path=str(artifacts()))
    assert not cut_tables(app.server_pane), (name, cut_tables(app.server_pane))
    assert not cut_placeholders(app.server_pane), (name, cut_placeholders(app.server_pane))
    for mode, key in (("stream", "f3"), ("batch", "f4")):
        await pilot.press(key)
        await pilot.pause()
        app.save_screenshot(filename=f"tui-{mode}-{name}.svg", path=str(artifacts()))
        assert not cut_placeholders(app.chat(mode)), (name, cut_placeholders(app.chat(mode)))
