"""The Gradio page: layout and wiring only (what the events do is in :mod:`.handlers`, what is shown in :mod:`.views`;
the Server tab is :mod:`.server_tab`).

Chat (stream or batch, controls made from the controls table), Speed (per mode) and Server tabs;
the header and the Server tab follow the shared server controller through a timer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr
import pandas as pd
from starlette.middleware import Middleware

from console.clients import CONTROLS
from console.core.controls import TIMEOUT_RULE, form_default, form_placeholder

from . import files, views
from .handlers import EMPTY_BOX, WebConsole
from .login import Gate, Login
from .metrics_section import metrics_section
from .server_tab import TICKED
from .server_tab import layout as server_tab_layout
from .server_tab import wire as wire_server_tab

HOST = "127.0.0.1"
TICK_S = 1.0
CSS = """
.qc-heat { border-collapse: collapse; font-variant-numeric: tabular-nums; }
.qc-heat th, .qc-heat td { padding: 0.3rem 0.6rem; text-align: right; border: 1px solid var(--border-color-primary); }
.qc-heat th { text-align: left; font-weight: 600; }
#qc-chat .message-content, #qc-chat .md, #qc-chat .prose { white-space: pre-wrap; }
.qc-invalid input, .qc-invalid textarea { outline: 2px solid var(--error-border-color, #ef4444) !important;
  outline-offset: -1px; }
.qc-invalid [data-testid="block-info"], .qc-invalid .info { color: var(--error-text-color, #b91c1c); }
#qc-log textarea, #qc-repo-path textarea { font-family: ui-monospace, monospace; font-size: 12px; }
/* a Speed plot's label (why it is empty) takes its room from the chart, never pushes the chart's bottom out */
.qc-plot { display: flex; flex-direction: column; }
.qc-plot .vega-embed { flex: 1 1 0; min-height: 0; height: auto; }
/* toasts at the bottom right, over the chat's side column: never over the status line at the top */
.toast-wrap { top: auto !important; bottom: var(--size-3); width: min(18rem, calc(100% - var(--size-6))) !important; }
"""
THEME = gr.themes.Soft(font=["ui-sans-serif", "system-ui", "sans-serif"], font_mono=["ui-monospace", "monospace"])
SCROLL_LOG = """() => requestAnimationFrame(() => {
  const t = document.querySelector('#qc-log textarea'); if (t) t.scrollTop = t.scrollHeight; })"""
CLOSE_TOASTS = "() => document.querySelectorAll('.toast-close').forEach(b => b.click())"  # about the tab left
PLACEHOLDER = ("With the chat template, earlier one-prompt exchanges of the same mode are sent as history. "
               "`a|b` sends two prompts in one request (answered apart, no history); `\\|` is a literal |.")


def build_app(console: WebConsole, metrics_url: str = "", prometheus: str = "") -> gr.Blocks:
    """The page; every tab of the app shares ``console`` (its server), chat state is per browser tab
    (``metrics_url``: the metrics page to show instead of the server's own; ``prometheus``: a fleet's)."""
    with gr.Blocks(title="qaic-console", analytics_enabled=False) as demo:
        turns = gr.State([])
        seen = gr.State((-1, ""))  # (generation, repository) this tab shows
        gr.Markdown("## qaic-console · LLMs on Cloud AI 100 through Triton")
        status = gr.Markdown("○ loading …", elem_id="qc-status")
        with gr.Tabs() as tabs:
            with gr.Tab("Chat", id="chat"):
                chat = _chat_tab()
            with gr.Tab("Speed", id="speed"):
                speed = _speed_tab()
            with gr.Tab("Embeddings", id="embed"):
                _embed_tab(console)
            with gr.Tab("Server", id="server") as server_tab:
                server = server_tab_layout()
                metrics_section(console.controller, metrics_url, prometheus)
        stop = _wire_chat(console, chat, turns, list(speed.values()))
        demo.unload(stop)  # closing the tab stops its message (on the server too)
        wire_server_tab(console.server, server, status)
        refresh_inputs = [seen, chat["mode"], chat["model"], server["load"], server["raw"]]
        refresh_outputs = [status, seen, chat["model"], chat["note"], *(server[name] for name in TICKED)]
        gr.Timer(TICK_S).tick(console.refresh, refresh_inputs, refresh_outputs, show_progress="hidden")
        demo.load(console.refresh, refresh_inputs, refresh_outputs, show_progress="hidden")
        server["log"].change(None, js=SCROLL_LOG)
        server_tab.select(None, js=SCROLL_LOG)
        tabs.select(None, js=CLOSE_TOASTS)
    return demo


# --------------------------------------------------------------------------- layout


def _chat_tab() -> dict[str, Any]:
    view: dict[str, Any] = {}
    with gr.Row():
        with gr.Column(scale=3):
            view["chatbot"] = gr.Chatbot(
                elem_id="qc-chat", height=520, render_markdown=False, sanitize_html=True, allow_tags=False,
                latex_delimiters=[], group_consecutive_messages=False, feedback_options=None,
                buttons=["copy", "copy_all"], show_label=False, placeholder=PLACEHOLDER,
            )
            view["live"] = gr.Markdown(elem_id="qc-live")
            view["box"] = gr.MultimodalTextbox(
                show_label=False, placeholder="Message · Enter sends · a|b: two prompts · attach or paste images",
                file_types=["image"], file_count="multiple", sources=["upload"], submit_btn=False, lines=1,
                max_lines=6, elem_id="qc-input", autofocus=True)
            with gr.Row():
                view["send"] = gr.Button("Send", variant="primary", elem_id="qc-send")
                view["stop"] = gr.Button("Stop", variant="stop", elem_id="qc-stop")
                view["retry"] = gr.Button("Retry", elem_id="qc-retry")
                view["clear"] = gr.Button("Clear", elem_id="qc-clear")
                view["export"] = gr.Button("Export", elem_id="qc-export")
            view["files"] = gr.File(label="Transcript (Markdown, JSON with the speed figures)", file_count="multiple",
                                    interactive=False, elem_id="qc-files", visible=False)
        with gr.Column(scale=1, min_width=280):
            view["mode"] = gr.Radio([(label, key) for key, label in views.MODES.items()], value="stream",
                                    label="Mode", elem_id="qc-mode")
            # custom values allowed: a tick's choices may cross a mode change in flight (the server checks the name)
            view["model"] = gr.Dropdown([], label="Model", elem_id="qc-model", allow_custom_value=True)
            view["picks"] = gr.State({})  # the model picked in each mode: that mode's again after the other
            view["note"] = gr.Markdown(elem_id="qc-model-note")
            view["chat"] = gr.Checkbox(True, label="Chat template + history (off: raw prompt)",
                                       elem_id="qc-chat-template")
            with gr.Accordion("Controls (blank: the model's default)", open=False, elem_id="qc-controls"):
                view["controls"] = {
                    c.name: gr.Textbox(form_default(c), label=c.label, info=views.control_info(c),
                                       placeholder=form_placeholder(c), lines=1, max_lines=1,
                                       elem_id=f"qc-control-{c.name.replace('_', '-')}")
                    for c in CONTROLS
                }
                view["timeout"] = gr.Textbox("", label="Timeout s", info=f"Whole call: {TIMEOUT_RULE}.",
                                             placeholder="model default", elem_id="qc-timeout")
            view["system"] = gr.Textbox("", label="System prompt (with the chat template)", lines=2)
            view["echo"] = gr.Checkbox(False, label="Show each prompt before its reply",
                                       elem_id="qc-echo")
            view["tokenizer"] = gr.Textbox("", label="Tokenizer folder (embedded models: built in)")
    return view


def _embed_tab(console: WebConsole) -> None:
    """Texts to an embedding model: each one's dimension and norm, and how alike every pair is (a heat map)."""
    with gr.Row():
        box = gr.Textbox(show_label=False, placeholder="a|b|c · Enter embeds: texts separated by |", lines=1,
                         max_lines=4, elem_id="qc-embed-input", scale=4)
        model = gr.Textbox("", show_label=False, placeholder="model (blank: the server's first embedding model)",
                           elem_id="qc-embed-model", scale=2)
        ask = gr.Button("Embed", variant="primary", elem_id="qc-embed-send", scale=1)
    status = gr.Markdown(elem_id="qc-embed-status")
    rows = gr.Dataframe(pd.DataFrame(columns=views.EMBED_COLUMNS), label="Inputs", interactive=False,
                        elem_id="qc-embed-rows")
    heat = gr.HTML(elem_id="qc-embed-heat")
    gr.on([ask.click, box.submit], console.embed, [box, model], [status, rows, heat], concurrency_limit=None)


def _speed_tab() -> dict[str, Any]:
    view: dict[str, Any] = {"summary": gr.Markdown(views.summary_markdown([]), elem_id="qc-summary")}
    empty = views.plot_data(views.speed_table([]))
    with gr.Row():
        for key in ("ttft", "latency"):
            view[key] = gr.ScatterPlot(empty[key], x="reply", y=views.PLOTS[key][0], x_title="reply", y_title="ms",
                                       title=views.PLOTS[key][1], y_axis_format=",.0f", height=240, sort=[],
                                       elem_id=f"qc-plot-{key}", elem_classes=["qc-plot"],
                                       **views.plot_label(key, empty[key]))
        view["tps"] = gr.ScatterPlot(empty["tps"], x="reply", y="tokens/s", color="mode", x_title="reply",
                                     title=views.PLOTS["tps"][1], y_axis_format=",.1f", height=240, sort=[],
                                     elem_id="qc-plot-tps", elem_classes=["qc-plot"],
                                     **views.plot_label("tps", empty["tps"]))
    view["table"] = gr.Dataframe(views.speed_table([]), label="Per reply (times in ms)", interactive=False,
                                 elem_id="qc-speed")
    return {k: view[k] for k in ("summary", "table", "ttft", "latency", "tps")}  # the order speed() returns


# --------------------------------------------------------------------------- wiring


def _tab(request: gr.Request) -> str:
    """The browser tab an event comes from: Gradio's session hash, which every event of a page carries."""
    if request.session_hash is None:
        raise gr.Error("this event came without its page's session: reload the page")
    return request.session_hash


def _wire_chat(console: WebConsole, c: dict[str, Any], turns: gr.State,
               speed_outputs: list[Any]) -> Callable[[gr.Request], None]:
    """The chat's events; returns the tab's stop handler."""
    fields = {"mode": c["mode"], "model": c["model"], "chat": c["chat"], "system": c["system"],
              "tokenizer": c["tokenizer"], "echo": c["echo"], "timeout": c["timeout"], **c["controls"]}

    def form(values: dict) -> dict[str, Any]:
        return {name: values[comp] for name, comp in fields.items()}

    def send(values: dict, request: gr.Request) -> Iterator[tuple]:
        yield from console.send(_tab(request), values[taken], values[turns], form(values))

    def retry(values: dict, request: gr.Request) -> Iterator[tuple]:
        yield from console.retry(_tab(request), values[turns], form(values))

    def stop(request: gr.Request) -> None:
        console.stop(_tab(request))

    def clear(request: gr.Request) -> tuple:
        console.stop(_tab(request))
        return [], [], ""

    taken = gr.State(EMPTY_BOX)  # the message the box held when it was sent (Gradio's ChatInterface does so)
    inputs = {taken, turns, *fields.values()}
    outputs = [c["chatbot"], turns, c["live"], c["box"]]
    # the box is emptied at once, by an unqueued event, and its message handed to the queued send, which puts it
    # back when it refuses it; "multiple": every send reaches the handler, which refuses one while the tab's reply
    # is still coming, saying so (Gradio's "once" drops it without a word, also just after the last frame)
    sending = gr.on([c["send"].click, c["box"].submit], lambda box: (EMPTY_BOX, box), c["box"],
                    [c["box"], taken], queue=False, show_progress="hidden", trigger_mode="multiple").then(
        send, inputs, outputs, concurrency_limit=None, show_progress="hidden", trigger_mode="multiple")
    retrying = c["retry"].click(retry, inputs, outputs, concurrency_limit=None, show_progress="hidden",
                                trigger_mode="multiple")
    clearing = c["clear"].click(clear, None, [c["chatbot"], turns, c["live"]], queue=False)
    for event in (sending, retrying, clearing):
        event.then(console.speed, turns, speed_outputs, show_progress="hidden")
    c["stop"].click(stop, None, None, queue=False)
    c["export"].click(console.export, turns, c["files"])
    c["mode"].change(console.mode_changed, [c["mode"], c["picks"]], [c["model"], c["note"]], show_progress="hidden")
    c["model"].input(lambda mode, model, picks: {**picks, mode: model}, [c["mode"], c["model"], c["picks"]],
                     c["picks"], queue=False)
    for control in CONTROLS:  # a bad value is marked in its field as it is typed (a send is refused, saying why)
        box = c["controls"][control.name]
        box.change(lambda text, control=control: gr.update(**views.control_field(control, text)), box, box,
                   show_progress="hidden", queue=False)
    c["model"].change(console.model_note, c["model"], c["note"], show_progress="hidden")
    return stop


# --------------------------------------------------------------------------- serving


class Served:
    """The page being served: where to open it (with its token) and its end, which removes the console's folder."""

    def __init__(self, demo: gr.Blocks, login: Login, console: WebConsole) -> None:
        self.demo, self.login, self.console = demo, login, console

    @property
    def url(self) -> str:
        """The address to open, with the token."""
        return self.login.url(self.demo.local_url)

    @property
    def share_url(self) -> str:
        """The share link with the token, or ''."""
        return self.login.url(self.demo.share_url)

    def block(self) -> None:
        """Wait until Ctrl-C or SIGTERM (KeyboardInterrupt): not Gradio's wait, which catches it and says
        "Keyboard interruption in main thread... closing server." on a clean stop."""
        threading.Event().wait()

    def close(self) -> None:
        try:
            self.demo.close(verbose=False)  # the console says it stopped; Gradio's own line would follow it
        finally:
            files.remove(self.console.folder)


def launch(console: WebConsole, host: str = HOST, port: int | None = None, share: bool = False,
           block: bool = True, login: Login | None = None, metrics_url: str = "", prometheus: str = "") -> Served:
    """Serve the page on ``host`` (loopback by default; no share link unless ``share``) behind ``login`` (default:
    a new token); Gradio keeps its files in the console's folder.

    ``block=False`` returns at once (the app runs in a thread: ``block()`` or ``close()`` it).
    """
    login = login or Login.new(host)
    files.gradio_into(console.folder)
    demo = build_app(console, metrics_url, prometheus)
    demo.queue(default_concurrency_limit=4)
    demo.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=True, theme=THEME,
                css=CSS, ssr_mode=False, mcp_server=False, show_error=False, quiet=True,
                footer_links=["gradio", "settings"], inbrowser=False,
                app_kwargs={"middleware": [Middleware(Gate, login=login)]})
    login.opened = True  # Gradio's own start-up call is made: nothing else gets in without the token
    login.allow(demo.share_url)
    served = Served(demo, login, console)
    if block:
        served.block()
    return served
