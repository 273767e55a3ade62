"""The transcript of a session's turns: Markdown and JSON with every reply's speed figures."""

from __future__ import annotations

import json
import time
from pathlib import Path

from console.clients import aggregate

from .turns import Turn

_TIMES = ("time_to_first_token", "inter_token_latency", "request_latency")


def summary(turns: list[Turn]) -> dict[str, dict[str, dict[str, float]]]:
    """genai-perf statistics (avg/min/max/p50/p90/p99) per mode over the figures of every reply; times in ms.

    Stream replies have a time to first token; batch replies only a request latency, so the modes
    are summarised apart.
    """
    out: dict[str, dict[str, dict[str, float]]] = {}
    for mode in dict.fromkeys(t.mode for t in turns):
        stats = [s for t in turns if t.mode == mode for i in range(len(t.prompts)) if (s := t.figures(i)) is not None]
        rows = {}
        for metric, values in aggregate(stats).items():
            in_ms = metric in _TIMES
            rows[f"{metric}_ms" if in_ms else metric] = {k: round(v * 1000 if in_ms else v, 3)
                                                         for k, v in values.items()}
        if rows:
            out[mode] = rows
    return out


def export(turns: list[Turn], folder: Path, stem: str | None = None) -> tuple[Path, Path]:
    """Write ``<stem>.md`` and ``<stem>.json`` into ``folder``; their paths."""
    stem = stem or time.strftime("qaic-transcript-%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    ordered = sorted(turns, key=lambda t: t.started)
    md_path, json_path = folder / f"{stem}.md", folder / f"{stem}.json"
    body = "\n".join(t.as_markdown() for t in ordered)
    md_path.write_text(f"# qaic-console transcript\n\n{body}", encoding="utf-8")
    data = {"turns": [t.as_json() for t in ordered], "summary": summary(ordered)}
    json_path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return md_path, json_path
