"""The web console without a server or a browser: what the views show, the form, Stop, the command."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from console.clients import (
    CONTROLS,
    Cancelled,
    ClientError,
    Control,
    Failure,
    GenerationParams,
    ModelInfo,
    Reply,
    ServerFault,
    Tensor,
    TextDelta,
    format_stats,
    reply_stats,
)
from console.core.adapters.triton import TritonAdapter
from console.core.controller import ModelRow, ServerController, Snapshot
from console.core.controls import settings_from_form
from console.core.request import Exchange, Settings
from console.core.turns import Turn
from console.server.errors import repository_not_found
from console.web import views

QAIC_INPUTS = (Tensor("prompt", "BYTES"), Tensor("max_tokens", "INT32", (1,), True))
QAIC_OUTPUTS = (Tensor("text_output", "BYTES"),)


def info(name: str, decoupled: bool = False, kv: bool = True, speaks: bool = True) -> ModelInfo:
    inputs = QAIC_INPUTS if speaks else (Tensor("INPUT0", "FP32"),)
    outputs = QAIC_OUTPUTS if speaks else (Tensor("OUTPUT0", "FP32"),)
    return ModelInfo(name, decoupled, kv, "embedded", inputs=inputs, outputs=outputs)


def streamed(turn: Turn, index: int, arrivals: list[float], finish: str, tokens: int) -> None:
    """Fold a streamed reply of ``len(arrivals)`` chunks into ``turn``, as the call would."""
    for k, t in enumerate(arrivals):
        turn.apply(TextDelta(index, f"t{k} ", t, first=k == 0))
    text = turn.partial.get(index, "")
    turn.apply(Reply(index, turn.prompts[index], text, finish, reply_stats(arrivals, arrivals[-1], tokens)))


def two_prompt_turn() -> Turn:
    """``a|b`` streamed: the first prompt ends (eos) at 0.5 s, the second at 2 s (length)."""
    turn = Turn("stream", "smollm2_decoupled", ["What is 2+2?", "Write a poem"], "qc-ab", chat=True)
    turn.sent_at, turn.prepare_seconds = 100.0, 0.004
    streamed(turn, 0, [0.2, 0.3, 0.4, 0.5], "eos", 4)
    streamed(turn, 1, [0.2 + 0.1 * k for k in range(19)], "length", 19)
    return turn


def batch_turn(latency: float = 0.8) -> Turn:
    turn = Turn("batch", "smollm2_kv", ["Hi"], "qc-b")
    turn.sent_at = 50.0
    turn.apply(Reply(0, "Hi", "Hello", "length", reply_stats([], latency, 8, streamed=False)))
    return turn


def test_markup_from_prompts_models_and_servers_stays_text() -> None:
    turn = Turn("batch", "m", ["<b>a</b>", "b"], "qc-1", echo=True)
    turn.sent_at = 1.0
    turn.apply(Reply(0, "<b>a</b>", "<script>x()</script>", "length", reply_stats([], 0.5, 10, streamed=False)))
    turn.apply(Failure("<i>gone</i> **bold**", ServerFault, 0.6))
    shown = [m["content"] for m in views.messages([turn])]
    assert shown[0] == "[1/2] &lt;b&gt;a&lt;/b&gt;\n[2/2] b"
    assert shown[1].startswith("[1/2] &lt;b&gt;a&lt;/b&gt;&lt;script&gt;x()&lt;/script&gt;\n\n— length · 10 tokens")
    assert "— ✖ server · &lt;i&gt;gone&lt;/i&gt;" in shown[-1] and "<" not in "".join(shown)
    live = views.live_markdown(turn, 2.0)
    assert "<" not in live and r"\*\*bold\*\*" in live
    assert live.startswith("**✖ server**") and "10 tokens" not in live  # each reply's figures: in the chat only
    snap = Snapshot("failed", "<img src=x onerror=alert(1)> _x_")
    assert "<img" not in views.status_markdown(snap) and r"\_x\_" in views.status_markdown(snap)
    assert views.md("a|b `c` [d](e) #f") == r"a\|b \`c\` \[d\]\(e\) \#f"


def test_each_prompt_ends_at_its_own_last_token_in_chat_speed_and_summary() -> None:
    turn = two_prompt_turn()
    shown = [m["content"] for m in views.messages([turn])]
    assert shown[1].endswith("— " + turn.status(0)) and "· 0.50 s" in shown[1]
    assert "· 2.00 s" in shown[2]
    rows = views.speed_rows([turn])
    columns = views.SPEED_COLUMNS
    latency = [r[columns.index("latency ms")] for r in rows]
    assert latency == [500.0, 2000.0]
    assert [r[columns.index("output tokens")] for r in rows] == [4, 19]
    assert [r[columns.index("prepare ms")] for r in rows] == [4.0, 4.0]
    summary = views.summary_markdown([turn])
    assert "2 replies" in summary and "| latency ms | 1250.0 |" in summary


def test_live_panel_shows_the_turns_own_figures_and_what_it_waits_for() -> None:
    turn = Turn("stream", "smollm2_decoupled", ["a", "b"], "qc-live", chat=True)
    assert "loading the chat template" in views.live_markdown(turn, 0.0, template_loading=True)
    assert "reading the model config" in views.live_markdown(turn, 0.0)
    turn.sent_at, turn.prepare_seconds = 10.0, 0.25
    assert "waiting for the first token · 0.5 s" in views.live_markdown(turn, 10.5)
    for k, t in enumerate([0.3, 0.4, 0.6]):
        turn.apply(TextDelta(0, "x", t, first=k == 0))
    live = views.live_markdown(turn, 11.0)
    assert live.startswith("**streaming**") and "prepared in 250 ms" in live
    assert views.md(format_stats(turn.figures(0, 1.0))) in live  # the core's figures, not the page's own
    assert "[2/2] waiting for the first token" in live
    assert "tok/s" in views.md(format_stats(turn.figures(0, 1.0)))


def test_a_turn_says_a_long_preparation_and_which_controls_it_did_not_send() -> None:
    turn = batch_turn()
    turn.prepare_seconds, turn.ignored = 0.0123, ["seed", "stop"]
    last = views.messages([turn])[-1]["content"]
    assert "smollm2_kv has no input for seed, stop: not sent" in last
    assert "prepared in" not in last, "a preparation of 12 ms is not worth a word on every reply"
    turn.prepare_seconds = 1.25
    assert "— prepared in 1.2 s before sending" in views.messages([turn])[-1]["content"]


def test_a_stopped_reply_is_one_bubble_with_its_figures_and_how_it_stopped() -> None:
    turn = Turn("stream", "smollm2_decoupled", ["Tell me a story"], "qc-stop")
    turn.sent_at = 1.0
    for k, t in enumerate([0.2, 0.3, 0.4]):
        turn.apply(TextDelta(0, f"w{k} ", t, first=k == 0))
    turn.apply(Failure("cancelled after 0.5 s; request cancelled on the server", Cancelled, 0.5))
    shown = [m["content"] for m in views.messages([turn])]
    assert len(shown) == 2, "the prompt and one answer: no separate bubble for the stop"
    assert shown[1].startswith("w0 w1 w2 \n\n— ■ stopped · 3 tokens · ttft 200 ms")
    # one marked line says how it stopped, its figures and why
    assert shown[1].endswith("· 0.50 s · cancelled after 0.5 s; request cancelled on the server")
    assert "✖" not in shown[1] and shown[1].count("■") == 1 and shown[1].count("\n— ") == 1
    assert views.live_markdown(turn, 2.0).startswith("**■ stopped**")
    assert views.speed_rows([turn])[0][views.SPEED_COLUMNS.index("finish")] == "■ stopped"


def test_speed_tab_measures_stream_ttft_and_batch_latency_apart_in_ms() -> None:
    table = views.speed_table([batch_turn(0.8), two_prompt_turn()])
    assert list(table["reply"]) == [1, 2, 3]
    batch = table.iloc[0]
    assert batch["latency ms"] == 800.0 and batch.isna()["TTFT ms"] and batch.isna()["ITL ms"]
    assert all(c.endswith(" ms") for c in views.SPEED_COLUMNS if c.lower().startswith(("ttft", "itl", "latency")))
    plots = views.plot_data(table)
    assert list(plots["latency"]["reply"]) == ["1"], "one batch reply is a one-point series"
    assert list(plots["ttft"]["reply"]) == ["2", "3"] and list(plots["ttft"]["TTFT ms"]) == [200.0, 200.0]
    assert plots["tps"]["reply"].map(type).eq(str).all()  # categories: the x axis counts whole replies
    summary = views.summary_markdown([batch_turn(0.8), two_prompt_turn()])
    batch_part, stream_part = summary.split("**Stream")
    assert "1 reply ·" in batch_part and "TTFT" not in batch_part and "| latency ms | 800.0 |" in batch_part
    assert "| TTFT ms | 200.0 |" in stream_part


def test_header_after_a_death_says_how_to_restart_without_addresses() -> None:
    ready = Snapshot("ready", "tritonserver 2.51.0 started here", owned=True,
                     server=TritonAdapter("127.0.0.1:8000", "127.0.0.1:8001"))
    assert "HTTP 127.0.0.1:8000 · gRPC 127.0.0.1:8001" in views.status_markdown(ready).replace("\\", "")
    dead = replace(ready, phase="failed", message="tritonserver exited with code -9 (killed by SIGKILL): start it "
                                                  "again", server=None)
    header = views.status_markdown(dead).replace("\\", "")
    assert "Server tab → Start tritonserver" in header and "127.0.0.1" not in header
    assert "Server tab → Start tritonserver" in views.no_server(dead)


def test_models_table_names_each_interface_and_the_selector_fits_the_mode() -> None:
    models = (ModelRow("echo", "READY", info=info("echo", speaks=False)),
              ModelRow("smollm2_causal", "READY", info=info("smollm2_causal", kv=False)),
              ModelRow("smollm2_decoupled", "READY", info=info("smollm2_decoupled", decoupled=True)),
              ModelRow("smollm2_kv", "READY", info=info("smollm2_kv")),
              ModelRow("broken", "UNAVAILABLE", "load failed"))
    snap = Snapshot("ready", "ok", models=models)
    rows = views.model_table(snap).values.tolist()
    assert rows[0] == ["echo", "READY", "unsupported", "", ""]
    assert rows[1][2:4] == ["qaic-console", "batch, causal (slow on a CPU)"]
    assert rows[4] == ["broken", "UNAVAILABLE", "", "", "load failed"]
    batch = views.model_choices(snap.infos, "batch")
    assert batch == [("smollm2_causal · causal, slow on a CPU", "smollm2_causal"), ("smollm2_kv", "smollm2_kv")]
    assert views.pick_model(batch, "batch", None) == "smollm2_kv"
    assert views.pick_model(batch, "batch", "smollm2_causal") == "smollm2_causal"
    assert views.model_choices(snap.infos, "stream") == [("smollm2_decoupled", "smollm2_decoupled")]


def settings_from(form: dict) -> Settings:
    """The web chat form's settings, as its handler reads them."""
    return settings_from_form(form, "Server tab")


