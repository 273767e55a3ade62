"""The Server tab's metrics: per model, what the server's metrics page says, and a minute of it plotted.

One :class:`~console.metrics.MetricsWatch` for the page (every browser tab shows the same server), read by the
section's own timer while a server answers, whatever tab is in front (so it follows a chat or a bench).
"""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd

from console.core.controller import ServerController
from console.fleet.watch import watcher
from console.metrics import HEADER, Look, rows

TICK_S = 1.0
GIVE = "type it in the Metrics page field"  # said when the server's page is guessed or not found
PLOTS = (("tokens_per_s", "tokens/s"), ("occupancy", "slots in use"))


def table(look: Look) -> pd.DataFrame:
    return pd.DataFrame(rows(look.figures), columns=list(HEADER))


def history(look: Look, name: str, label: str) -> pd.DataFrame | None:
    """``name``'s recent values per model against the seconds before the last scrape (None: no history; a plot
    given an empty frame draws no line afterwards)."""
    newest = max((f.at for h in look.history.values() for f in h), default=0.0)
    frame = [{"seconds": round(f.at - newest, 1), label: value, "model": model}
             for model, figures in look.history.items() for f, value in zip(figures, look.series(model, name))]
    return pd.DataFrame(frame, columns=["seconds", label, "model"]) if frame else None


def metrics_section(controller: ServerController, metrics_url: str = "", prometheus: str = "") -> None:
    """Lay the section out where it is called (inside the Server tab) and wire its timer (``prometheus``: a fleet's
    figures from it, whether or not a server is connected)."""
    follow = watcher(prometheus, GIVE)
    gr.Markdown("#### Metrics")
    note = gr.Markdown("no metrics: no server", elem_id="qc-metrics-note")
    url = gr.Textbox(metrics_url, label="Metrics page (blank: the server's own; Triton: its metrics port, the HTTP "
                     "port + 2 for a server reached by URL)", placeholder="host:port or http://host:port/metrics",
                     elem_id="qc-metrics-url")
    frame = gr.Dataframe(pd.DataFrame(columns=list(HEADER)), label="Per model (queue and compute ms: Triton's, per "
                         "request; slot wait, TTFT and step: the backend's)", interactive=False, elem_id="qc-metrics")
    with gr.Row():
        plots = [gr.LinePlot(None, x="seconds", y=label, color="model", title=label, height=220,
                             y_axis_format=",.2~f",  # 0 and 0.25, not 0.000000 on an idle server's flat line
                             elem_id=f"qc-metrics-{name.replace('_', '-')}")
                 for name, label in PLOTS]

    def tick(override: str) -> tuple[Any, ...]:
        snap = controller.snapshot
        live = prometheus or snap.serving or snap.phase == "unreachable"
        look = follow.look(snap.server if live else None, override or "")
        return (look.note, table(look), *(history(look, name, label) for name, label in PLOTS))

    gr.Timer(TICK_S).tick(tick, url, [note, frame, *plots], show_progress="hidden")
