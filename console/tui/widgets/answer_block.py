"""One prompt's reply inside a turn: its header (``a|b``), its text, and its own speed figures.

Everything shown comes from the turn (:class:`console.core.turns.Turn`): its text, its figures (live
while the reply comes, final once it ends, kept when it is stopped) and its status line.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from console.clients import format_stats
from console.core.turns import STOPPED, Turn


def elapsed(turn: Turn) -> float:
    """Seconds since the turn's request went out (since it was submitted while it is being prepared)."""
    if turn.sent_at is None:
        return time.time() - turn.started
    return time.perf_counter() - turn.sent_at


def figures_line(turn: Turn, index: int, preparing: str = "") -> str:
    """The figures line of prompt ``index``: live, or how it ended (the turn's one look: ``eos · ...``,
    ``■ stopped · ...``, ``✖ timeout · ...``)."""
    if index in turn.replies or turn.failure is not None:
        return turn.status(index)
    if turn.sent_at is None:
        return f"… preparing: {preparing or 'model config and chat template'} · {elapsed(turn):.1f} s · Esc stops"
    now = elapsed(turn)
    live = turn.figures(index, now)
    if live is None:
        return f"… waiting {now:.1f} s · Esc stops"
    return f"▶ {format_stats(live)}"


def turn_notes(turn: Turn) -> list[str]:
    """What the turn says besides its figures: how it failed or was stopped, and its notes (see ``Turn.remarks``)."""
    return [line for line in (turn.failure_line(), *turn.remarks()) if line]


class AnswerBlock(Vertical):
    """Prompt ``index`` of ``turn``: optional header, the text, the figures."""

    def __init__(self, turn: Turn, index: int) -> None:
        super().__init__(classes="answer pending")
        self.turn, self.index = turn, index
        # held here, not looked up: a tick may render the block before its children are mounted
        self.body = Static(Content("…"), classes="answer-body")
        self.stats = Static(Content(""), classes="stats")

    def compose(self) -> ComposeResult:
        if len(self.turn.prompts) > 1:
            header = f"[{self.index + 1}/{len(self.turn.prompts)}] {self.turn.prompts[self.index]}"
            yield Static(Content(header), classes="answer-header")
        yield self.body
        yield self.stats

    @property
    def finished(self) -> bool:
        return self.index in self.turn.replies or self.turn.failure is not None

    def show(self, preparing: str = "") -> None:
        """Render the turn's state for this prompt (``preparing``: what the wait before sending is for)."""
        turn, i = self.turn, self.index
        text = turn.text(i)
        if self.finished:
            reply = turn.replies.get(i)
            text = text or ("(empty reply)" if reply is not None else "(no reply)")
            self.remove_class("pending")
            stopped = turn.ending(i) == STOPPED
            self.set_class(stopped, "stopped")
            self.set_class(not stopped and (reply is None or not reply.ok), "failed")
        self.body.update(Content(text or "…"))
        self.stats.update(Content(figures_line(turn, i, preparing)))

    @property
    def figures_text(self) -> str:
        """The figures line as shown."""
        return str(self.stats.content)

    @property
    def body_text(self) -> str:
        return str(self.body.content)
