"""The Gradio page: Chat (stream or batch), Speed and Server tabs; :func:`launch` serves it.

Stop reaches the server: the Stop button (and closing the tab) call ``Call.cancel()`` of the
session's running request, which cancels a gRPC stream on the server; the message then ends with
its ``cancelled`` figures. Gradio's own cancel of the event closes the generator, which also
cancels the call. Messages are rendered as escaped plain text (no Markdown, no HTML).
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from console.clients import CONNECTION, Call, ClientError, Failure, split_prompts
from console.server import ServerError

from .backend import DEFAULT_MODELS, Backend, Snapshot, describe_repo, write_samples_into
from .chat import (
    MODES,
    SPEED_COLUMNS,
    Live,
    Settings,
    esc,
    export_files,
    follow,
    messages,
    new_turn,
    retry_text,
    speed_rows,
    start_call,
    summary_markdown,
)

HOST = "127.0.0.1"
REFRESH_S = 2.0
FRAME_S = 0.05  # at most this often a streaming update goes to the page
PHASE_ICONS = {"ready": "●", "starting": "◐", "stopping": "◐", "failed": "✖", "unreachable": "✖"}
CSS = """
#qc-chat .message-content, #qc-chat .md, #qc-chat .prose { white-space: pre-wrap; }
#qc-log textarea { font-family: ui-monospace, monospace; font-size: 12px; }
#qc-repo textarea { font-family: ui-monospace, monospace; font-size: 12px; }
"""
THEME = gr.themes.Soft(font=["ui-sans-serif", "system-ui", "sans-serif"], font_mono=["ui-monospace", "monospace"])


class Runs:
    """The running request of each browser session, so Stop (another event) can cancel it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, Call | None] = {}
        self._stopped: set[str] = set()

    def begin(self, key: str) -> None:
        with self._lock:
            self._calls[key] = None
            self._stopped.discard(key)

    def attach(self, key: str, call: Call) -> None:
        """Remember ``call``; cancel it at once when Stop came while it was being prepared."""
        with self._lock:
            self._calls[key] = call
            stopped = key in self._stopped
        if stopped:
            call.cancel()

    def stop(self, key: str) -> bool:
        """Cancel the session's request (on the server for gRPC); False when none runs."""
        with self._lock:
            if key not in self._calls:
                return False
            self._stopped.add(key)
            call = self._calls[key]
        if call is not None:
            call.cancel()
        return True

    def end(self, key: str) -> None:
        with self._lock:
            self._calls.pop(key, None)
            self._stopped.discard(key)


# --------------------------------------------------------------------------- views


def status_markdown(snap: Snapshot) -> str:
    icon = PHASE_ICONS.get(snap.phase, "○")
    text = f"{icon} **{esc(snap.phase)}** · {esc(snap.message)}"
    if snap.http_url:
        text += f"  \nHTTP `{esc(snap.http_url)}` · gRPC `{esc(snap.grpc_url or '?')}`"
    return text


def models_frame(snap: Snapshot) -> pd.DataFrame:
    rows = [[name, state or "not loaded", reason] for name, state, reason in snap.models]
    return pd.DataFrame(rows, columns=["model", "state", "reason"])


def model_choices(backend: Backend, mode: str, current: str | None) -> dict[str, Any]:
    """Dropdown update: the ready models for ``mode`` (decoupled ones stream), keeping ``current``."""
    infos = backend.infos()
    names = [n for n, info in infos.items() if info.decoupled == (mode == "stream")]
    preferred = [n for n in DEFAULT_MODELS if n in names]
    value = current if current in names else (preferred or names or [None])[0]
    return gr.update(choices=names, value=value)


