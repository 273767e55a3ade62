"""The Server tab: its layout, its events and what each timer tick updates in it.

The Repository table lists a repository as soon as the page opens (the embedded samples, or the one served) and
again when the repository served changes; errors about it are said beside the buttons, never over them. The URL
fields show where the server answers once it does. The log is condensed (``logparse.condensed``) unless *Raw log*
is ticked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from console.clients import ClientError
from console.core.controller import ServerController, Snapshot
from console.server import LOG_KEEP, ServerError, embedded
from console.server.embedded import DEFAULT_MODELS
from console.server.errors import repository_not_found
from console.server.logparse import NOISE_NOTE

from . import views

LOG_LINES = 80
URL_LOG = "(a server reached by URL: its log is where it runs)"
TICKED = ("models", "log", "repo", "start", "stop", "listing", "load", "http", "grpc")  # what a tick updates


def layout() -> dict[str, Any]:
    """The tab's components by name."""
    from repo_gen.samples import EMBEDDED_SAMPLES

    view: dict[str, Any] = {}
    gr.Markdown("#### Run tritonserver here")
    view["repo"] = gr.Textbox(label="Model repository (empty: the embedded SmolLM2 samples)", elem_id="qc-repo-path")
    with gr.Row(equal_height=True):
        view["list"] = gr.Button("List models", scale=0, min_width=140, elem_id="qc-list")
        view["start"] = gr.Button("Start tritonserver", variant="primary", scale=0, min_width=210,
                                  elem_id="qc-start")
        view["stop"] = gr.Button("Stop tritonserver", interactive=False, scale=0, min_width=210,
                                 elem_id="qc-server-stop")
        view["note"] = gr.Markdown(elem_id="qc-server-note")
    view["load"] = gr.CheckboxGroup(list(EMBEDDED_SAMPLES), value=list(DEFAULT_MODELS), elem_id="qc-load",
                                    label="Models to load (none ticked: all; causal ones are slow on a CPU)")
    view["listing"] = gr.Dataframe(pd.DataFrame(columns=views.REPO_COLUMNS),
                                   label="Repository", interactive=False, elem_id="qc-repo")
    gr.Markdown("#### Or connect to a running server: tritonserver, or an OpenAI-compatible one by its /v1 URL")
    with gr.Row():
        view["http"] = gr.Textbox(label="HTTP host:port (or http://host:port/v1: OpenAI-compatible)",
                                  placeholder="127.0.0.1:8000", elem_id="qc-http-url")
        view["grpc"] = gr.Textbox(label="gRPC host:port (empty: HTTP port + 1)", placeholder="127.0.0.1:8001",
                                  elem_id="qc-grpc-url")
        view["connect"] = gr.Button("Connect", elem_id="qc-connect")
    gr.Markdown("#### State")
    view["models"] = gr.Dataframe(pd.DataFrame(columns=views.MODEL_COLUMNS), label="Models", interactive=False,
                                  elem_id="qc-models")
    view["raw"] = gr.Checkbox(False, label="Raw log (as tritonserver writes it, with its tables)",
                              elem_id="qc-raw-log")
    view["log"] = gr.Textbox(label="tritonserver log (last lines)", info=NOISE_NOTE, lines=14, max_lines=14,
                             interactive=False, autoscroll=True, elem_id="qc-log")
    return view


def wire(tab: ServerTab, v: dict[str, Any], status: gr.Markdown) -> None:
    listing = [v["listing"], v["load"], v["note"]]
    v["list"].click(tab.list_repository, [v["repo"], v["load"]], listing, show_progress="hidden")
    v["repo"].submit(tab.list_repository, [v["repo"], v["load"]], listing, show_progress="hidden")
    v["start"].click(tab.start, [v["repo"], v["load"]], [status, v["note"]])
    v["stop"].click(tab.stop, None, [status, v["note"]])
    v["connect"].click(tab.connect, [v["http"], v["grpc"]], [status, v["note"]])
    v["raw"].change(tab.log, v["raw"], v["log"], show_progress="hidden")


class ServerTab:
    """The tab's events on the shared server controller."""

    def __init__(self, controller: ServerController) -> None:
        self.controller = controller

    def tick(self, snap: Snapshot, seen: tuple[int, str], shown: str, ticked: list[str], raw: bool) -> tuple[Any, ...]:
        """The tab's updates (TICKED) for a tab that showed ``seen`` (generation, repository); ``shown`` is the
        repository it shows now (the one served here, else the one it showed)."""
        moved, relist = snap.generation != seen[0], seen[0] < 0 or shown != seen[1]
        running = snap.owned and snap.phase in ("starting", "ready", "stopping")
        connected = not snap.owned and snap.phase in ("connected", "unreachable")
        start = gr.update(variant="secondary" if running or snap.serving else "primary", interactive=not running)
        stop = gr.update(value="Disconnect" if connected else "Stop tritonserver", interactive=running or connected,
                         variant="stop" if running else "secondary")
        table, load, _ = self.list_repository(shown, ticked) if relist else (gr.skip(), gr.skip(), "")
        # where the server answers, once it does; emptied when it stops (no dead server's address to connect to)
        urls = (snap.http_url or "", snap.grpc_url or "") if moved else (gr.skip(), gr.skip())
        return (views.model_table(snap), self.log(raw), shown if shown != seen[1] else gr.skip(), start, stop,
                table, load, *urls)

    def log(self, raw: bool) -> str:
        """The log box: the server's last lines here, condensed unless ``raw``."""
        snap = self.controller.snapshot
        if snap.owned:
            return views.log_text(self.controller.log_tail(LOG_KEEP), raw, LOG_LINES)
        return URL_LOG if snap.http_url else ""

    @staticmethod
    def list_repository(repo: str, ticked: list[str]) -> tuple[Any, Any, str]:
        """The repository's models (empty: the embedded samples) as a table and as the models to load, and the
        note beside the buttons (why it cannot be listed)."""
        from repo_gen.inspection import list_models

        try:
            path = Path(repo).expanduser() if repo.strip() else embedded.embedded_repo(lambda _: None)
            found = list_models(path)
        except (OSError, ValueError) as exc:
            return gr.skip(), gr.skip(), views.md(f"✖ {' '.join(str(exc).split())}")
        names = [m.name for m in found]
        return (views.repo_table(found), gr.update(choices=names, value=[n for n in ticked if n in names]),
                views.md(f"{len(names)} models in {path}"))

    def start(self, repo: str, models: list[str]) -> tuple[str, str]:
        """Start tritonserver here on ``repo`` (empty: the embedded samples) loading the ticked models."""
        path = Path(repo).expanduser() if repo.strip() else None
        note = ""
        if path is not None and not path.is_dir():
            note = f"✖ {repository_not_found(repo)}"
        else:
            try:
                self.controller.start(path, models)
            except ServerError as exc:
                note = f"✖ {exc}"
        return views.status_markdown(self.controller.snapshot), views.md(note)

    def stop(self) -> tuple[str, str]:
        """Stop the server started here, or let go of the one reached by URL."""
        return views.status_markdown(self.controller.stop()), ""

    def connect(self, http: str, grpc: str) -> tuple[str, str]:
        """Use the running server at ``http`` (and ``grpc``, default: the HTTP port + 1)."""
        note = ""
        try:
            self.controller.connect(http, grpc)
        except (ClientError, OSError) as exc:
            note = f"✖ {exc}"
        return views.status_markdown(self.controller.snapshot), views.md(note)
