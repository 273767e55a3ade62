"""One chat message end to end: settings -> a client call -> live figures -> chatbot messages.

Nothing here imports Gradio. The transcript record, its export and the chat template with history
are shared with the TUI (:mod:`console.transcript`, :mod:`console.chat`), so both
consoles send and export alike. Every text that reaches the page (prompts, model output, server
errors) goes through :func:`esc`.
"""

from __future__ import annotations

import html
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from console.chat import chat_prompts
from console.clients import (
    Call,
    ClientError,
    Failure,
    GenerationParams,
    Reply,
    TextDelta,
    Timeouts,
    format_stats,
    infer,
    stream,
)
from console.headless import DEFAULT_IDLE_TIMEOUT
from console.transcript import Turn, export, summary

from .backend import Backend

MODES = {"stream": "Stream · gRPC, token by token", "batch": "Batch · HTTP, one response"}
SPEED_COLUMNS = ["#", "mode", "model", "prompt", "finish", "output tokens", "TTFT ms", "ITL ms", "tokens/s",
                 "latency s"]
SUMMARY_METRICS = {  # summary() key -> label
    "time_to_first_token_ms": "TTFT ms",
    "inter_token_latency_ms": "ITL ms",
    "output_token_throughput": "tokens/s",
    "request_latency_ms": "latency ms",
    "output_tokens": "output tokens",
}


def esc(text: str) -> str:
    """Text as HTML that shows it literally (markup in prompts or model output is never live)."""
    return html.escape(text, quote=True)


@dataclass(frozen=True)
class Settings:
    """The controls of one message; 0 / None mean the model's default."""

    mode: str = "stream"
    model: str = ""
    timeout: float | None = 0  # s for the whole call; 0: 600 (KV) / 6000 (causal)
    max_tokens: int | None = 128  # 0: up to the context length
    temperature: float | None = 0.0  # 0: greedy
    top_p: float | None = 1.0
    top_k: int | None = 0
    seed: int | None = 0  # 0: not sent (the model picks)
    system: str = ""
    chat: bool = True
    echo: bool = False  # batch: the reply starts with the prompt (exclude_input_in_output=False)
    tokenizer: str = ""

    def params(self, request_id: str) -> GenerationParams:
        """The request's inputs; neutral values are left out (the model's defaults apply)."""
        return GenerationParams(
            max_tokens=int(self.max_tokens) if self.max_tokens else None,
            temperature=float(self.temperature) if self.temperature else None,
            top_p=float(self.top_p) if self.top_p is not None and self.top_p < 1 else None,
            top_k=int(self.top_k) if self.top_k else None,
            seed=int(self.seed) if self.seed else None,
            exclude_input_in_output=None if self.mode == "stream" else not self.echo,
            request_id=request_id,
        )


@dataclass
class Live:
    """Figures of the running reply from text arrivals (a chunk is about one token)."""

    model: str
    request_id: str
    first: float | None = None
    last: float = 0.0
    chunks: int = 0
    failure: Failure | None = None
    replies: list[Reply] = field(default_factory=list)
    sent: bool = False  # the request is out (the chat template may take a moment before)

    def add(self, delta: TextDelta) -> None:
        self.first = delta.time if self.first is None else min(self.first, delta.time)
        self.last = max(self.last, delta.time)
        self.chunks += 1

    def line(self, mode: str) -> str:
        """One Markdown line for the live panel."""
        head = f"`{esc(self.model)}` · request `{esc(self.request_id)}`"
        if self.failure is not None:
            return f"**{esc(self.failure.kind)}** · {head} · {esc(self.failure.message)}"
        if self.replies:
            return f"**done** · {head}  \n" + "  \n".join(
                f"{_label(r.index, len(self.replies))}{esc(r.finish_reason or '?')} · {esc(format_stats(r.stats))}"
                for r in self.replies
            )
        if not self.sent:
            return f"**preparing** the request · {head}"
        if mode == "batch":
            return f"**waiting** for one response (HTTP) · {head}"
        if self.first is None:
            return f"**waiting** for the first token · {head}"
        parts = [f"ttft {self.first * 1000:.0f} ms"]
        if self.chunks > 1:
            parts.append(f"itl {(self.last - self.first) / (self.chunks - 1) * 1000:.0f} ms")
        if self.last > 0:
            parts.append(f"{self.chunks / self.last:.1f} tok/s")
        parts += [f"{self.chunks} chunks", f"{self.last:.1f} s"]
        return f"**streaming** · {head} · " + " · ".join(parts)


def _label(index: int, count: int) -> str:
    return f"[{index + 1}/{count}] " if count > 1 else ""


# --------------------------------------------------------------------------- one message


def new_turn(prompts: list[str], settings: Settings) -> Turn:
    """The transcript record of a message before it is sent."""
    request_id = f"web-{uuid.uuid4().hex[:10]}"
    params = {k: v for k, v in asdict(settings.params(request_id)).items() if v not in (None, (), "")}
    params.update(timeout=settings.timeout or None, chat=settings.chat, system=settings.system or None)
    return Turn(settings.mode, settings.model, prompts, list(prompts), request_id, params)


