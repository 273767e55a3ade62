"""The TUI without a server, driven with Pilot: the controls table, fields, keys, hints, palette, quitting."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Label, Select
from tui_pilot import SIZE, add_control, run, table_rows, text_of, until

from console.clients import CONTROLS, ClientError, Control, ModelInfo, Tensor
from console.core.controller import ModelRow
from console.core.controls import form_default
from console.server import free_port
from console.server.errors import repository_not_found
from console.tui.app import QaicConsoleApp
from console.tui.widgets.chat_pane import NO_SERVER
from console.tui.widgets.controls import control_id, model_options, offered
from console.tui.widgets.server_pane import LOG_HINT
from console.tui.widgets.server_rows import model_row

TYPICAL_P = Control("typical_p", float, "FP32", "Typical p", "Locally typical sampling.", default=0.5, minimum=0,
                    maximum=1)


def field(app: QaicConsoleApp, mode: str, name: str) -> Input:
    return app.chat(mode).controls.query_one(f"#{control_id(name)}", Input)


def test_tui_command_is_registered() -> None:
    from click.testing import CliRunner

    from console.cli import main

    result = CliRunner().invoke(main, ["tui", "--help"])
    assert result.exit_code == 0 and "--grpc-url" in result.output and "Esc stops" in result.output


def test_controls_come_from_the_table() -> None:
    async def go() -> None:
        app = QaicConsoleApp()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            controls = app.chat("stream").controls
            for control in CONTROLS:
                widget = field(app, "stream", control.name)
                assert widget.value == form_default(control)
                assert str(widget.tooltip) == control.help
                assert str(widget.parent.query_one(Label).content) == control.label
            controls.set_models([("m", "m")], "m")
            assert controls.settings().params.values == {"max_tokens": 128}
            controls.set_value("seed", "-1")
            with pytest.raises(ClientError, match="Seed must be"):
                controls.settings()

    run(go)


def test_a_control_added_to_the_table_appears(monkeypatch) -> None:
    add_control(monkeypatch, TYPICAL_P)

    async def go() -> None:
        app = QaicConsoleApp()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f4")
            widget = field(app, "batch", "typical_p")
            assert widget.value == "0.5" and str(widget.tooltip) == TYPICAL_P.help
            assert str(widget.parent.query_one(Label).content) == "Typical p"
            controls = app.chat("batch").controls
            controls.set_models([("m", "m")], "m")
            assert controls.settings().params.typical_p == 0.5

    run(go)


def test_controls_are_near_per_pane_and_typing_replaces_a_value() -> None:
    async def go() -> None:
        app = QaicConsoleApp()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            pane = app.chat("stream")
            assert "this pane only" in str(pane.controls.query_one(".title", Label).content)
            assert app.focused is pane.query_one(".prompt")
            await pilot.press("tab")
            assert isinstance(app.focused, Select) and app.focused.id == "model"  # one Tab from the prompt
            await pilot.press("tab", "tab", *"64")
            assert app.focused is field(app, "stream", "max_tokens") and app.focused.value == "64"

            pane.focus_prompt()
            await pilot.press("ctrl+o", *"70")  # Ctrl+O: straight to the first control
            assert app.focused is field(app, "stream", "max_tokens") and app.focused.value == "70"

            temperature = field(app, "stream", "temperature")
            temperature.value = "0.7"
            await pilot.click(temperature, offset=(2, 0))  # a click that focuses selects the whole value
            await pilot.press(*"1.5")
            assert temperature.value == "1.5"
            await pilot.click(temperature, offset=(1, 0))  # once focused, a click places the cursor
            await pilot.press("0")
            assert temperature.value == "10.5"

            await pilot.press("f4")
            assert field(app, "batch", "max_tokens").value == "128"  # the Batch pane's own
            assert field(app, "stream", "max_tokens").value == "70"

    run(go)


def test_hints_before_a_server_are_whole() -> None:
    async def go() -> None:
        app = QaicConsoleApp()
        async with app.run_test(size=(100, 32)) as pilot:
            hint = app.server_pane.query_one("#log-hint")
            assert app.screen.region.contains_region(hint.region)
            assert " ".join(LOG_HINT.split()) in text_of(hint)  # wrapped, not cut off ("F8 connec")
            await pilot.press("f3")
            assert " ".join(NO_SERVER.split()) in text_of(app.chat("stream").query_one(".hint"))

    run(go)


def test_palette_screenshot_writes_a_file_and_says_where(tmp_path: Path) -> None:
    async def go() -> None:
        app = QaicConsoleApp(export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+p", *"Screenshot")
            await pilot.pause()
            await pilot.press("enter")
            await until(pilot, lambda: list(tmp_path.glob("*.svg")), 10, "the screenshot file")
            path = next(tmp_path.glob("*.svg"))
            await until(pilot, lambda: any(str(path) in text for _, text in app.notices), 10, "the notice")
        assert "<svg" in path.read_text()

    run(go)


def test_readable_notices_without_a_server(tmp_path: Path) -> None:
    async def go() -> None:
        port = free_port()
        app = QaicConsoleApp(http_url=f"127.0.0.1:{port}", grpc_url=f"127.0.0.1:{port}", export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.notices, 30, "the connection's failure")
            stream = app.chat("stream")
            assert not stream.submit("a|")  # bad input
            assert not stream.submit("hello")  # not connected
            await pilot.press("ctrl+s", "escape")  # nothing to export, nothing to stop
            expected = (f"cannot reach tritonserver at 127.0.0.1:{port} (HTTP): connection refused", "not connected",
                        "prompt 2 of 2 is empty", "nothing to export", "nothing to stop")
            await until(pilot, lambda: all(any(e in text for _, text in app.notices) for e in expected), 10,
                        "the notices")

    run(go)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_quit_signal_closes_the_app(signum: int) -> None:
    async def go() -> None:
        app = QaicConsoleApp()
        async with app.run_test(size=SIZE) as pilot:
            assert signal.getsignal(signum) not in (signal.SIG_DFL, signal.SIG_IGN, None)  # else the kill ends pytest
            os.kill(os.getpid(), signum)
            await until(pilot, lambda: app.return_code is not None, 10, "the app to close")

    run(go)


# --------------------------------------------------------------------------- what the server is, shown


def info(name: str, decoupled: bool, kv: bool = True, prompt: str = "prompt", datatype: str = "BYTES") -> ModelInfo:
    return ModelInfo(name, decoupled, kv, inputs=(Tensor(prompt, datatype),), outputs=(Tensor("text_output", "BYTES"),))


def test_models_table_rows_say_type_mode_and_interface() -> None:
    assert model_row(ModelRow("a", "READY", "", info("a", True))) == ("a", "READY", "kv", "stream", "qaic-console", "")
    assert model_row(ModelRow("b", "READY", "", info("b", False, kv=False))) == (
        "b", "READY", "causal", "batch", "qaic-console", "")
    text = info("t", False, prompt="text_input")  # one STRING in, one STRING out: spoken too
    assert model_row(ModelRow("t", "READY", "", text))[4] == "text"
    odd = info("c", False, prompt="INPUT0", datatype="FP32")  # no text input at all
    assert model_row(ModelRow("c", "READY", "", odd))[4] == "unsupported"
    assert model_row(ModelRow("d", "UNAVAILABLE", "load failed")) == ("d", "UNAVAILABLE", "", "", "", "load failed")
    assert not offered("stream", odd) and offered("stream", info("b", False)) and not offered("batch", info("a", True))


def test_model_select_says_what_a_model_is() -> None:
    infos = {i.name: i for i in (info("kv", False), info("dec", True), info("causal", False, kv=False))}
    assert model_options("stream", infos) == [
        ("dec", "dec"), ("causal · batch model: one response · causal: slow on a CPU", "causal"),
        ("kv · batch model: one response", "kv")]
    assert model_options("batch", {n: i for n, i in infos.items() if offered("batch", i)})[0] == (
        "causal · causal: slow on a CPU", "causal")


def test_enter_in_repository_lists_its_models(embedded_repo: Path) -> None:
    async def go() -> None:
        app = QaicConsoleApp(repository=str(embedded_repo))
        async with app.run_test(size=SIZE) as pilot:
            app.server_pane.query_one("#repository", Input).focus()
            await pilot.press("enter")
            table = app.server_pane.query_one("#models", DataTable)
            rows = table_rows(table)
            assert rows["smollm2_kv"][:4] == ("smollm2_kv", "not served", "kv", "batch")
            assert rows["smollm2_causal_decoupled"][1:4] == ("not served", "causal", "stream")

    run(go)


# --------------------------------------------------------------------------- what a new user trips over


def test_without_a_terminal_the_tui_refuses_at_once_and_says_how_to_run_headless(tmp_path: Path) -> None:
    import subprocess
    import sys

    from click.testing import CliRunner

    from console.cli import main

    cmd = [sys.executable, "-c", "from console.cli import main; main()", "tui"]
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)  # it spun
    assert done.returncode == 1 and done.stdout == "", done.stdout[:300]
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: the console needs a terminal") and 'qaic-console --prompt "..."' in line
    missing = CliRunner().invoke(main, ["tui", "--model-repository", str(tmp_path / "nowhere")])
    assert missing.exit_code == 1 and missing.stderr == f"error: {repository_not_found(tmp_path / 'nowhere')}\n"


def test_control_fields_check_as_typed_show_the_rule_and_give_the_focus_back() -> None:
    async def go() -> None:
        app = QaicConsoleApp()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3", "ctrl+o")
            pane = app.chat("stream")
            rule = pane.controls.query_one("#control-rule")
            max_tokens, top_p = field(app, "stream", "max_tokens"), field(app, "stream", "top_p")
            assert app.focused is max_tokens and "Max tokens: an integer >= 0 and <= 2147483647" in text_of(rule)
            await pilot.press(*"12a")
            assert max_tokens.value == "12a", "a letter is shown, not dropped"
            assert max_tokens.has_class("-invalid") and "✖ Max tokens: '12a' is not a number" in text_of(rule)
            await pilot.press("backspace")
            assert not max_tokens.has_class("-invalid") and "✖" not in text_of(rule)
            top_p.focus()
            await pilot.press("9")
            assert "✖ Top p must be a number > 0 and <= 1, got 9" in text_of(rule) and top_p.has_class("-invalid")
            await pilot.press("backspace", *"0.9", "enter")  # Enter: back to the message
            assert app.focused is pane.query_one(".prompt") and top_p.value == "0.9"
            await pilot.press("ctrl+o")
            assert app.focused is max_tokens
            await pilot.press("ctrl+o")  # and Ctrl+O again: back too (Esc stops a reply)
            assert app.focused is pane.query_one(".prompt")
            pane.controls.query_one("#timeout", Input).focus()
            await pilot.press(*"-1")
            assert "✖ Timeout s must be a number >= 0" in text_of(rule)

    run(go)


def test_footer_names_quit_and_the_generator() -> None:
    from textual.widgets._footer import FooterKey

    async def go() -> None:
        app = QaicConsoleApp()

        def shown() -> str:
            return " · ".join(text_of(key) for key in app.query(FooterKey))

        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "^q Quit" in shown(), 10, "the footer drawn")  # keys have no size before
            assert "^q Quit" in shown() and "f9 Generate" in shown() and "^g Raw log" in shown(), shown()
            await pilot.press("f3")
            await until(pilot, lambda: "^q Quit" in shown(), 10, "the Stream pane's footer drawn")
            assert "^q Quit" in shown()

    run(go)


def test_the_generator_form_names_its_own_box_for_an_existing_folder(tmp_path: Path) -> None:
    """A folder that exists is refused naming the form's "Replace" box (not the command line's --force); ticked, the
    folder is replaced."""
    from textual.widgets import Checkbox

    repo = tmp_path / "repo"
    (repo / "tiny").mkdir(parents=True)

    async def go() -> None:
        app = QaicConsoleApp(repository=str(repo))
        async with app.run_test(size=SIZE) as pilot:
            pane = app.server_pane
            pane.query_one("#gen-name", Input).value = "tiny"
            pane.query_one("#gen-hf", Input).value = "embedded"
            pane.query_one("#generate").press()
            await until(pilot, lambda: any(s == "error" for s, _ in app.notices), 60, "the refusal")
            (refusal,) = [text for severity, text in app.notices if severity == "error"]
            assert refusal == f'{repo / "tiny"} already exists: tick "Replace an existing model folder" to replace it'
            assert str(pane.query_one("#gen-force", Checkbox).label) == "Replace an existing model folder"
            pane.query_one("#gen-force", Checkbox).value = True
            pane.query_one("#generate").press()
            await until(pilot, lambda: any(t.startswith("wrote") for _, t in app.notices), 120, "the replacement")
            assert (repo / "tiny" / "config.pbtxt").is_file()

    run(go)
