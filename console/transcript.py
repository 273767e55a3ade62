"""The conversation record of both chat panes and its export (Markdown and JSON with speed figures)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.clients import Failure, Reply, aggregate, format_stats

_TIMES = ("time_to_first_token", "inter_token_latency", "request_latency")


@dataclass
class Turn:
    """One submitted message: its prompts (as typed), what was sent, and what came back."""

    pane: str  # "stream" | "batch"
    model: str
    prompts: list[str]
    sent: list[str]  # after the chat template (equal to ``prompts`` in raw mode)
    request_id: str
    params: dict[str, Any]
    started: float = field(default_factory=time.time)
    replies: dict[int, Reply] = field(default_factory=dict)
    partial: dict[int, str] = field(default_factory=dict)  # streamed text so far
    failure: Failure | None = None

    @property
    def done(self) -> bool:
        return self.failure is not None or len(self.replies) == len(self.prompts)

    def text(self, index: int) -> str:
        """The reply to prompt ``index`` (the text so far while streaming, without an echoed prompt)."""
        reply = self.replies.get(index)
        if reply is None:
            return self.partial.get(index, "")
        prompt = self.sent[index]
        return reply.text[len(prompt):] if reply.includes_prompt and reply.text.startswith(prompt) else reply.text

    def as_json(self) -> dict[str, Any]:
        answers = []
        for i, prompt in enumerate(self.prompts):
            reply = self.replies.get(i)
            answers.append({
                "index": i,
                "prompt": prompt,
                "sent": self.sent[i],
                "text": self.text(i),
                "finish_reason": reply.finish_reason if reply else None,
                **(reply.stats.as_dict() if reply else {}),
            })
        return {
            "pane": self.pane,
            "model": self.model,
            "request_id": self.request_id,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
            "params": self.params,
            "replies": answers,
            "error": self.failure.message if self.failure else None,
            "error_kind": self.failure.kind if self.failure else None,
        }

    def as_markdown(self) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.started))
        lines = [f"## {self.pane} · {self.model} · {when}", ""]
        for i, prompt in enumerate(self.prompts):
            head = f" [{i + 1}/{len(self.prompts)}]" if len(self.prompts) > 1 else ""
            lines += [f"**You{head}:** {prompt}", "", f"**Assistant{head}:** {self.text(i)}", ""]
            reply = self.replies.get(i)
            if reply is not None:
                lines += [f"_{reply.finish_reason or '?'} · {format_stats(reply.stats)}_", ""]
        if self.failure is not None:
            lines += [f"> error ({self.failure.kind}): {self.failure.message}", ""]
        return "\n".join(lines)


def summary(turns: list[Turn]) -> dict[str, dict[str, float]]:
    """genai-perf statistics (avg/min/max/p50/p90/p99) over every reply of ``turns``; times in ms."""
    out = {}
    for metric, values in aggregate(r.stats for t in turns for r in t.replies.values()).items():
        in_ms = metric in _TIMES
        out[f"{metric}_ms" if in_ms else metric] = {k: round(v * 1000 if in_ms else v, 3) for k, v in values.items()}
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
