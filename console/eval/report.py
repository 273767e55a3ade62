"""What an eval prints and writes: the table, ``eval.json`` (everything), ``eval_summary.csv`` (one row a path),
``eval_prompts.csv`` (one row a prompt and candidate) and ``eval.html`` (the table, each candidate's divergence
histogram and the text around every first divergence). Every value in the page is escaped text.
"""

from __future__ import annotations

import csv
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from console.bench.page import STYLE

from .run import Evaluation

COLUMNS = ("path", "kind", "exact", "common prefix", "first divergence", "NLL", "perplexity", "KL", "seconds")
SUMMARY_FIELDS = ("path", "spec", "kind", "exact", "prompts", "exact_rate", "mean_common_prefix",
                  "median_first_divergence", "mean_nll", "perplexity", "mean_kl", "seconds")
PROMPT_FIELDS = ("candidate", "prompt", "unit", "exact", "first", "common", "reference_length", "candidate_length",
                 "before", "reference_next", "candidate_next")


def figure(value: Any, digits: int = 3) -> str:
    """A table's cell: '-' for None, a float to ``digits`` places."""
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def rows(result: Evaluation) -> list[tuple[Any, ...]]:
    """The table's rows: the reference first (its own likelihood figures), then each candidate."""
    out = []
    for name in result.paths:
        s = result.summary(name)
        if name == result.reference:
            agreement = ("reference", "-", "-")
        else:
            unit = "/".join(s["units"])
            agreement = (f"{s['exact']}/{s['prompts']} ({s['exact_rate']:.0%})",
                         f"{s['mean_common_prefix']:.1f} {unit}s", figure(s["median_first_divergence"]))
        out.append((name, s["kind"], *agreement, figure(s.get("mean_nll")), figure(s.get("perplexity"), 2),
                    figure(s.get("mean_kl"), 4), figure(s["seconds"], 1)))
    return out


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def table(result: Evaluation) -> str:
    """The plain-text table and the notes, for the terminal."""
    text = aligned([COLUMNS, *rows(result)])
    footer = [f"{len(result.prompts)} prompts, up to {result.max_tokens} greedy tokens each; reference "
              f"{result.reference}; common prefix: mean; first divergence: median over the prompts that differ; "
              "NLL: mean per token of the reference's answers; KL: mean per token to the reference"]
    return "\n".join(text + footer + result.notes)


def write(result: Evaluation, out_dir: Path) -> list[Path]:
    """``eval.json``, the two CSVs and ``eval.html`` in ``out_dir`` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    document = result.to_json()
    written = [out_dir / "eval.json", out_dir / "eval_summary.csv", out_dir / "eval_prompts.csv",
               out_dir / "eval.html"]
    written[0].write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    write_csv(written[1], SUMMARY_FIELDS, document["summary"])
    write_csv(written[2], PROMPT_FIELDS, [{"candidate": name, "prompt": i, **c.to_json()}
                                     for name, cs in result.comparisons.items() for i, c in enumerate(cs)])
    written[3].write_text(page(result), encoding="utf-8")
    return written


def write_csv(path: Path, fields: Sequence[str], records: Sequence[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)


def _html_table(header: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in body)
    return "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + f"</tr>{cells}</table>"


def _histogram(bins: Sequence[dict[str, Any]], prompts: int) -> str:
    """A bar per bin of first-divergence positions (CSS widths: no script, no image)."""
    body = []
    for b in bins:
        label = str(b["from"]) if b["from"] == b["to"] else f"{b['from']}-{b['to']}"
        width = 100 * b["prompts"] / max(prompts, 1)
        body.append(f'<tr><td>{label}</td><td style="text-align:left"><span class="bar" style="width:{width:.1f}%">'
                    f'</span> {b["prompts"]}</td></tr>')
    return "<table class=\"histogram\"><tr><th>first divergence</th><th>prompts</th></tr>" + "".join(body) + "</table>"


def _divergences(result: Evaluation, name: str) -> str:
    """Each prompt that differs: the common text before the divergence, then each side's next units."""
    body = [(i, result.prompts[i], c.first, c.before, c.reference_next, c.candidate_next)
            for i, c in enumerate(result.comparisons[name]) if not c.exact]
    if not body:
        return "<p>Every answer is the reference's.</p>"
    return _html_table(("#", "prompt", "at", "common text before", f"{result.reference} next", f"{name} next"),
                       [tuple(repr(v) if isinstance(v, str) else v for v in row) for row in body])


def page(result: Evaluation) -> str:
    """``eval.html``: the table, then per candidate its histogram and its divergences."""
    title = f"qaic-console eval: {len(result.candidates)} candidate(s) against {result.reference}"
    parts = [_html_table(COLUMNS, rows(result))] + [f"<p>{html.escape(n)}</p>" for n in result.notes]
    for name in result.candidates:
        summary = result.summary(name)
        parts.append(f"<h2>{html.escape(name)}</h2><p>{summary['exact']}/{summary['prompts']} answers exact "
                     f"({html.escape('/'.join(summary['units']))} compared)</p>")
        parts.append(_histogram(summary["histogram"], summary["prompts"]) + _divergences(result, name))
    style = STYLE + ".bar{display:inline-block;height:.8em;background:#4a7bd0}table.histogram{min-width:30em}"
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head>\n<body><h1>{html.escape(title)}</h1>{''.join(parts)}</body></html>\n")