def history(turns: list[Turn]) -> list[dict[str, str]]:
    """What the chat template sends before a new prompt: the chat turns of one prompt answered in full."""
    out = []
    for turn in turns:
        reply = turn.replies.get(0)
        if turn.params.get("chat") and len(turn.prompts) == 1 and reply is not None and reply.ok:
            out += [{"role": "user", "content": turn.prompts[0]}, {"role": "assistant", "content": turn.text(0)}]
    return out


def start_call(backend: Backend, turn: Turn, settings: Settings, earlier: list[Turn]) -> Call:
    """Apply the chat template (after the ``earlier`` turns) and start the request; ClientError if it cannot."""
    protocol = "grpc" if settings.mode == "stream" else "http"
    url = backend.endpoint(protocol)
    info = backend.infos().get(settings.model)
    if info is None:
        raise ClientError(f"model {settings.model or '(none)'} is not ready on the server: pick another one")
    if settings.mode == "batch":
        info.check_batch("use Stream mode")
    if settings.chat:
        turn.sent = chat_prompts(turn.prompts, info, system=settings.system or None, history=history(earlier),
                                 tokenizer=settings.tokenizer or None)
    else:
        turn.sent = list(turn.prompts)
    network = info.network_timeout(settings.timeout or None)  # the page's 0 means the default
    params = settings.params(turn.request_id)
    if settings.mode == "stream":
        return stream(url, settings.model, turn.sent, params, Timeouts(network, DEFAULT_IDLE_TIMEOUT))
    return infer(url, settings.model, turn.sent, params, Timeouts(network, None))


def follow(events: Iterator[Any], turn: Turn, live: Live) -> Iterator[bool]:
    """Record each event in ``turn`` and ``live``; yields True when the event ends a reply or the call."""
    for event in events:
        if isinstance(event, TextDelta):
            turn.partial[event.index] = turn.partial.get(event.index, "") + event.text
            live.add(event)
            yield False
        elif isinstance(event, Reply):
            turn.replies[event.index] = event
            live.replies.append(event)
            yield True
        elif isinstance(event, Failure):
            turn.failure = live.failure = event
            yield True


# --------------------------------------------------------------------------- the page's views


def shown(turn: Turn, index: int) -> str:
    """The reply text as shown: with the echoed prompt when the server sent one (batch, echo on)."""
    reply = turn.replies.get(index)
    return reply.text if reply is not None and reply.includes_prompt else turn.text(index)


def messages(turns: list[Turn]) -> list[dict[str, str]]:
    """Chatbot messages (escaped): the prompts, one answer per prompt with its figures, any error."""
    out: list[dict[str, str]] = []
    for turn in turns:
        n = len(turn.prompts)
        out.append({"role": "user", "content": esc("\n".join(_label(i, n) + p for i, p in enumerate(turn.prompts)))})
        for i in range(n):
            reply = turn.replies.get(i)
            text = shown(turn, i)
            if reply is not None:
                footer = f"\n\n— {reply.finish_reason or '?'} · {format_stats(reply.stats)}"
            else:
                footer = "" if turn.failure else "…"
            if text or footer:
                out.append({"role": "assistant", "content": esc(_label(i, n) + text + footer)})
        if turn.failure is not None:
            out.append({"role": "assistant", "content": esc(f"✖ {turn.failure.kind}: {turn.failure.message}")})
    return out


def retry_text(turn: Turn) -> str:
    """The input that sends ``turn``'s prompts again (``|`` inside a prompt escaped)."""
    return "|".join(p.replace("|", "\\|") for p in turn.prompts)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def speed_rows(turns: list[Turn]) -> list[list[Any]]:
    """One row per finished reply of the session (SPEED_COLUMNS)."""
    rows = []
    for turn in turns:
        for i in sorted(turn.replies):
            reply, stats = turn.replies[i], turn.replies[i].stats
            tps = stats.output_token_throughput
            rows.append([len(rows) + 1, turn.pane, turn.model, turn.prompts[i][:60], reply.finish_reason,
                         stats.output_tokens, _ms(stats.time_to_first_token), _ms(stats.inter_token_latency),
                         None if tps is None else round(tps, 2), round(stats.request_latency, 3)])
    return rows


def summary_markdown(turns: list[Turn]) -> str:
    """genai-perf statistics over the session's replies as a Markdown table."""
    stats = summary(turns)
    if not stats:
        return "No replies yet: the figures of each reply of this session appear here."
    lines = ["| metric | avg | p50 | p90 | p99 | min | max |", "|---|---|---|---|---|---|---|"]
    for key, label in SUMMARY_METRICS.items():
        if key in stats:
            s = stats[key]
            lines.append(f"| {label} | " + " | ".join(f"{s[k]:.1f}" for k in ("avg", "p50", "p90", "p99", "min", "max"))
                         + " |")
    return "\n".join(lines)


def export_files(turns: list[Turn], folder: Path) -> list[str]:
    """The transcript as Markdown and JSON (with the speed figures) in ``folder``; their paths."""
    return [str(p) for p in export(turns, folder)]