def test_form_controls_zero_is_a_value_blank_is_unset_errors_name_the_field() -> None:
    form = {"model": "m", "mode": "stream", "chat": True, "timeout": "", "seed": "0", "max_tokens": "16",
            "temperature": " ", "stop": "a|b"}
    settings = settings_from(form)
    assert settings.params.values == {"seed": 0, "max_tokens": 16, "stop": ("a", "b")}
    assert settings.timeout is None and settings_from({**form, "timeout": "0"}).timeout == 0
    for field, value, label in (("top_p", "2", "Top p"), ("seed", "-1", "Seed"), ("max_tokens", "x", "Max tokens"),
                                ("timeout", "soon", "Timeout")):
        with pytest.raises(ClientError, match=label):
            settings_from({**form, field: value})
    with pytest.raises(ClientError, match="Timeout s must be a number >= 0"):
        settings_from({**form, "timeout": "-1"})


def test_a_control_added_to_the_table_appears_in_the_page(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    extra = Control("min_p", float, "FP32", "Min p", "Drop tokens below this share of the top one.", default=0.05,
                    minimum=0, maximum=1)
    original, table = CONTROLS, (*CONTROLS, extra)
    for module in list(sys.modules.values()):  # wherever the table is bound, as if it had one more row
        if getattr(module, "CONTROLS", None) is original:
            monkeypatch.setattr(module, "CONTROLS", table)
    from console.clients import params

    monkeypatch.setattr(params, "BY_NAME", {c.name: c for c in table})
    from console.web.app import build_app
    from console.web.handlers import WebConsole

    page = build_app(WebConsole(ServerController(), tmp_path)).config
    fields = {c["props"].get("label"): c["props"] for c in page["components"] if c["props"].get("label")}
    assert fields["Min p"]["value"] == "0.05" and "Drop tokens below" in fields["Min p"]["info"]
    assert settings_from({"model": "m", "min_p": "0.1"}).params.values["min_p"] == 0.1


def test_stop_cancels_a_tabs_message_even_before_its_call_exists() -> None:
    from console.web.handlers import Running

    running = Running()
    exchange = Exchange.new(Settings("m", params=GenerationParams(max_tokens=4)), ["hi"])
    running.begin("tab", exchange)
    assert not running.cancel("other tab") and not exchange.cancelled
    assert running.cancel("tab") and exchange.cancelled  # the call, once made, is cancelled at once
    running.end("tab", exchange)
    assert not running.cancel("tab")


def test_a_tab_is_free_for_the_next_send_before_any_frame_shows_the_ending(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    """A send made as soon as the page shows how the reply ended goes (one made earlier is refused, saying why)."""
    from fake_server import FakeServer, plain_info, registered, reply

    from console.web.handlers import WebConsole

    fake = registered(FakeServer(), monkeypatch)
    fake.serve(plain_info("echo_llm"))
    fake.enqueue(reply("one", " two", " three", every=0.01))
    controller = ServerController()
    controller.connect(fake.url)
    console = WebConsole(controller, tmp_path)

    def next_send_goes() -> bool:
        probe = Exchange.new(Settings("echo_llm"), ["next"])
        try:
            console.running.begin("tab", probe)
        except ClientError:
            return False
        console.running.end("tab", probe)
        return True

    shown = []
    try:
        for frame in console.send("tab", "hello", [], {"model": "echo_llm", "mode": "batch", "chat": False}):
            live = str(frame[2])
            shown.append(live)
            ended = live.startswith(("**done**", "**■", "**✖"))
            assert next_send_goes() == ended, f"the tab is free exactly when the ending shows: {live}"
    finally:
        controller.stop()
    assert shown[-1].startswith("**done**") and sum(s.startswith("**done**") for s in shown) == 1, shown


def test_no_server_no_send(recwarn: pytest.WarningsRecorder, tmp_path: Path) -> None:
    from console.web.handlers import WebConsole

    console = WebConsole(ServerController(), tmp_path)
    frames = list(console.send("tab", "hello", [], {"model": "m", "mode": "stream"}))
    assert len(frames) == 1 and "no server to send to: not connected" in str(recwarn.pop().message)


def test_command_binds_loopback_without_share_and_connects_or_starts() -> None:
    from console.commands.web import begin, web
    from console.server import free_port
    from console.web.app import launch
    from console.web.handlers import WebConsole

    defaults = web.make_context("web", []).params
    assert defaults["host"] == "127.0.0.1" and defaults["share"] is False
    served = launch(WebConsole(ServerController()), port=free_port(), block=False)
    try:
        demo = served.demo
        assert demo.server_name == "127.0.0.1" and demo.local_url.startswith("http://127.0.0.1:")
        assert not demo.share and demo.share_url is None and served.share_url == ""
        assert served.url == f"{demo.local_url}?token={served.login.token}"
    finally:
        served.close()
    assert not served.console.folder.exists()  # the page's private folder goes with it

    class Recorder:
        def __init__(self) -> None:
            self.calls: list[tuple] = []

        def connect(self, http: str, grpc: str, api: str = "auto") -> Snapshot:
            self.calls.append(("connect", http, grpc))
            return Snapshot("connected", "connected to tritonserver 2.51.0")

        def start(self, repository: object, models: tuple) -> None:
            self.calls.append(("start", repository, models))

    url, started = Recorder(), Recorder()
    begin(url, "127.0.0.1:8000", None, None, (), None)  # type: ignore[arg-type]
    begin(started, None, None, None, (), None)  # type: ignore[arg-type]
    assert url.calls == [("connect", "127.0.0.1:8000", "")]
    assert started.calls == [("start", None, ("smollm2_decoupled", "smollm2_kv"))]


def test_a_missing_repository_is_refused_on_the_terminal_before_anything(tmp_path) -> None:
    import os
    import subprocess

    env = {**os.environ, "QAIC_CONSOLE_CACHE": str(tmp_path), "QAIC_TRITONSERVER": str(tmp_path / "none")}
    cmd = [sys.executable, "-c", "from console.cli import main; main()", "web", "--model-repository",
           str(tmp_path / "nowhere")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)  # it used to serve the page
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"error: {repository_not_found(tmp_path / 'nowhere')}\n"
    assert "qaic-console repo samples --embedded -o" in done.stderr  # how to make one


def test_the_speed_table_shows_the_figures_first_and_empty_plots_say_so() -> None:
    columns = views.SPEED_COLUMNS
    assert columns[:6] == ["reply", "mode", "TTFT ms", "ITL ms", "latency ms", "tokens/s"] and columns[-1] == "prompt"
    plots = views.plot_data(views.speed_table([batch_turn()]))
    assert views.plot_label("latency", plots["latency"]) == {"label": "", "show_label": False}
    assert views.plot_label("ttft", plots["ttft"]) == {"label": "no stream replies yet", "show_label": True}
    empty = views.plot_data(views.speed_table([]))
    assert views.plot_label("latency", empty["latency"]) == {"label": "no batch replies yet", "show_label": True}


def test_control_hints_leave_out_wire_limits_and_a_bad_value_marks_its_field() -> None:
    by_name = {c.name: c for c in CONTROLS}
    assert all("9223372036854775807" not in views.control_info(c) and "2147483647" not in views.control_info(c)
               for c in CONTROLS)
    assert views.control_info(by_name["top_p"]).endswith("(a number > 0 and <= 1)")
    bad = views.control_field(by_name["top_p"], "2")
    assert bad == {"elem_classes": ["qc-invalid"], "info": "✖ Top p must be a number > 0 and <= 1, got 2"}
    assert views.control_field(by_name["top_p"], "0.5") == {"elem_classes": [],
                                                             "info": views.control_info(by_name["top_p"])}
    assert views.control_field(by_name["seed"], "")["elem_classes"] == []  # blank: the model's default
