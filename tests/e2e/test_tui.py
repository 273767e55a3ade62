"""The TUI on a real tritonserver, driven with Pilot: servers started from the Server pane (a model generated with
the pane's form, then the embedded samples, quitting while one runs), and other LLM interfaces on a real server.
The chat behaviour runs on the fake server in ``tests/fast/test_tui_fake.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Button, Checkbox, DataTable, Input, Log, Select
from tui_pilot import SIZE, ready, run, say, table_rows, text_of, until

from console.server import logparse
from console.tui.app import QaicConsoleApp, Stopping

pytestmark = pytest.mark.server


# --------------------------------------------------------------------------- servers started from the panel


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch) -> Path:
    """A cache of its own for the embedded repository (the prepared weights and backends are shared)."""
    from backend_model.models import cache_root

    shared, own = cache_root(), tmp_path / "cache"
    own.mkdir()
    for name in ("models", "triton-backends"):
        (shared / name).mkdir(parents=True, exist_ok=True)
        (own / name).symlink_to(shared / name)
    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(own))
    return own


def test_generate_start_chat_stop_then_serve_embedded_and_quit(tmp_path: Path, own_cache: Path) -> None:
    async def go() -> None:
        repo = tmp_path / "repo"
        app = QaicConsoleApp(repository=str(repo), export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane, stream = app.server_pane, app.chat("stream")
            await pilot.press("f9", *"smollm2_decoupled")
            await pilot.click("#generate")
            await until(pilot, lambda: (repo / "smollm2_decoupled" / "config.pbtxt").is_file(), 60, "the model")
            await pilot.press("f6")
            await until(pilot, lambda: pane.phase != "idle", 10, "starting")
            await pilot.press("f4")  # the UI answers while the model loads
            assert app.active == "batch" and pane.phase == "starting"
            await pilot.press("f2")
            await until(pilot, lambda: pane.phase in ("ready", "failed"), 600, "the server")
            assert pane.phase == "ready", (pane.snapshot.message, app.notices)
            server = pane.controller.server
            assert server is not None and server.handle.model_states()["smollm2_decoupled"][0] == "READY"

            log = pane.query_one("#server-log", Log)
            lines = list(log.lines)
            assert any(logparse.is_noise(line) for line in server.log_tail(500))  # the raw log has the noise
            assert lines.count(logparse.NOISE_NOTE) == 1
            assert not [line for line in lines if logparse.is_noise(line) and line != logparse.NOISE_NOTE]
            assert not pane.query_one("#log-hint").display
            # condensed: the loads, no 230-column tables; Ctrl+G shows the raw log and back
            assert any(line.endswith("successfully loaded 'smollm2_decoupled'") for line in lines), lines
            assert any(line.startswith("+---") for line in server.log_tail(500)), "Triton printed no table"
            assert not [line for line in lines if line.startswith(("+---", "| "))]
            await pilot.press("ctrl+g")
            assert any(line.startswith("+---") for line in log.lines) and "raw" in str(log.border_title)
            await pilot.press("ctrl+g")
            assert not [line for line in log.lines if line.startswith("+---")]

            await until(pilot, lambda: stream.serving and stream.infos, 30, "the stream pane")
            await pilot.press("f3")
            stream.controls.set_value("max_tokens", "6")
            await say(pilot, stream, "Hello")
            assert stream.turns[0].replies[0].ok
            await pilot.press("f2", "f7")
            await until(pilot, lambda: pane.phase == "stopped" and not stream.serving, 60, "the stop")
            assert not server.running and "exit code" not in pane.snapshot.message  # a normal stop, however it ended

            await pilot.press("f5")  # the embedded samples, then Ctrl+Q while they are served
            await until(pilot, lambda: pane.phase == "failed" or len(stream.infos) == 2, 600, "the embedded models")
            assert set(stream.infos) == {"smollm2_decoupled", "smollm2_kv"}, (pane.snapshot.message, app.notices)
            server = pane.controller.server
            served = own_cache / "llm_model_dir"
            assert pane.repository() == served  # the repository served, not the ./llm_model_dir of the form

            # a model generated now goes into the repository served, and the running server loads it
            pane.query_one("#gen-name", Input).value = "tiny_chat"
            pane.query_one("#gen-hf", Input).value = "embedded"
            await pilot.click("#generate")
            loaded = ("information", "loaded tiny_chat into the running tritonserver")
            await until(pilot, lambda: loaded in app.notices or any(s == "error" for s, _ in app.notices), 600,
                        "the generated model loaded")
            assert loaded in app.notices and (served / "tiny_chat" / "config.pbtxt").is_file(), app.notices
            assert server.handle.model_states()["tiny_chat"][0] == "READY"
            assert table_rows(pane.query_one("#models", DataTable))["tiny_chat"][1] == "READY"
            await pilot.press("ctrl+q")
            await until(pilot, lambda: isinstance(app.screen, Stopping), 10, "the stopping screen")
            assert "stopping tritonserver" in text_of(app.screen.query_one("#stopping"))
            await until(pilot, lambda: app.return_code is not None, 60, "the app to close")
            assert not server.running

    run(go)


def test_a_model_generated_into_a_connected_servers_repository_is_loaded_into_it(tmp_path: Path, own_cache: Path,
                                                                                  echo_repo: Path) -> None:
    """The connected server (this user's, on this machine) serves the form's repository and lists the model folder as
    not loaded: the form replaces the folder when its box is ticked, and the server loads it (not "F7 then F6", which
    would start a second tritonserver on the folder)."""
    import shutil

    from console.server import TritonServer
    from repo_gen.spec import generate

    repo = tmp_path / "repo"
    shutil.copytree(echo_repo / "echo", repo / "echo")
    generate("tiny_chat", repo, hf_model_name="embedded")
    server = TritonServer(repo, models=("echo",)).start(timeout=120)

    async def go() -> None:
        app = QaicConsoleApp(http_url=server.http_url, grpc_url=server.grpc_url, repository=str(repo),
                             export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.server_pane
            models = pane.query_one("#models", DataTable)
            await until(pilot, lambda: "tiny_chat" in table_rows(models), 30, "the connected server's models")
            assert pane.phase == "connected" and table_rows(models)["tiny_chat"][1] == "not loaded"
            await pilot.press("f9")
            pane.query_one("#gen-name", Input).value = "tiny_chat"
            pane.query_one("#gen-hf", Input).value = "embedded"
            pane.query_one("#gen-force", Checkbox).value = True
            pane.query_one("#generate", Button).press()
            loaded = ("information", "loaded tiny_chat into the running tritonserver")
            await until(pilot, lambda: loaded in app.notices or any(s != "information" for s, _ in app.notices),
                        300, "the generated model loaded")
            assert loaded in app.notices, app.notices
            assert server.handle.model_states()["tiny_chat"][0] == "READY"
            await until(pilot, lambda: table_rows(models)["tiny_chat"][1] == "READY", 30, "the table")

    try:
        run(go)
    finally:
        server.stop()


def test_other_llm_interfaces_chat_in_both_panes(llm_server, tmp_path: Path) -> None:
    """vLLM's and TensorRT-LLM's interfaces (real tritonserver, stand-in models): detected, shown, spoken."""
    async def go() -> None:
        app = QaicConsoleApp(http_url=llm_server.http_url, grpc_url=llm_server.grpc_url, export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            stream = app.chat("stream")
            await ready(pilot, stream, 6, chat=False)
            rows = table_rows(app.server_pane.query_one("#models", DataTable))
            assert [rows[m][4] for m in ("vllm_model", "ensemble", "text_model")] == ["vllm", "tensorrt-llm", "text"]
            stream.controls.query_one("#model", Select).value = "vllm_model"
            await say(pilot, stream, "My name is|Maroon bells")  # one request per prompt, merged
            turn = stream.turns[0]
            marker, _, words = turn.text(0).partition("]")  # the stand-in says which inputs it received
            assert turn.failure is None and words.split()[:2] == ["MY", "NAME"]
            assert turn.text(1).partition("]")[2].split()[:2] == ["MAROON", "BELLS"]
            assert "text_input" in marker and "prompt" not in marker.replace("text_input", "")  # its own names
            await pilot.press("f4")
            batch = app.chat("batch")
            await ready(pilot, batch, 6, chat=False)
            batch.controls.query_one("#model", Select).value = "ensemble_batch"
            await say(pilot, batch, "My name is")
            answered = batch.turns[0]
            assert answered.replies[0].ok and answered.text(0).partition("]")[2].split()[:3] == ["MY", "NAME", "IS"]

    run(go)
