"""The metrics views on a real tritonserver while a chat streams: the TUI's (Pilot) and the web page's (Chromium).

The session's ``embedded_server`` listens on free ports (its metrics port is not the HTTP port + 2), so each view
is given its metrics page, the way a user does (``--metrics-url``, or the view's own field)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Sparkline
from tui_pilot import SIZE, run, table_rows, until
from web_page import WAIT_MS, LogWatch, open_page

from console.core.controller import ServerController
from console.metrics import HEADER
from console.server import free_port
from console.tui.app import QaicConsoleApp
from console.tui.widgets.metrics_view import MetricsView

pytestmark = pytest.mark.server
MODEL = "smollm2_decoupled"
SLOTS = HEADER.index("slots")
LONG = "400"  # tokens: the reply streams for many seconds, the views refresh every second


def test_the_server_pane_shows_the_metrics_move_while_a_stream_runs(embedded_server, tmp_path: Path) -> None:
    metrics_url = embedded_server.handle.metrics_url

    async def go() -> None:
        app = QaicConsoleApp(http_url=embedded_server.http_url, grpc_url=embedded_server.grpc_url,
                             export_dir=tmp_path, metrics_url=metrics_url)
        async with app.run_test(size=SIZE) as pilot:
            view = app.query_one(MetricsView)
            await until(pilot, lambda: view.look is not None and view.look.ok, 60, "the first metrics")
            assert view.display and view.look.note == f"metrics: {metrics_url}"
            table = view.query_one("#metrics-table")
            assert table_rows(table)[MODEL][SLOTS] == "0/8"
            table.move_cursor(row=table.get_row_index(MODEL))  # the model whose history is plotted
            await until(pilot, lambda: view.model == MODEL, 10, "the model picked")
            stream = app.chat("stream")
            await until(pilot, lambda: stream.serving and stream.infos, 60, "the connection")
            for name, value in (("max_tokens", LONG), ("min_tokens", LONG), ("chat", "False")):
                stream.controls.set_value(name, value)
            stream.focus_prompt()
            await pilot.press(*"1, 2, 3,", "enter")
            await until(pilot, lambda: table_rows(table)[MODEL][SLOTS] == "1/8", 120, "the slot the stream takes")
            await until(pilot, lambda: max(view.look.series(MODEL, "tokens_per_s"), default=0) > 0, 60,
                        "tokens/s in the history")
            plotted = view.query_one("#metrics-tokens-per-s", Sparkline).data
            assert plotted == view.look.series(MODEL, "tokens_per_s") and max(plotted) > 0
            assert max(view.query_one("#metrics-occupancy", Sparkline).data) == 1 / 8
            await pilot.press("escape")
            await until(pilot, lambda: stream.exchange is None, 60, "the stop")
            await until(pilot, lambda: table_rows(table)[MODEL][SLOTS] == "0/8", 60, "the slot freed")
            nowhere = f"127.0.0.1:{free_port()}"  # the field overrides the page read
            await pilot.press("f2")
            view.query_one("#metrics-url").focus()
            await pilot.press(*nowhere, "enter")
            await until(pilot, lambda: view.look.note.startswith(f"no metrics at http://{nowhere}/metrics"), 30,
                        "the note on a page that is not there")

    run(go)


@pytest.mark.browser
def test_the_server_tab_shows_the_metrics_move_while_a_stream_runs(embedded_server) -> None:
    from console.web.handlers import WebConsole

    controller = ServerController()
    controller.connect(embedded_server.http_url, embedded_server.grpc_url)
    metrics_url = embedded_server.handle.metrics_url
    try:
        with open_page(WebConsole(controller), LogWatch(), ready="connected") as web:
            page = web.page
            web.tab("Server")
            host, _, port = embedded_server.http_url.rpartition(":")
            guess = f"http://{host}:{int(port) + 2}/metrics"  # Triton's layout; not this server's (its ports are free
            # ones): the note names it, and what it found there: nothing, as a rule, or another process's page
            note = web.wait_text("#qc-metrics-note", guess, "guessed at the HTTP port + 2")
            assert note.startswith((f"no metrics at {guess}", f"metrics: {guess}")), note
            assert "type it in the Metrics page field" in note and "--metrics-url" not in note, note
            page.locator("#qc-metrics-url textarea, #qc-metrics-url input").first.fill(metrics_url)
            web.wait_text("#qc-metrics-note", f"metrics: {metrics_url}")

            def wait_cell(column: str, shown: str | None) -> None:
                """Until the model's cell in ``column`` shows ``shown`` (None: a number above 0)."""
                page.wait_for_function(
                    "([model, col, want]) => [...document.querySelectorAll('#qc-metrics .virtual-row')].some(r => {"
                    " const c = [...r.querySelectorAll('[role=gridcell]')].map(x => x.innerText.trim());"
                    " return c[0] === model && (want === null ? parseFloat(c[col]) > 0 : c[col] === want); })",
                    arg=[MODEL, HEADER.index(column), shown], timeout=WAIT_MS)

            def wait_slots(shown: str) -> None:
                wait_cell("slots", shown)

            wait_slots("0/8")
            page.wait_for_function("m => document.querySelector('#qc-metrics-occupancy')?.textContent.includes(m)",
                                   arg=MODEL, timeout=WAIT_MS)  # an idle server's flat line, drawn
            y_labels = page.evaluate("[...document.querySelectorAll('#qc-metrics-occupancy g.role-axis"
                                     "[aria-label^=\"Y-axis\"] .role-axis-label text')].map(t => t.textContent)")
            assert y_labels and "0.000000" not in y_labels, y_labels  # 0, not six decimals of nothing
            web.tab("Chat")
            web.mode("stream")
            assert page.locator("#qc-model input").input_value() == MODEL  # the stream default
            web.fill("max-tokens", LONG)
            web.fill("min-tokens", LONG)
            web.send("Count from one to a thousand.", until="streaming ·")
            web.tab("Server")
            wait_slots("1/8")
            wait_cell("tok/s", None)  # the stream's tokens over the last second
            web.tab("Chat")
            # the reply ends: stopped, or done first (in full runs here its 400 tokens took 8.3-9.3 s, and the checks
            # above as long); test_web.py tests Stop itself
            page.locator("#qc-stop").click()
            page.wait_for_function("() => !document.querySelector('#qc-live').innerText.startsWith('streaming')",
                                   timeout=WAIT_MS)
            web.tab("Server")
            page.wait_for_function("m => document.querySelector('#qc-metrics-tokens-per-s')?.textContent.includes(m)",
                                   arg=MODEL, timeout=WAIT_MS)  # the plot has the model's line (its legend)
            wait_slots("0/8")
    finally:
        controller.stop()
