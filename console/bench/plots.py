"""Plots of a benchmark document: throughput vs load, TTFT and ITL distributions (PNG, HTML).

PNGs are drawn with matplotlib's Agg backend; the HTML page is self-contained (the PNGs inlined,
the level table as HTML). Without matplotlib the HTML page still carries the table.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from .results import HEADLINE, level_key, runs_of, value

FORMATS = ("png", "html")


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _x(levels: list[dict[str, Any]]) -> tuple[list[float], str]:
    if all(lv.get("concurrency") is not None for lv in levels):
        return [float(lv["concurrency"]) for lv in levels], "concurrency"
    return [float(lv.get("request_rate") or 0) for lv in levels], "request rate (requests/s)"


def _throughput(document: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig = throughput_figure(document)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def throughput_figure(document: dict[str, Any]) -> Any:
    """Output tokens/s and requests/s against the load, each on its own plot."""
    import matplotlib.pyplot as plt

    runs = runs_of(document)
    xs, label = _x(document["levels"])
    # two plots, one axis each: with requests of similar lengths the two curves have the same shape and
    # would lie on top of each other on twin axes
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.6), sharex=True)
    for i, (name, levels) in enumerate(runs):  # several servers: one line each, in the same colour on both
        colour = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")[i % 5] if name else None
        tokens = [value(lv, "output_token_throughput") or 0.0 for lv in levels]
        requests = [value(lv, "request_throughput") or 0.0 for lv in levels]
        top.plot(xs, tokens, "o-", color=colour or "tab:blue", label=name)
        bottom.plot(xs, requests, "s--", color=colour or "tab:orange", label=name)
    if len(runs) > 1:
        top.legend()
    top.set_ylabel("output tokens/s")
    bottom.set_ylabel("requests/s")
    bottom.set_xlabel(label)
    if label == "concurrency" and len(xs) > 1 and min(xs) > 0:
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(xs, [f"{x:g}" for x in xs])
    for axis in (top, bottom):
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    top.set_title(f"{document['config'].get('model', '')} ({document['config'].get('mode', '')}): throughput")
    fig.tight_layout()
    return fig


def _distribution(document: dict[str, Any], field: str, title: str, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    series = []
    for level in document["levels"]:
        values = [r[field] for r in level["requests"] if r.get(field) is not None and not r.get("error")]
        if values:
            series.append((level_key(level), values))
    if not series:
        return None
    fig, axis = plt.subplots(figsize=(7, 4.2))
    axis.boxplot([v for _, v in series], showfliers=True)
    axis.set_xticks(range(1, len(series) + 1), [k for k, _ in series])
    axis.set_ylabel("ms")
    axis.set_xlabel("level")
    axis.set_title(f"{title} per request")
    axis.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_png(document: dict[str, Any], out_dir: Path) -> list[Path]:
    """``throughput.png``, ``time_to_first_token.png`` and ``inter_token_latency.png`` (when streamed)."""
    import matplotlib

    matplotlib.use("Agg")
    paths = [_throughput(document, out_dir / "throughput.png")]
    for field, title in (("time_to_first_token_ms", "time_to_first_token"),
                         ("inter_token_latency_ms", "inter_token_latency"),
                         ("request_latency_ms", "request_latency")):
        path = _distribution(document, field, title, out_dir / f"{title}.png")
        if path is not None:
            paths.append(path)
    return paths + _breakdowns(document, out_dir)


def _breakdowns(document: dict[str, Any], out_dir: Path) -> list[Path]:
    """``ttft_breakdown.png`` (one per server of a run: ``ttft_breakdown_2.png`` ...), where the server has metrics."""
    import matplotlib.pyplot as plt

    from .server_view import breakdown_figure

    paths = []
    for i, (name, levels) in enumerate(runs_of(document)):
        fig = breakdown_figure(levels, name or str(document["config"].get("model", "")))
        if fig is not None:
            paths.append(out_dir / f"ttft_breakdown{f'_{i + 1}' if i else ''}.png")
            fig.savefig(paths[-1], dpi=110)
            plt.close(fig)
    return paths


def _table(header: list[str], rows: list[list[Any]]) -> str:
    cells = ("".join(f"<td>{'-' if c is None else html.escape(f'{c:g}' if isinstance(c, float) else str(c))}"
                     "</td>" for c in row) for row in rows)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    return f"<table><tr>{head}</tr>" + "".join(f"<tr>{r}</tr>" for r in cells) + "</table>"


def _html_table(document: dict[str, Any]) -> str:
    """The level table (one per server, then the side-by-side comparison, for several servers)."""
    header = ["level", "requests", "errors", *(label for _, _, label in HEADLINE)]
    runs = runs_of(document)
    parts = []
    for name, levels in runs:
        rows = [[level_key(lv), lv["request_count"], lv["error_count"],
                 *(value(lv, metric, stat) for metric, stat, _ in HEADLINE)] for lv in levels]
        parts.append((f"<h2>{html.escape(name)}</h2>" if name else "") + _table(header, rows) + _server_html(levels))
    if document.get("comparison"):
        names = [str(name) for name, _ in runs]
        rows = [[r["level"], r["metric"], *r["values"], *r["ratios"][1:]] for r in document["comparison"]]
        parts.append(f"<h2>side by side (ratios to {html.escape(names[0])})</h2>" + _table(
            ["level", "metric", *names, *(f"{n} / {names[0]}" for n in names[1:])], rows))
    return "".join(parts)


def _server_html(levels: list[dict[str, Any]]) -> str:
    """The server's side of each level (its metrics, the card) and where the figures come from."""
    from .server_view import notes, server_rows

    header, rows = server_rows(levels)
    said = "".join(f"<li>{html.escape(line)}</li>" for line in notes(levels))
    return f"<h3>server side</h3>{_table(header, rows)}<ul>{said}</ul>"


def write_html(document: dict[str, Any], out_dir: Path, pngs: list[Path]) -> Path:
    """``bench.html``: the configuration, the level table and the PNGs inlined."""
    config = document["config"]
    images = "".join(
        f'<figure><img alt="{html.escape(p.stem)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}"></figure>' for p in pngs
    )
    settings = "".join(f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>" for k, v in config.items())
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>qaic-console bench: {html.escape(str(config.get('model', '')))}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}th{{background:#eee}}
figure{{display:inline-block;margin:1em}}</style></head>
<body><h1>qaic-console bench</h1><ul>{settings}</ul>{_html_table(document)}{images}</body></html>
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
