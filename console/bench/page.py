"""``bench.html``: a run as a report to send on: its settings in words, the level tables and the plots.

Self-contained (the PNGs inlined); every value is escaped text, numbers rounded as in the console tables.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .display import cell, comparison_rows, level_rows
from .images import NOTE as IMAGES_NOTE
from .images import section_rows
from .plots import DISTRIBUTION_TITLES, have_matplotlib, write_png
from .results import runs_of
from .server_table import notes, server_rows

FORMATS = ("png", "html")
PROTOCOLS = {"grpc": "gRPC", "http": "HTTP", "openai": "the OpenAI API (HTTP)"}
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:80em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left}table.settings td,table.settings th{text-align:left}
figure{display:inline-block;margin:1em 1em 0 0}"""


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _seconds(value: Any) -> str:
    return "none" if not value else f"{value:g} s"


def settings(config: dict[str, Any]) -> list[tuple[str, str]]:
    """The run's settings in words, (setting, value) rows; what does not apply to the run is left out."""
    levels = ", ".join(_number(v) for v in config.get("levels", []))
    rate = config.get("request_rate")
    texts = config.get("batch_size") or 1
    how = (f"embeddings, {_count(texts, 'text')} a request" if config.get("endpoint") == "embeddings"
           else config.get("mode", ""))
    rows = [("model", str(config.get("model", ""))),
            ("server", ", ".join(config.get("urls", []))),
            ("mode", f"{how} over {PROTOCOLS.get(config.get('protocol', ''), '?')}"),
            ("load", f"{levels} requests/s ({config.get('request_distribution')} gaps)" if rate
             else f"concurrency {levels}")]
    if config.get("duration"):
        rows.append(("each level", f"{config['duration']:g} s (requests in flight then finish)"))
    else:
        rows.append(("requests per level", str(config.get("requests") or "4 × concurrency, at least 8")))
    rows.append(("warm-up", f"{_count(config.get('warmup', 0), 'request')}, not measured"))
    if config.get("images"):
        rows.append(("images", f"from {config['images']}, one a request in turn; the same prompts also as text only"))
    if config.get("input_file"):
        rows.append(("prompts", f"from {config['input_file']}"))
    else:
        rows.append(("prompts", f"synthetic, {config.get('input_tokens_mean', 0):g} ± "
                                f"{config.get('input_tokens_stddev', 0):g} tokens"))
    if config.get("endpoint") != "embeddings":
        rows.append(("output tokens", f"{config.get('output_tokens_mean', 0):g} ± "
                                      f"{config.get('output_tokens_stddev', 0):g} (sent as max_tokens; a reply may end "
                                      "earlier)"))
        params = config.get("params") or {}
        rows.append(("generation controls", ", ".join(f"{k} {_number(v)}" for k, v in params.items()) or "defaults"))
    timeouts = config.get("timeouts") or {}
    idle = f", idle {_seconds(timeouts['idle'])}" if config.get("mode") == "stream" and "idle" in timeouts else ""
    rows.append(("timeouts", f"network {_seconds(timeouts.get('network'))}{idle}"))
    rows.append(("seed", f"{config.get('seed', 0)} (prompts, lengths, schedule)"))
    rows.append(("started", str(config.get("started", "")).replace("T", " ")))
    return rows


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], kind: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(c))}</td>" for c in row) + "</tr>" for row in rows)
    attribute = f' class="{kind}"' if kind else ""
    return f"<table{attribute}><tr>{head}</tr>{body}</table>"


def _results(document: dict[str, Any]) -> str:
    """The level table (one per server, then the side-by-side comparison, for several servers)."""
    runs = runs_of(document)
    parts = []
    for name, levels in runs:
        parts.append(f"<h2>{html.escape(str(name) if name else 'Results')}</h2>" + _table(*level_rows(levels))
                     + _server(levels))
    if document.get("comparison"):
        names = [str(name) for name, _ in runs]
        parts.append(f"<h2>Side by side (ratios to {html.escape(names[0])})</h2>"
                     + _table(*comparison_rows(document["comparison"], names)))
    if document.get("images"):
        parts.append("<h2>Images beside text only</h2>" + _table(*section_rows(document["images"]))
                     + f"<p>{html.escape(IMAGES_NOTE)}.</p>")
    return "".join(parts)


def _server(levels: list[dict[str, Any]]) -> str:
    """The server's side of each level (its metrics, the card) and where those figures come from."""
    said = "".join(f"<li>{html.escape(line)}</li>" for line in notes(levels))
    return f"<h3>Server side</h3>{_table(*server_rows(levels))}<ul>{said}</ul>"


def _figure(png: Path) -> str:
    alt = html.escape(DISTRIBUTION_TITLES.get(png.stem, png.stem.replace("_", " ").capitalize()))
    data = base64.b64encode(png.read_bytes()).decode()
    return f'<figure><img alt="{alt}" src="data:image/png;base64,{data}"></figure>'


def write_html(document: dict[str, Any], out_dir: Path, pngs: Sequence[Path]) -> Path:
    """``bench.html``: the settings table, the level tables and the PNGs inlined."""
    config = document["config"]
    title = f"qaic-console bench: {config.get('model', '')} ({config.get('mode', '')})"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{STYLE}</style></head>
<body><h1>{html.escape(title)}</h1><h2>Settings</h2>{_table(("setting", "value"), settings(config), "settings")}
{_results(document)}
<p>Times in ms, throughputs over each level's wall time (first send to last answer); avg, p99: over the level's
requests; genai-perf's names in bench.json.</p>
{"".join(_figure(p) for p in pngs)}</body></html>
"""
    path = out_dir / "bench.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_plots(document: dict[str, Any], out_dir: Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """The requested plot files; PNGs are skipped (HTML keeps its table) when matplotlib is missing."""
    pngs = write_png(document, out_dir) if ("png" in formats or "html" in formats) and have_matplotlib() else []
    written = list(pngs) if "png" in formats else []
    if "html" in formats:
        written.append(write_html(document, out_dir, pngs))
        if "png" not in formats:
            for png in pngs:
                png.unlink()
    return written
