"""What a bench client sends besides single synthetic prompts: chats of several turns, and service-level goals.

A conversation (``--turns N``, concurrency levels) is one client's: it sends a turn, waits for its answer, and sends
the next turn with the whole history before it (the earlier prompts and answers, then the new message), as a chat
front end resends it; after its last turn it starts a new conversation. Turns after the first are where a server
that reuses a prompt's cached prefix answers sooner, so their time to first token is reported apart.

Goodput (``--slo ttft_ms=200,itl_ms=40``, AIPerf's ``--goodput`` semantics): the requests per second that met every
goal given, and their share of the level's answered requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from console.clients import UsageError

from .prompts import BenchRequest

# an --slo goal -> the request's figure it bounds (RequestRecord.as_dict's names) and whether only streams have it
GOALS = {
    "ttft_ms": ("time_to_first_token_ms", True),
    "itl_ms": ("inter_token_latency_ms", True),
    "latency_ms": ("request_latency_ms", False),
}
SEPARATOR = "\n"  # between a turn's answer and the next message


@dataclass
class Conversation:
    """One client's chat: the next turn's request (the history, then a new message) and its turn number."""

    turns: int
    messages: Callable[[], BenchRequest]  # the next user message (thread-safe)
    history: str = ""
    turn: int = 0

    def next(self) -> tuple[BenchRequest, int]:
        if self.turn == self.turns:  # the last turn was answered: a new conversation
            self.history, self.turn = "", 0
        message = self.messages()
        self.turn += 1
        return BenchRequest(self.history + message.prompt, message.max_tokens), self.turn

    def answered(self, request: BenchRequest, text: str) -> None:
        """The turn's answer: the next turn starts with this request's prompt and it."""
        self.history = request.prompt + text + SEPARATOR


@dataclass(frozen=True)
class Slo:
    """Service-level goals: each figure's upper bound in ms (none given: no goodput)."""

    goals: dict[str, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None, mode: str) -> Slo:
        """``ttft_ms=200,itl_ms=40,latency_ms=2000``; ClientError naming what is wrong."""
        goals: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in (text or "").split(","))):
            name, _, bound = part.partition("=")
            name = name.strip()
            if name not in GOALS:
                raise UsageError(f"--slo {part!r}: the goals are {', '.join(GOALS)} (e.g. ttft_ms=200,itl_ms=40)")
            try:
                goals[name] = float(bound)
            except ValueError:
                raise UsageError(f"--slo {part!r}: {name} needs a number of milliseconds") from None
            if goals[name] <= 0:
                raise UsageError(f"--slo {part!r}: {name} must be > 0")
            if GOALS[name][1] and mode != "stream":
                raise UsageError(f"--slo {name}: batch replies arrive whole and have no {name[:-3]}: use "
                                 "latency_ms, or --mode stream")
        return cls(goals)

    def met(self, record: dict[str, Any]) -> bool:
        """Whether an answered request (``RequestRecord.as_dict``) met every goal."""
        return all(record.get(GOALS[name][0]) is not None and record[GOALS[name][0]] <= bound
                   for name, bound in self.goals.items())


def check_turns(turns: int, request_rate: str | None) -> None:
    """ClientError for a ``--turns`` a run cannot have."""
    if turns < 1:
        raise UsageError(f"--turns must be >= 1, got {turns}")
    if turns > 1 and request_rate:
        raise UsageError("--turns sends each turn after its answer: give --concurrency (conversations at once), "
                         "not --request-rate")


def later_turns(records: list[Any]) -> Iterator[Any]:
    """The answered requests of turns after the first."""
    return (r for r in records if r.ok and r.stats is not None and r.turn > 1)
