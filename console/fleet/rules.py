"""The Prometheus rules that ship, and the Grafana board's queries, both made from :mod:`.promql`.

Recording rules give every figure of the board per model and per pod (``model:qaic_console_<figure>:1m``,
``model_pod:qaic_console_<figure>:1m``); the alerts: a model failing requests, a pod's slots all taken for
5 minutes, the backend restarted (its counters went back to zero). ``python -m console.fleet.rules`` rewrites
``assets/prometheus/qaic-console-rules.yaml`` and the board's ``expr`` fields; a fast test checks both are current.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .promql import FIGURES, MODEL, POD, expr

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "assets" / "prometheus" / "qaic-console-rules.yaml"
BOARD_FILE = ROOT / "assets" / "grafana" / "qaic-console.json"
WINDOW = "1m"
BOARD_SELECTOR, BOARD_WINDOW = 'model=~"$model"', "$__rate_interval"
SATURATED_FOR = "5m"

# the board's panels by title: the figure of each target, in refId order
PANELS = {
    "Requests/s (Triton)": ("requests_per_s", "failures_per_s"),
    "Tokens/s (backend)": ("tokens_per_s", "prompt_tokens_per_s", "prefix_reused_per_s"),
    "Triton queue vs compute per request": ("triton_queue_ms", "triton_compute_ms"),
    "Slots (backend)": ("running", "waiting", "slots", "pending"),
    "Time to first token (backend: arrival at the engine to first token)": (
        "ttft_p50_s", "ttft_p99_s", "slot_wait_p99_s", "step_wait_p99_s", "queue_p99_s"),
    "Time per output token (backend)": ("tpot_p50_s", "tpot_p99_s"),
    "Session runs: prefill chunk and decode step; a request's images encoded (mean)": (
        "prefill_chunk_ms", "decode_step_ms", "vision_encode_ms"),
    "Decode batch: sequences per step and slot occupancy": ("tokens_per_step", "occupancy"),
    "KV cache in use (backend)": ("kv_usage",),
    "KV cache positions in use (backend)": ("kv_positions",),
    "Sequences finished, cancelled, failed; requests rejected (per second)": (
        "finished_per_s", "cancelled_per_s", "sequence_failures_per_s", "rejected_per_s"),
    "Speculative decoding: draft tokens proposed and accepted (per second)": ("draft_tokens_per_s",
                                                                              "accepted_tokens_per_s"),
    "Context length (positions per sequence)": ("ctx_len",),
}
LEVELS = {"model": MODEL, "model_pod": POD}


def recorded(level: str, figure: str) -> str:
    """A recording rule's name (Prometheus's ``level:metric:operations``)."""
    return f"{level}:qaic_console_{figure}:{WINDOW}"


def _pod(figure: str, window: str = WINDOW) -> str:
    return expr(figure, POD, window=window)


def alerts() -> list[dict[str, Any]]:
    where = "{{ $labels.model }} on {{ $labels.instance }}{{ with $labels.pod }} (pod {{ . }}){{ end }}"
    return [
        {"alert": "QaicModelFailingRequests",
         "expr": f"{_pod('failures_per_s', '5m')} > 0 or {_pod('sequence_failures_per_s', '5m')} > 0",
         "for": "1m", "labels": {"severity": "warning"},
         "annotations": {"summary": f"{where} is failing requests",
                         "description": "Triton's failed requests or the backend's failed sequences grew over the "
                                        "last 5 minutes: read the server's log."}},
        {"alert": "QaicSlotsSaturated",
         "expr": f"{_pod('running')} >= {_pod('slots')} and {_pod('slots')} > 0",
         "for": SATURATED_FOR, "labels": {"severity": "warning"},
         "annotations": {"summary": f"{where}: every slot busy for {SATURATED_FOR}",
                         "description": "Requests wait for a slot (qaic_num_requests_waiting): add replicas or "
                                        "slots (full_batch_size)."}},
        {"alert": "QaicBackendRestarted",
         "expr": f"{expr('backend_restarts', POD, window='10m')} > 0",
         "labels": {"severity": "warning"},
         "annotations": {"summary": f"{where}: the backend restarted",
                         "description": "The backend's counters went back to zero in the last 10 minutes: its "
                                        "Python backend stub (or its tritonserver) restarted."}},
    ]


def rules() -> dict[str, Any]:
    """The rules file's document."""
    figures = dict.fromkeys(name for names in PANELS.values() for name in names)
    recording = [{"record": recorded(level, name), "expr": expr(name, by, window=WINDOW)}
                 for level, by in LEVELS.items() for name in figures]
    return {"groups": [{"name": "qaic-console.figures", "rules": recording},
                       {"name": "qaic-console.alerts", "rules": alerts()}]}


def rules_text() -> str:
    return ("# Written by `python -m console.fleet.rules` from console/fleet/promql.py: edit that, not this.\n"
            + yaml.safe_dump(rules(), sort_keys=False, width=200))


def board(document: dict[str, Any]) -> dict[str, Any]:
    """The Grafana board with every target's query (and each panel's unit) from :mod:`.promql`."""
    for panel in document["panels"]:
        names = PANELS[panel["title"]]
        if len(names) != len(panel["targets"]):
            raise ValueError(f"panel {panel['title']!r} has {len(panel['targets'])} targets, {len(names)} figures")
        panel["fieldConfig"]["defaults"]["unit"] = FIGURES[names[0]].unit
        for target, name in zip(panel["targets"], names):
            target["expr"] = expr(name, MODEL, BOARD_SELECTOR, BOARD_WINDOW)
    return document


def board_text() -> str:
    return json.dumps(board(json.loads(BOARD_FILE.read_text())), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    RULES_FILE.parent.mkdir(parents=True, exist_ok=True)
    RULES_FILE.write_text(rules_text())
    BOARD_FILE.write_text(board_text())
    print(f"wrote {RULES_FILE} and {BOARD_FILE}")


if __name__ == "__main__":
    main()