def speed_views(turns: list) -> tuple[str, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(summary, table, TTFT plot data, tokens/s plot data) of the session's replies."""
    table = pd.DataFrame(speed_rows(turns), columns=SPEED_COLUMNS)
    return summary_markdown(turns), table, table.dropna(subset=["TTFT ms"]), table.dropna(subset=["tokens/s"])


# --------------------------------------------------------------------------- chat handlers


def respond(backend: Backend, runs: Runs, key: str, text: str, turns: list, settings: Settings) -> Iterator[tuple]:
    """Send one message and stream its progress: (chatbot, turns, live, input box)."""
    try:
        prompts = split_prompts(text)
    except ClientError as exc:
        gr.Warning(str(exc))
        yield gr.skip(), gr.skip(), gr.skip(), gr.skip()
        return
    turn = new_turn(prompts, settings)
    earlier, turns = turns, [*turns, turn]
    live = Live(settings.model, turn.request_id)
    yield messages(turns), turns, live.line(settings.mode), ""
    runs.begin(key)
    try:
        call = start_call(backend, turn, settings, earlier)
        runs.attach(key, call)
        live.sent = True
        yield gr.skip(), gr.skip(), live.line(settings.mode), gr.skip()
        shown = 0.0
        with contextlib.closing(iter(call)) as events:  # closing early (Gradio's cancel) cancels the call
            for ended in follow(events, turn, live):
                if ended or time.monotonic() - shown >= FRAME_S:
                    shown = time.monotonic()
                    yield messages(turns), gr.skip(), live.line(settings.mode), gr.skip()
    except (ClientError, OSError) as exc:
        turn.failure = live.failure = Failure(" ".join(str(exc).split()), getattr(exc, "kind", CONNECTION))
    finally:
        runs.end(key)
    yield messages(turns), turns, live.line(settings.mode), gr.skip()


def build_app(backend: Backend) -> gr.Blocks:
    """The page; every tab of one app shares ``backend``, chat state is per browser session."""
    runs = Runs()
    export_dir = Path(tempfile.mkdtemp(prefix="qaic-web-"))
    with gr.Blocks(title="qaic-console", analytics_enabled=False) as demo:
        turns = gr.State([])
        seen = gr.State(-1)
        gr.Markdown("## qaic-console · LLMs on Cloud AI 100 through Triton")
        status = gr.Markdown(NOT_READY, elem_id="qc-status")
        with gr.Tabs():
            with gr.Tab("Chat", id="chat"):
                chat_view = _chat_tab()
            with gr.Tab("Speed", id="speed"):
                speed_view = _speed_tab()
            with gr.Tab("Server", id="server"):
                server_view = _server_tab()
        timer = gr.Timer(REFRESH_S)
        c, s, v = chat_view, speed_view, server_view
        controls = {name: c[name] for name in Settings.__dataclass_fields__}
        speed_outputs = [s["summary"], s["table"], s["ttft"], s["tps"]]

        def settings_of(values: dict) -> Settings:
            return Settings(**{name: values[comp] for name, comp in controls.items()})

        def send(values: dict, request: gr.Request) -> Iterator[tuple]:
            yield from respond(backend, runs, request.session_hash, values[c["box"]], values[turns],
                               settings_of(values))

        def retry(values: dict, request: gr.Request) -> Iterator[tuple]:
            if not values[turns]:
                gr.Warning("nothing to retry yet")
                yield gr.skip(), gr.skip(), gr.skip(), gr.skip()
                return
            *older, last = values[turns]
            yield from respond(backend, runs, request.session_hash, retry_text(last), older, settings_of(values))

        def stop(request: gr.Request) -> None:
            runs.stop(request.session_hash)

        def export(history: list) -> Any:
            if not history:
                gr.Warning("nothing to export yet")
                return gr.skip()
            return gr.update(value=export_files(history, export_dir / time.strftime("%Y%m%d-%H%M%S")), visible=True)

        chat_outputs = [c["chatbot"], turns, c["live"], c["box"]]
        inputs = {c["box"], turns, *controls.values()}
        sending = gr.on([c["send"].click, c["box"].submit], send, inputs, chat_outputs, concurrency_limit=None,
                        show_progress="hidden")
        retrying = c["retry"].click(retry, inputs, chat_outputs, concurrency_limit=None, show_progress="hidden")
        for event in (sending, retrying):
            event.then(speed_views, turns, speed_outputs, show_progress="hidden")
        c["stop"].click(stop, None, None, queue=False)
        demo.unload(stop)
        for clearing in (c["clear"].click, c["chatbot"].clear):
            clearing(lambda: ([], [], ""), None, [c["chatbot"], turns, c["live"]], queue=False).then(
                speed_views, turns, speed_outputs, show_progress="hidden")
        c["export"].click(export, turns, c["files"])

        def pick_model(mode: str, current: str | None) -> dict[str, Any]:
            return model_choices(backend, mode, current)

        c["mode"].change(pick_model, [c["mode"], c["model"]], c["model"], show_progress="hidden")

        def refresh(last: int, mode: str, current: str | None) -> tuple:
            snap = backend.snapshot()
            picked = model_choices(backend, mode, current) if snap.version != last else gr.skip()
            return status_markdown(snap), models_frame(snap), "\n".join(snap.log), snap.version, picked

        refresh_outputs = [status, v["models"], v["log"], seen, c["model"]]
        refresh_inputs = [seen, c["mode"], c["model"]]
        timer.tick(refresh, refresh_inputs, refresh_outputs, show_progress="hidden")
        demo.load(refresh, refresh_inputs, refresh_outputs, show_progress="hidden")
        _wire_server(backend, v, [status])
    return demo


NOT_READY = "○ loading ..."


# --------------------------------------------------------------------------- layout


def _chat_tab() -> dict[str, Any]:
    d = Settings()
    view: dict[str, Any] = {}
    with gr.Row():
        with gr.Column(scale=3):
            view["chatbot"] = gr.Chatbot(
                elem_id="qc-chat", height=520, render_markdown=False, sanitize_html=True, allow_tags=False,
                latex_delimiters=[], group_consecutive_messages=False, feedback_options=None,
                buttons=["copy", "copy_all"], show_label=False,
                placeholder="With the chat template, earlier one-prompt exchanges are sent as history. "
                            "`a|b` sends two prompts in one request (answered apart, not kept in the history); "
                            "`\\|` is a literal |.",
            )
            view["live"] = gr.Markdown(elem_id="qc-live")
            view["box"] = gr.Textbox(show_label=False, placeholder="Message · Enter sends · a|b: two prompts",
                                     lines=1, max_lines=6, elem_id="qc-input", autofocus=True)
            with gr.Row():
                view["send"] = gr.Button("Send", variant="primary", elem_id="qc-send")
                view["stop"] = gr.Button("Stop", variant="stop", elem_id="qc-stop")
                view["retry"] = gr.Button("Retry", elem_id="qc-retry")
                view["clear"] = gr.Button("Clear", elem_id="qc-clear")
                view["export"] = gr.Button("Export", elem_id="qc-export")
            view["files"] = gr.File(label="Transcript (Markdown, JSON with the speed figures)", file_count="multiple",
                                    interactive=False, elem_id="qc-files", visible=False)
        with gr.Column(scale=1, min_width=260):
            view["mode"] = gr.Radio([(label, key) for key, label in MODES.items()], value=d.mode, label="Mode",
                                    elem_id="qc-mode")
            view["model"] = gr.Dropdown([], label="Model", elem_id="qc-model", allow_custom_value=False)
            view["max_tokens"] = gr.Number(d.max_tokens, label="Max tokens (0: up to the context)", precision=0,
                                           minimum=0, elem_id="qc-max-tokens")
            view["temperature"] = gr.Slider(0, 2, d.temperature, step=0.05, label="Temperature (0: greedy)")
            view["top_p"] = gr.Slider(0.05, 1, d.top_p, step=0.05, label="Top p")
            view["top_k"] = gr.Number(d.top_k, label="Top k (0: off)", precision=0, minimum=0)
            view["seed"] = gr.Number(d.seed, label="Seed (0: not sent)", precision=0)
            view["timeout"] = gr.Number(d.timeout, label="Timeout s (0: 600 KV / 6000 causal)", minimum=0,
                                        elem_id="qc-timeout")
            view["system"] = gr.Textbox(d.system, label="System prompt (with the chat template)", lines=2)
            view["chat"] = gr.Checkbox(d.chat, label="Chat template + history (off: raw prompt)",
                                       elem_id="qc-chat-template")
            view["echo"] = gr.Checkbox(d.echo, label="Batch: echo the prompt (exclude_input_in_output=False)",
                                       elem_id="qc-echo")
            view["tokenizer"] = gr.Textbox(d.tokenizer, label="Tokenizer folder (embedded models: built in)")
    return view


def _speed_tab() -> dict[str, Any]:
    view: dict[str, Any] = {}
    view["summary"] = gr.Markdown(summary_markdown([]), elem_id="qc-summary")
    empty = pd.DataFrame(columns=SPEED_COLUMNS)
    with gr.Row():
        for key, title in (("ttft", "TTFT ms"), ("tps", "tokens/s")):
            view[key] = gr.LinePlot(empty, x="#", y=title, color="mode", title=f"{title} per reply", height=240,
                                    x_title="reply", elem_id=f"qc-plot-{key}")
    view["table"] = gr.Dataframe(pd.DataFrame(columns=SPEED_COLUMNS), label="Per reply", interactive=False,
                                 elem_id="qc-speed")
    return view


def _server_tab() -> dict[str, Any]:
    view: dict[str, Any] = {}
    gr.Markdown("#### Run tritonserver here")
    with gr.Row():
        view["repo"] = gr.Textbox(label="Model repository (empty: the embedded SmolLM2 samples in the cache)",
                                  scale=3, elem_id="qc-repo-path")
        view["samples"] = gr.Radio([("embedded (CPU)", "embedded"), ("seed (QAIC)", "seed")], value="embedded",
                                   label="Samples", scale=1)
    with gr.Row():
        view["write"] = gr.Button("Write samples")
        view["inspect"] = gr.Button("Inspect repository")
        view["start"] = gr.Button("Start tritonserver", variant="primary", elem_id="qc-start")
        view["stop"] = gr.Button("Stop tritonserver", variant="stop", elem_id="qc-server-stop")
    view["load"] = gr.CheckboxGroup(list(DEFAULT_MODELS), value=list(DEFAULT_MODELS),
                                    label="Models to load (none ticked: all)")
    view["table"] = gr.Textbox(label="Repository", lines=4, max_lines=12, interactive=False, elem_id="qc-repo")
    gr.Markdown("#### Or connect to a running tritonserver")
    with gr.Row():
        view["http"] = gr.Textbox(label="HTTP host:port", placeholder="127.0.0.1:8000", elem_id="qc-http-url")
        view["grpc"] = gr.Textbox(label="gRPC host:port (empty: HTTP port + 1)", placeholder="127.0.0.1:8001",
                                  elem_id="qc-grpc-url")
        view["connect"] = gr.Button("Connect", elem_id="qc-connect")
    gr.Markdown("#### State")
    view["models"] = gr.Dataframe(pd.DataFrame(columns=["model", "state", "reason"]), label="Models",
                                  interactive=False, elem_id="qc-models")
    view["log"] = gr.Textbox(label="tritonserver log (last lines)", lines=12, max_lines=12, interactive=False,
                             autoscroll=True, elem_id="qc-log")
    return view


def _wire_server(backend: Backend, v: dict[str, Any], status: list) -> None:
    """The Server tab's buttons (the timer shows their effect)."""

    def inspect(repo: str, ticked: list[str]) -> tuple:
        try:
            table, names = describe_repo(repo)
        except (OSError, ValueError) as exc:
            return f"error: {exc}", gr.skip()
        keep = [n for n in ticked if n in names] or [n for n in DEFAULT_MODELS if n in names] or names
        return table, gr.update(choices=names, value=keep)

    def write(repo: str, samples: str, ticked: list[str]) -> tuple:
        try:
            gr.Info(write_samples_into(repo, samples == "embedded"))
        except (OSError, ValueError) as exc:
            gr.Warning(str(exc))
        return inspect(repo, ticked)

    def start(repo: str, ticked: list[str]) -> str:
        try:
            backend.start(repo, ticked)
        except ServerError as exc:
            gr.Warning(str(exc))
        return status_markdown(backend.snapshot())

    def stop() -> str:
        gr.Info(backend.stop())
        return status_markdown(backend.snapshot())

    def connect(http: str, grpc: str) -> str:
        try:
            gr.Info(backend.connect(http, grpc))
        except (ClientError, OSError) as exc:
            gr.Warning(str(exc))
        return status_markdown(backend.snapshot())

    repo_outputs = [v["table"], v["load"]]
    v["inspect"].click(inspect, [v["repo"], v["load"]], repo_outputs)
    v["repo"].submit(inspect, [v["repo"], v["load"]], repo_outputs)
    v["write"].click(write, [v["repo"], v["samples"], v["load"]], repo_outputs)
    v["start"].click(start, [v["repo"], v["load"]], status)
    v["stop"].click(stop, None, status)
    v["connect"].click(connect, [v["http"], v["grpc"]], status)


# --------------------------------------------------------------------------- serving


def _warm_up() -> None:
    """Import transformers now, so the first chat template does not wait seconds for it."""
    with contextlib.suppress(Exception):
        import transformers  # noqa: F401


def launch(backend: Backend, host: str = HOST, port: int | None = None, share: bool = False,
           block: bool = True) -> gr.Blocks:
    """Serve the page on ``host`` (loopback by default; no share link unless ``share``).

    ``block=False`` returns at once (the app runs in a thread: ``block_thread()`` or ``close()`` it).
    """
    demo = build_app(backend)
    threading.Thread(target=_warm_up, name="qc-web-warm-up", daemon=True).start()
    demo.queue(default_concurrency_limit=4)
    demo.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=not block,
                theme=THEME, css=CSS, ssr_mode=False, mcp_server=False, show_error=False, quiet=True,
                footer_links=["gradio", "settings"], inbrowser=False)
    return demo
