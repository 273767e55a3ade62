"""Summaries of benchmark levels under genai-perf's names, their JSON/CSV exports and comparisons.

A level's summary looks like genai-perf's ``profile_export_genai_perf.json``: one entry per metric
with its ``unit`` and ``avg``/``min``/``max``/``p50``/``p90``/``p99``; the throughputs
(``output_token_throughput``, ``request_throughput``) are over the level's wall time and carry
``avg`` only. Streaming-only metrics (TTFT, ITL) are left out of batch runs.

A run of several servers side by side keeps the first one's levels where a single run has them, and adds
``targets`` (each server's name, kind, model, URLs and levels) and ``comparison`` (each headline figure per
level, with its ratio to the first server's).
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from console.clients import aggregate
from console.clients.stats import STATISTICS, percentile

from .load import LevelResult
from .server_view import csv_columns
from .workloads import Slo, later_turns

SCHEMA = "qaic-console-bench/1"
# genai-perf metric -> (ReplyStats metric, unit, scale)
DISTRIBUTIONS = {
    "time_to_first_token": ("time_to_first_token", "ms", 1000.0),
    "inter_token_latency": ("inter_token_latency", "ms", 1000.0),
    "request_latency": ("request_latency", "ms", 1000.0),
    "output_token_throughput_per_request": ("output_token_throughput", "tokens/sec", 1.0),
    "output_sequence_length": ("output_tokens", "tokens", 1.0),
}
STREAM_ONLY = ("time_to_first_token", "inter_token_latency")
THROUGHPUTS = {"output_token_throughput": "tokens/sec", "request_throughput": "requests/sec"}
INPUTS_PER_S = "inputs/sec"  # an embeddings level's throughput (AIPerf's embeddings endpoint: texts a request)
# the columns of the console table and of the comparison: (metric, statistic, label)
HEADLINE = (
    ("time_to_first_token", "avg", "TTFT avg ms"),
    ("time_to_first_token", "p99", "TTFT p99 ms"),
    ("inter_token_latency", "avg", "ITL avg ms"),
    ("inter_token_latency", "p99", "ITL p99 ms"),
    ("request_latency", "avg", "latency avg ms"),
    ("request_latency", "p99", "latency p99 ms"),
    ("output_sequence_length", "avg", "out tokens avg"),
    ("output_token_throughput", "avg", "out tok/s"),
    ("request_throughput", "avg", "req/s"),
)
# columns a run has only when asked for (--slo, --turns): shown when some level has them
OPTIONAL = (
    ("goodput", "avg", "goodput req/s"),
    ("goodput", "share", "goodput share"),
    ("time_to_first_token_later_turns", "avg", "TTFT turn 2+ ms"),
)


# an embeddings run's columns: no stream, no output tokens; its inputs a request and inputs/s
EMBEDDINGS_HEADLINE = (
    *(("request_latency", stat, f"latency {stat} ms") for stat in ("avg", "p50", "p90", "p99")),
    ("input_sequence_length", "avg", "tokens/request"),
    ("inputs_per_request", "", "inputs/request"),
    ("input_throughput", "avg", "inputs/s"),
    ("request_throughput", "avg", "req/s"),
)


def embeddings(levels: Sequence[dict[str, Any]]) -> bool:
    """Whether these are the levels of an embeddings run."""
    return any("input_throughput" in level for level in levels)


def headline(levels: Sequence[dict[str, Any]]) -> tuple[tuple[str, str, str], ...]:
    """The headline columns of these levels: the fixed ones (an embeddings run's own), then the optional ones some
    level has."""
    fixed = EMBEDDINGS_HEADLINE if embeddings(levels) else HEADLINE
    return (*fixed, *(c for c in OPTIONAL if any(c[0] in level for level in levels)))


def describe(values: Sequence[float]) -> dict[str, float]:
    """avg/min/max/p50/p90/p99 of ``values`` (the clients' percentile)."""
    return {
        "avg": sum(values) / len(values),
        "min": min(values),
        "max": max(values),
        **{f"p{q}": percentile(values, q) for q in (50, 90, 99)},
    }


def summarize(level: LevelResult, mode: str, slo: Slo | None = None, per_adapter: bool = True) -> dict[str, Any]:
    """One level's summary: load, counts, errors by kind and the genai-perf metrics; for conversations the time to
    first token of the later turns apart; with service-level goals, the goodput; for a run spread over LoRA adapters
    (``per_adapter``), each adapter's own summary."""
    ok = [r for r in level.records if r.ok and r.stats is not None]
    stats = [r.stats for r in ok if r.stats is not None]
    per_metric = aggregate(stats)
    out: dict[str, Any] = {
        "concurrency": level.concurrency,
        "request_rate": level.request_rate,
        "request_count": len(ok),
        "error_count": len(level.records) - len(ok),
        "errors": dict(Counter(r.error_kind or "unknown" for r in level.records if not r.ok)),
        "duration_s": round(level.duration, 4),
    }
    for name, (source, unit, scale) in DISTRIBUTIONS.items():
        if source in per_metric and not (mode != "stream" and name in STREAM_ONLY):
            out[name] = {"unit": unit, **{k: round(v * scale, 4) for k, v in per_metric[source].items()}}
    inputs = [float(s.input_tokens) for s in stats if s.input_tokens is not None]
    if inputs:
        out["input_sequence_length"] = {"unit": "tokens", **{k: round(v, 4) for k, v in describe(inputs).items()}}
    tokens = sum(s.output_tokens or 0 for s in stats)
    seconds = level.duration
    out["output_token_throughput"] = {"unit": THROUGHPUTS["output_token_throughput"],
                                      "avg": round(tokens / seconds, 4) if seconds > 0 else 0.0}
    out["request_throughput"] = {"unit": THROUGHPUTS["request_throughput"],
                                 "avg": round(len(ok) / seconds, 4) if seconds > 0 else 0.0}
    later = [r.stats.time_to_first_token * 1000.0 for r in later_turns(level.records)
             if r.stats is not None and r.stats.time_to_first_token is not None]
    if later:
        out["time_to_first_token_later_turns"] = {"unit": "ms", **{k: round(v, 4) for k, v in describe(later).items()}}
    if slo is not None and slo.goals:
        good = sum(slo.met(r.as_dict()) for r in ok)
        out["goodput"] = {"unit": THROUGHPUTS["request_throughput"], "slo": slo.goals,
                          "avg": round(good / seconds, 4) if seconds > 0 else 0.0,
                          "share": round(good / len(ok), 4) if ok else 0.0}
    adapters = dict.fromkeys(r.adapter for r in level.records if r.adapter) if per_adapter else {}
    if adapters:  # each one's own summary over the level's time
        out["adapters"] = {name: summarize(replace(level, records=[r for r in level.records if r.adapter == name]),
                                           mode, slo, per_adapter=False) for name in adapters}
    return out


def level_key(level: dict[str, Any]) -> str:
    """``c=4`` or ``rate=2`` (how levels are matched across runs)."""
    if level.get("concurrency") is not None:
        return f"c={level['concurrency']}"
    return f"rate={level.get('request_rate'):g}"


def value(level: dict[str, Any], metric: str, stat: str = "avg") -> float | None:
    """A metric's statistic in a level's summary (``stat`` empty: a plain figure, e.g. ``inputs_per_request``)."""
    entry = level.get(metric)
    if not stat:
        return entry if isinstance(entry, (int, float)) else None
    return entry.get(stat) if isinstance(entry, dict) else None


def _levels(levels: list[tuple[LevelResult, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [{**summary, "requests": [r.as_dict() for r in level.records]} for level, summary in levels]


def build_document(config: dict[str, Any], levels: list[tuple[LevelResult, dict[str, Any]]]) -> dict[str, Any]:
    """The JSON export: the run's configuration, then per level its summary and its requests."""
    return {"schema": SCHEMA, "config": config, "levels": _levels(levels)}


def side_by_side(document: dict[str, Any],
                 targets: list[tuple[dict[str, Any], list[tuple[LevelResult, dict[str, Any]]]]]) -> dict[str, Any]:
    """``document`` with every server's levels (``targets``: each one's config and results) and the comparison."""
    document["targets"] = [{**config, "levels": _levels(levels)} for config, levels in targets]
    document["comparison"] = compare(document["targets"])
    return document


def runs_of(document: dict[str, Any]) -> list[tuple[str | None, list[dict[str, Any]]]]:
    """(server name, levels) of each server of a run; one unnamed entry for a run of one server."""
    targets = document.get("targets")
    if not targets:
        return [(None, document["levels"])]
    return [(t["name"], t["levels"]) for t in targets]


def write_json(document: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def load_json(path: str | Path) -> dict[str, Any]:
    """A run written by :func:`write_json`; ValueError when it is not one."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a qaic-console bench result ({SCHEMA})")
    return document


def summary_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per level (and server): ``time_to_first_token_p99_ms``, ``output_token_throughput`` ..."""
    rows = []
    for name, levels in runs_of(document):
        rows += [{**({"target": name} if name is not None else {}), **row} for row in _summary_rows(levels)]
    return rows


def _summary_rows(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for level in levels:
        row: dict[str, Any] = {k: level.get(k) for k in ("concurrency", "request_rate", "request_count",
                                                          "error_count", "duration_s")}
        for name in (*DISTRIBUTIONS, "input_sequence_length"):
            unit = DISTRIBUTIONS[name][1] if name in DISTRIBUTIONS else "tokens"
            suffix = "_ms" if unit == "ms" else ""
            for stat in STATISTICS:
                row[f"{name}_{stat}{suffix}"] = value(level, name, stat)
        for name in THROUGHPUTS:
            row[name] = value(level, name)
        if "input_throughput" in level:
            row.update(inputs_per_request=level.get("inputs_per_request"), input_throughput=value(level,
                                                                                                 "input_throughput"))
        rows.append({**row, **csv_columns(level)})
    return rows


def write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """``rows`` as a CSV file, their keys its header."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        if rows:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return path


def write_csv(document: dict[str, Any], out_dir: Path) -> list[Path]:
    """``bench_summary.csv`` (a row per level), ``bench_requests.csv`` (a row per request), with a ``target``
    column for several servers, and then ``bench_comparison.csv`` (side by side, ratios to the first)."""
    requests = [{**({"target": name} if name is not None else {}), "level": level_key(level), **r}
                for name, levels in runs_of(document) for level in levels for r in level["requests"]]
    paths = [write_rows(summary_rows(document), out_dir / "bench_summary.csv"),
             write_rows(requests, out_dir / "bench_requests.csv")]
    if document.get("comparison"):
        names = [name for name, _ in runs_of(document)]
        rows = [{"level": r["level"], "metric": r["metric"], **dict(zip(names, r["values"])),
                 **{f"{n} / {names[0]}": ratio for n, ratio in zip(names[1:], r["ratios"][1:])}}
                for r in document["comparison"]]
        paths.append(write_rows(rows, out_dir / "bench_comparison.csv"))
    return paths


def compare(documents: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Side by side: per level present in any run and headline metric, each run's value and its
    ratio to the first run's."""
    keys: list[str] = []
    for document in documents:
        for level in document["levels"]:
            if level_key(level) not in keys:
                keys.append(level_key(level))
    rows = []
    columns = headline([level for document in documents for level in document["levels"]])
    for key in keys:
        levels = [next((lv for lv in d["levels"] if level_key(lv) == key), None) for d in documents]
        for metric, stat, label in (*columns, ("error_count", "", "errors")):
            values = [None if lv is None else value(lv, metric, stat) for lv in levels]
            if all(v is None for v in values):
                continue
            base = values[0]
            ratios = [None if v is None or not base else round(v / base, 3) for v in values]
            rows.append({"level": key, "metric": label, "values": values, "ratios": ratios})
    return rows
