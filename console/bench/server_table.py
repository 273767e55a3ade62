"""The server's side of a bench run as tables and a figure: the figures :mod:`.server_view` measured for each level,
where they come from, and where the client's time to first token went."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .results import embeddings, level_key
from .server_view import BREAKDOWN

LEGEND = {"queue": "queue (Triton, a slot, the engine's step)", "vision": "images encoded",
          "network": "the rest: network, responses"}
LABELS = {  # the console's and the HTML page's table
    "triton_queue_ms": "queue ms", "triton_compute_ms": "compute ms", "slot_wait_ms": "slot wait ms",
    "step_wait_ms": "step wait ms",
    "ttft_ms": "TTFT ms", "prefill_ms": "prefill ms", "decode_step_ms": "step ms", "tpot_ms": "TPOT ms",
    "mean_occupancy": "occupancy", "tokens_per_step": "tok/step", "tokens_per_s": "tok/s",
    "tokens_by_instance": "tokens by instance",
}
OPTIONAL = {"vision_encode_ms": "images ms"}  # shown when some level has it (a vision-language model's)

# an embeddings run's: Triton's times and the batches its dynamic batching ran (no tokens are generated)
EMBEDDINGS_LABELS = {"triton_queue_ms": "queue ms", "triton_compute_ms": "compute ms", "batch_size": "batch avg"}
CARD = {"power_w": "card W", "tokens_per_joule": "tok/J"}


def server_rows(levels: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """The server's side of each level as a table: header, rows (a level without metrics: its note)."""
    shown = {name: label for name, label in OPTIONAL.items()
             if any((level.get("server") or {}).get(name) is not None for level in levels)}
    labels, card = ((EMBEDDINGS_LABELS, {"power_w": CARD["power_w"]}) if embeddings(levels)
                    else ({**LABELS, **shown}, CARD))
    header = ["level", *labels.values(), *card.values()]
    rows = []
    for level in levels:
        server, measured = level.get("server") or {}, level.get("card") or {}
        rows.append([level_key(level), *(server.get(name) for name in labels), *(measured.get(name) for name in card)])
    return header, rows


def notes(levels: Sequence[dict[str, Any]]) -> list[str]:
    """Where the server's and the card's figures come from (or why there are none), each said once."""
    said: list[str] = []
    for level in levels:
        for line in ((level.get("server") or {}).get("note"), (level.get("card") or {}).get("note")):
            if line and line not in said:
                said.append(line)
    return said


def breakdown_figure(levels: Sequence[dict[str, Any]], title: str) -> Any | None:
    """A stacked bar per level of where the client's TTFT went (queue, prefill, network); None without it."""
    shown = [(level_key(lv), lv["server"]["ttft_breakdown_ms"]) for lv in levels
             if (lv.get("server") or {}).get("ttft_breakdown_ms")]
    if not shown:
        return None
    import matplotlib.pyplot as plt  # matplotlib (the bench extra) is optional

    fig, axis = plt.subplots(figsize=(7, 4.2))
    bottoms = [0.0] * len(shown)
    for part, colour in zip(BREAKDOWN, ("tab:orange", "tab:purple", "tab:blue", "tab:gray")):
        if not any(part in parts for _, parts in shown):  # "vision": a vision-language model's only
            continue
        heights = [parts.get(part) or 0.0 for _, parts in shown]
        axis.bar([key for key, _ in shown], heights, bottom=bottoms, color=colour, label=LEGEND.get(part, part))
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    axis.set_ylabel("ms (mean)")
    axis.set_xlabel("level")
    axis.set_title(f"{title}: where the time to first token went")
    axis.legend()
    axis.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig
