"""A conversation as turns: each send's prompts, what came back, and the figures of every reply.

:meth:`Turn.apply` folds a call's events into the turn; :meth:`Turn.figures` gives a prompt's
speed figures, live while it streams and final once it ends (a reply stopped midway keeps the
figures it had). :meth:`Turn.status` is the one look of how a reply ended (``eos · 16 tokens · ...``,
``■ stopped · 33 tokens · ...``, ``✖ timeout · ...``) and :meth:`Turn.remarks` what else a turn says, in every
console and export. :func:`history` is the one chat-history rule: per mode, only single-prompt chat
turns answered in full, and ``a|b`` turns neither send nor extend it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from console.clients import Cancelled, Event, Failure, Reply, ReplyStats, TextDelta, format_stats, live_stats

STOPPED = "■ stopped"  # a reply the user (or a closed page) stopped
FAILED = "✖"  # before the kind of a failure (timeout, connection ...)
PREPARE_NOTE = 0.5  # s: a preparation this long is said (the figures start when the request is sent)


@dataclass
class Turn:
    """One submitted message: its prompts (as typed), what was sent, and what came back."""

    mode: str  # stream | batch | generate
    model: str
    prompts: list[str]
    request_id: str
    chat: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    echo: bool = False  # show each prompt (as typed) before its reply
    images: list[str] = field(default_factory=list)  # the image files attached to every prompt (their paths)
    sent: list[str] = field(default_factory=list)  # after the chat template (the prompts in raw mode)
    ignored: list[str] = field(default_factory=list)  # controls the model did not receive
    notes: list[str] = field(default_factory=list)  # how the controls went out, where a user should know
    started: float = field(default_factory=time.time)
    sent_at: float | None = None  # perf_counter when the request went out
    prepare_seconds: float = 0.0  # model config + chat template, before sending
    replies: dict[int, Reply] = field(default_factory=dict)
    partial: dict[int, str] = field(default_factory=dict)  # streamed text so far
    arrivals: dict[int, list[float]] = field(default_factory=dict)
    failure: Failure | None = None
    decoupled: bool | None = None  # the model's config says it streams (None: not read yet)

    def __post_init__(self) -> None:
        self.sent = self.sent or list(self.prompts)

    @property
    def done(self) -> bool:
        return self.failure is not None or len(self.replies) == len(self.prompts)

    def apply(self, event: Event) -> None:
        """Fold one event of this turn's call into it."""
        if isinstance(event, TextDelta):
            self.partial[event.index] = self.partial.get(event.index, "") + event.text
            self.arrivals.setdefault(event.index, []).append(event.time)
        elif isinstance(event, Reply):
            self.replies[event.index] = event
        else:
            self.failure = event

    def text(self, index: int) -> str:
        """The reply to prompt ``index`` (the text so far while streaming)."""
        reply = self.replies.get(index)
        return self.partial.get(index, "") if reply is None else reply.text

    def shown(self, index: int) -> str:
        """The reply as a front end shows it: after its prompt when the turn echoes (the one place an echo is
        added)."""
        text = self.text(index)
        return self.prompts[index] + text if self.echo and (text or index in self.replies) else text

    def figures(self, index: int, now: float | None = None) -> ReplyStats | None:
        """Prompt ``index``'s figures: final once answered, else live up to ``now`` (or the failure)."""
        reply = self.replies.get(index)
        if reply is not None:
            return reply.stats
        arrivals = self.arrivals.get(index, [])
        if not arrivals:
            return None
        if now is None:
            now = self.failure.time if self.failure is not None else arrivals[-1]
        return live_stats(arrivals, max(now, arrivals[-1]))

    def ending(self, index: int) -> str:
        """How prompt ``index``'s reply ended: its finish reason, ``■ stopped`` or ``✖ <kind>`` ('' while it comes)."""
        reply = self.replies.get(index)
        if reply is not None:
            return ending_mark(reply.finish_reason or "?", reply.ok)
        return ending_mark(self.failure.kind) if self.failure is not None else ""

    def cut_short(self, index: int) -> bool:
        """Prompt ``index`` had text when its call ended without its reply (stopped, timed out, broken)."""
        return index not in self.replies and self.failure is not None and bool(self.partial.get(index))

    def status(self, index: int) -> str:
        """``eos · 16 tokens · ttft ...``, ``■ stopped · 33 tokens · ttft ...`` or ``✖ timeout`` (figures it had)."""
        ending, stats = self.ending(index), self.figures(index)
        return f"{ending} · {format_stats(stats)}" if ending and stats is not None else ending

    def failure_line(self) -> str:
        """The failure in words, after the same mark as its replies (``■ stopped: ...``); '' without one."""
        if self.failure is None:
            return ""
        return f"{ending_mark(self.failure.kind)}: {self.failure.message}"

    def remarks(self) -> list[str]:
        """What the figures alone do not say, once the turn is over: a long preparation, controls the model never
        got, how some went out (:attr:`notes`), a stream from a batch model."""
        if not self.done:
            return []
        lines = [prepare_note(self.prepare_seconds)] if self.sent_at is not None else []
        lines += [ignored_note(self.model, self.ignored), *self.notes, batch_model_note(self)]
        return [line for line in lines if line]

    # ---- export

    def as_json(self) -> dict[str, Any]:
        answers = []
        for i, prompt in enumerate(self.prompts):
            reply, stats = self.replies.get(i), self.figures(i)
            answers.append({
                "index": i,
                "prompt": prompt,
                "sent": self.sent[i],
                "text": self.text(i),
                "finish_reason": reply.finish_reason if reply else (self.failure.kind if self.failure else None),
                "status": self.ending(i),
                "cut_short": self.cut_short(i),
                **(stats.as_dict() if stats else {}),
            })
        return {
            "mode": self.mode,
            "model": self.model,
            "request_id": self.request_id,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
            "chat": self.chat,
            "params": self.params,
            "ignored_controls": self.ignored,
            "notes": self.notes,
            "prepare_ms": round(self.prepare_seconds * 1000, 1),
            "replies": answers,
            "error": self.failure.message if self.failure else None,
            "error_kind": self.failure.kind if self.failure else None,
        }

    def as_markdown(self) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.started))
        lines = [f"## {self.mode} · {self.model} · {when}", ""]
        for i, prompt in enumerate(self.prompts):
            head = f" [{i + 1}/{len(self.prompts)}]" if len(self.prompts) > 1 else ""
            lines += [f"**You{head}:** {prompt}", "", f"**Assistant{head}:** {self.text(i)}", ""]
            if self.status(i):
                lines += [f"_{self.status(i)}_", ""]
        said = [line for line in (self.failure_line(), *self.remarks()) if line]
        lines += [*(f"> {line}  " for line in said), ""] if said else []
        return "\n".join(lines)


def ending_mark(reason: str, ok: bool = False) -> str:
    """The one mark of an ending: a finish reason as it is, a stop ``■ stopped``, a failure ``✖ <kind>``."""
    if reason == Cancelled.kind:
        return STOPPED
    return reason if ok else f"{FAILED} {reason}"


def prepare_note(seconds: float) -> str:
    """Said when preparing (model config, chat template) took long enough to matter; '' otherwise."""
    if seconds < PREPARE_NOTE:
        return ""
    return f"prepared in {seconds:.1f} s before sending (model config, chat template): not part of the figures"


def ignored_note(model: str, ignored: Sequence[str]) -> str:
    """The controls set that the model has no input for ('' when none)."""
    return f"{model} has no input for {', '.join(ignored)}: not sent" if ignored else ""


def batch_model_note(turn: Turn) -> str:
    """Said when a stream went to a model whose config is not decoupled: why it has no ttft or itl ('' otherwise).

    The config decides, not the number of responses: a decoupled model may answer in one (a lone end of sequence).
    """
    if turn.mode != "stream" or turn.decoupled is not False or not turn.replies:
        return ""
    return (f"{turn.model} is a batch model (not decoupled): it answered in one response, so there is no time to "
            "first token or inter-token latency")


def history(turns: Sequence[Turn], mode: str) -> list[dict[str, str]]:
    """The chat history a new single prompt of ``mode`` is sent after: that mode's one-prompt chat
    turns answered in full (a multi-prompt turn never joins it)."""
    out: list[dict[str, str]] = []
    for turn in turns:
        reply = turn.replies.get(0)
        if turn.mode == mode and turn.chat and len(turn.prompts) == 1 and reply is not None and reply.ok:
            out += [{"role": "user", "content": turn.prompts[0]}, {"role": "assistant", "content": turn.text(0)}]
    return out


def last_reply(turns: list[Turn]) -> str | None:
    """The text of the latest reply (all of them, headed, for ``a|b``)."""
    for turn in reversed(turns):
        texts = [turn.text(i) for i in range(len(turn.prompts))]
        if any(texts):
            if len(texts) == 1:
                return texts[0]
            return "\n\n".join(f"[{i + 1}/{len(texts)}] {t}" for i, t in enumerate(texts))
    return None
