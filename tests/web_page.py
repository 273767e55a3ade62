"""The web console in a real headless Chromium: the page helper every browser test drives (importable:
``pythonpath = tests``)."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.server import free_port

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 120_000


class LogWatch:
    """The controller's log lines as they arrive; :meth:`wait_for` waits on a condition, not a clock."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()

    def add(self, line: str) -> None:
        with self._cond:
            self.lines.append(line)
            self._cond.notify_all()

    def wait_for(self, needle: str, timeout: float = 60.0) -> str:
        with self._cond:
            self._cond.wait_for(lambda: any(needle in line for line in self.lines), timeout)
            return next((line for line in reversed(self.lines) if needle in line), "")


class Web:
    """The page, the console behind it, the log it follows and the served app (its login)."""

    def __init__(self, page: Any, console: Any, log: LogWatch, served: Any) -> None:
        self.page, self.console, self.log, self.served = page, console, log, served

    def text(self, selector: str) -> str:
        return self.page.locator(selector).first.inner_text()

    def wait_text(self, selector: str, *needles: str, timeout: int = WAIT_MS) -> str:
        """Until the element's text holds every needle (on a timeout, see :meth:`_until`)."""
        self._until("([sel, needles]) => { const e = document.querySelector(sel); const t = e ? e.innerText : '';"
                    " return needles.every(n => t.includes(n)); }", [selector, list(needles)], selector,
                    f"never held {list(needles)}", timeout)
        return self.text(selector)

    def wait_value(self, selector: str, value: str, timeout: int = WAIT_MS) -> None:
        """Until the field's value is ``value`` (on a timeout, see :meth:`_until`)."""
        self._until("([sel, v]) => document.querySelector(sel)?.value === v", [selector, value], selector,
                    f"never held the value {value!r}", timeout)

    def wait_points(self, plot: str, count: int, timeout: int = WAIT_MS) -> None:
        """Until the plot draws ``count`` points (on a timeout, see :meth:`_until`)."""
        self._until("([sel, n]) => document.querySelectorAll(sel + ' .mark-symbol path').length === n",
                    [plot, count], plot, f"never drew {count} points", timeout)

    def _until(self, condition: str, arg: Any, selector: str, failure: str, timeout: int) -> None:
        """Wait for a JS condition; on a timeout the failure says what the page held: the element's text and
        points drawn, the Speed summary, and how the chat ends (a reply's figures and how it ended)."""
        try:
            self.page.wait_for_function(condition, arg=arg, timeout=timeout)
        except Exception as exc:  # playwright's TimeoutError
            state = self.page.evaluate(
                "sel => ({held: document.querySelector(sel)?.innerText, points: document.querySelectorAll(sel +"
                " ' .mark-symbol path').length, summary: document.querySelector('#qc-summary')?.innerText, chat:"
                " document.querySelector('#qc-chat')?.innerText?.slice(-500)})", selector)
            pytest.fail(f"{selector} {failure} in {timeout} ms ({type(exc).__name__}): {state!r}")

    def table(self, selector: str) -> list[list[str]]:
        """A Dataframe's rows as cell texts."""
        return self.page.evaluate("sel => [...document.querySelectorAll(sel + ' .virtual-row')].map(r =>"
                                  " [...r.querySelectorAll('[role=gridcell]')].map(c => c.innerText.trim()))", selector)

    def wait_log_tail(self, needle: str = "") -> None:
        """Wait until the log box shows ``needle`` and is scrolled to its last line."""
        self.page.wait_for_function(
            "n => { const t = document.querySelector('#qc-log textarea'); return t.value.includes(n) &&"
            " t.scrollHeight > t.clientHeight && t.scrollTop + t.clientHeight >= t.scrollHeight - 2; }",
            arg=needle, timeout=WAIT_MS)

    def x_labels(self, plot: str) -> list[str]:
        """The tick labels of a plot's x axis."""
        return self.page.evaluate("sel => [...document.querySelectorAll(sel + ' g.role-axis[aria-label^=\"X-axis\"]"
                                  " .role-axis-label text')].map(t => t.textContent)", plot)

    def tab(self, name: str) -> None:
        self.page.get_by_role("tab", name=name).click()

    def fill(self, control: str, value: str) -> None:
        """Type ``value`` into a control's field (opening the Controls panel, closed at first, when it is)."""
        field = self.page.locator(f"#qc-control-{control} input, #qc-control-{control} textarea").first
        if not field.is_visible():
            self.page.locator("#qc-controls").get_by_text("Controls (blank").click()
        field.fill(value)

    def mode(self, mode: str) -> None:
        label = {"stream": "Stream · gRPC, token by token", "batch": "Batch · HTTP, one response"}[mode]
        self.page.get_by_label(label).check()

    def model(self, name: str) -> None:
        self.page.locator("#qc-model input").click()
        # the option that names the model (llava, not llava_next), whatever its label says after the name
        self.page.get_by_role("option", name=re.compile(rf"^{re.escape(name)}(?!\w)")).click()
        self.page.wait_for_function("n => document.querySelector('#qc-model input').value.startsWith(n)", arg=name,
                                    timeout=WAIT_MS)

    def request_id(self) -> str:
        found = re.search(r"request (qc-\w+)", self.text("#qc-live"))
        return found.group(1) if found else ""

    def send(self, text: str, until: str = "done") -> str:
        """Send ``text`` and wait until the live panel shows ``until`` for the new request; the panel."""
        old = self.request_id()
        self.page.locator("#qc-input textarea").fill(text)
        self.page.locator("#qc-send").click()
        self.page.wait_for_function(
            "([w, old]) => { const t = document.querySelector('#qc-live')?.innerText ?? '';"
            " const id = (t.match(/request (qc-\\w+)/) || [])[1]; return id && id !== old && t.includes(w); }",
            arg=[until, old], timeout=WAIT_MS)
        return self.text("#qc-live")

    def clear(self) -> None:
        self.page.locator("#qc-clear").click()
        self.page.wait_for_function("!document.querySelector('#qc-chat .message')", timeout=WAIT_MS)

    def answers(self) -> list[str]:
        return [m.inner_text() for m in self.page.locator("#qc-chat .message.bot").all()]

    def export(self) -> dict[str, Any]:
        """Click Export; the JSON transcript it offered (a name the file list did not show before)."""
        files = self.page.locator("#qc-files")
        shown = files.inner_text() if files.is_visible() else ""
        self.page.locator("#qc-export").click()
        stem = self.page.wait_for_function(
            "old => { const e = document.querySelector('#qc-files'); const t = e ? e.innerText : '';"
            " return (t.match(/qaic-transcript-[\\d-]+/g) || []).find(s => !old.includes(s)); }",
            arg=shown, timeout=WAIT_MS).json_value()
        assert ".md" in files.inner_text() and ".json" in files.inner_text()
        return json.loads((self.console.export_dir / f"{stem}.json").read_text())

    def toast(self, needle: str, timeout: int = WAIT_MS) -> str:
        """The text of the toast that says ``needle``, once one does (others may be showing)."""
        found = "n => [...document.querySelectorAll('.toast-body')].map(e => e.innerText).find(t => t.includes(n))"
        self._until(found, needle, ".toast-body", f"never said {needle!r}", timeout)
        return str(self.page.evaluate(found, needle))


@contextlib.contextmanager
def open_page(console: Any, log: LogWatch, ready: str = "idle") -> Iterator[Web]:
    """``console`` (a WebConsole) served on a free loopback port and open in Chromium (logged in through the
    address with the token), once its status says ``ready``; the page and the app close afterwards."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's /usr/bin/chromium is missing (apt-get install chromium; scripts/setup.sh --test)")
    from playwright.sync_api import sync_playwright

    from console.web.app import launch

    served = launch(console, port=free_port(), block=False)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.goto(served.url)  # as a user logs in: the printed address with its token, then the cookie
            page.wait_for_function("r => document.querySelector('#qc-status')?.innerText.includes(r)", arg=ready,
                                   timeout=WAIT_MS)
            yield Web(page, console, log, served)
            browser.close()
    finally:
        served.close()


@contextlib.contextmanager
def unconnected_console() -> Iterator[Web]:
    """The web console with no server, open in Chromium (its controller stopped after)."""
    from console.core.controller import ServerController
    from console.web.handlers import WebConsole

    controller = ServerController()
    try:
        with open_page(WebConsole(controller), LogWatch()) as page:
            yield page
    finally:
        controller.stop()
