"""Plots of a benchmark document: throughput vs load, TTFT, ITL and latency distributions (PNG); the HTML report
that shows them: :mod:`.page`.

PNGs are drawn with matplotlib's Agg backend. Without matplotlib the HTML page still carries the tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .results import embeddings, level_key, runs_of, value
from .server_table import breakdown_figure

DISTRIBUTION_TITLES = {"time_to_first_token": "Time to first token", "inter_token_latency": "Inter-token latency",
                       "request_latency": "Request latency"}  # per request, in ms (the file is named by the key)


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
    import matplotlib.pyplot as plt  # matplotlib (the bench extra) is optional

    fig = throughput_figure(document)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def throughput_figure(document: dict[str, Any]) -> Any:
    """Output tokens/s (an embeddings run: inputs/s) and requests/s against the load, each on its own plot."""
    import matplotlib.pyplot as plt  # matplotlib (the bench extra) is optional

    runs = runs_of(document)
    xs, label = _x(document["levels"])
    # two plots, one axis each: with requests of similar lengths the two curves have the same shape and
    # would lie on top of each other on twin axes
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.6), sharex=True)
    metric, unit = (("input_throughput", "inputs/s") if embeddings(document["levels"]) else
                    ("output_token_throughput", "output tokens/s"))
    for i, (name, levels) in enumerate(runs):  # several servers: one line each, in the same colour on both
        colour = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")[i % 5] if name else None
        tokens = [value(lv, metric) or 0.0 for lv in levels]
        requests = [value(lv, "request_throughput") or 0.0 for lv in levels]
        top.plot(xs, tokens, "o-", color=colour or "tab:blue", label=name)
        bottom.plot(xs, requests, "s--", color=colour or "tab:orange", label=name)
    if len(runs) > 1:
        top.legend()
    top.set_ylabel(unit)
    bottom.set_ylabel("requests/s")
    bottom.set_xlabel(label)
    if label == "concurrency" and len(xs) > 1 and min(xs) > 0:
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(xs, [f"{x:g}" for x in xs])
    for axis in (top, bottom):
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    top.set_title(f"Throughput: {document['config'].get('model', '')} ({document['config'].get('mode', '')})")
    fig.tight_layout()
    return fig


def _distribution(document: dict[str, Any], field: str, title: str, path: Path) -> Path | None:
    import matplotlib.pyplot as plt  # matplotlib (the bench extra) is optional

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
    axis.set_xlabel("load level")
    axis.set_title(f"{title} per request (ms)")
    axis.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_png(document: dict[str, Any], out_dir: Path) -> list[Path]:
    """``throughput.png``, ``time_to_first_token.png`` and ``inter_token_latency.png`` (when streamed)."""
    import matplotlib  # matplotlib (the bench extra) is optional

    matplotlib.use("Agg")
    paths = [_throughput(document, out_dir / "throughput.png")]
    for name, title in DISTRIBUTION_TITLES.items():
        path = _distribution(document, f"{name}_ms", title, out_dir / f"{name}.png")
        if path is not None:
            paths.append(path)
    return paths + _breakdowns(document, out_dir)


def _breakdowns(document: dict[str, Any], out_dir: Path) -> list[Path]:
    """``ttft_breakdown.png`` (one per server of a run: ``ttft_breakdown_2.png`` ...), where the server has metrics."""
    import matplotlib.pyplot as plt  # matplotlib (the bench extra) is optional


    paths = []
    for i, (name, levels) in enumerate(runs_of(document)):
        fig = breakdown_figure(levels, name or str(document["config"].get("model", "")))
        if fig is not None:
            paths.append(out_dir / f"ttft_breakdown{f'_{i + 1}' if i else ''}.png")
            fig.savefig(paths[-1], dpi=110)
            plt.close(fig)
    return paths
