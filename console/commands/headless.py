"""Headless mode's output: replies on stdout (streamed on a terminal, whole when piped, or JSON lines),
speed figures and errors on stderr, and the exit code.

``qaic-console --prompt "My name is|Maroon bells"`` (see :mod:`console.cli`) sends through the core
pipeline; without ``--url`` the embedded SmolLM2 is served for the run.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from console.clients import Cancelled, ClientError, Event, Failure, TextDelta, split_prompts
from console.core.adapters import Adapter, started_here
from console.core.embeddings import embed
from console.core.request import Exchange, Settings, prepare
from console.core.turns import Turn, batch_model_note, ignored_note, prepare_note
from console.infra.signals import INTERRUPTED
from console.server import ServerError
from console.server.embedded import embedded_server


@dataclass(frozen=True)
class Output:
    """How headless mode prints."""

    json: bool = False  # one JSON object per prompt
    quiet: bool = False  # no progress or speed lines on stderr


class Printer:
    """Renders a turn as its call's events are folded into it: stdout for replies, stderr for figures and errors."""

    def __init__(self, turn: Turn, settings: Settings, output: Output, out: TextIO, err: TextIO,
                 tty: bool) -> None:
        self.turn = turn
        self.prompts = turn.prompts  # as the user typed them (before any chat template)
        self.settings = settings
        self.output = output
        self.out, self.err = out, err
        self.live = tty and not output.json  # stream text as it arrives
        self.multi = len(self.prompts) > 1
        self.live_open = False  # prompt 0's text is being printed live

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def _header(self, i: int) -> str:
        """``[i/n] prompt`` above each reply when there are several (``[i/n]`` when echoing)."""
        if not self.multi:
            return ""
        return f"[{i + 1}/{len(self.prompts)}]" + ("" if self.turn.echo else f" {self.prompts[i]}") + "\n"

    def event(self, event: Event) -> None:
        """Fold ``event`` into the turn; stream prompt 0's text as it arrives on a terminal."""
        self.turn.apply(event)
        if isinstance(event, TextDelta) and self.live and event.index == 0:
            if not self.live_open:
                self._write(self._header(0) + (self.prompts[0] if self.turn.echo else ""))
                self.live_open = True
            self._write(event.text)

    def interrupted(self) -> None:
        """End a half-printed line before the error goes to stderr."""
        if self.live_open:
            self._write("\n")

    def finish(self) -> int:
        """Print what is left (a reply cut short too: its text so far, marked by its status); the exit code."""
        turn, replies, failure = self.turn, self.turn.replies, self.turn.failure
        if self.live_open and 0 not in replies:
            self._write("\n")
        for i in range(len(self.prompts)):
            reply, shown = replies.get(i), reply_shown(turn, i)
            if self.output.json:
                self._write(json.dumps(self._json(i), ensure_ascii=False) + "\n")
            elif shown and not (i == 0 and self.live_open):
                self._write(("\n" if self.multi and i > 0 else "") + self._header(i) + turn.shown(i) + "\n")
            elif shown:
                self._write("\n" if reply is not None else "")
            if shown and not self.output.quiet:
                where = f"[{i + 1}/{len(self.prompts)}] " if self.multi else ""
                cut = " · cut short" if turn.cut_short(i) else ""
                self.err.write(f"{where}{turn.status(i)}{cut}\n")
        batch = batch_model_note(turn)
        if batch and not self.output.quiet:
            self.err.write(f"note: {batch}\n")
        bad = [r for r in replies.values() if not r.ok]
        if failure is not None:
            self.err.write(f"error: {failure.message}\n")
        elif bad:
            self.err.write(f"error: {len(bad)} of {len(self.prompts)} prompts finished with "
                           f"{', '.join(sorted({r.finish_reason for r in bad}))}\n")
        self.err.flush()
        return 1 if failure is not None or bad or len(replies) < len(self.prompts) else 0

    def _json(self, i: int) -> dict[str, Any]:
        turn, reply = self.turn, self.turn.replies.get(i)
        row: dict[str, Any] = {"index": i, "prompt": self.prompts[i], "model": self.settings.model,
                               "mode": self.settings.mode}
        if reply is not None:
            return {**row, "text": turn.shown(i), "finish_reason": reply.finish_reason, **reply.stats.as_dict()}
        failure, stats = turn.failure, turn.figures(i)
        return {**row, "text": turn.shown(i) if turn.cut_short(i) else None, "finish_reason": None,
                "cut_short": turn.cut_short(i), "error": failure.message if failure else "no reply",
                "error_kind": failure.kind if failure else None, **(stats.as_dict() if stats else {})}


def reply_shown(turn: Turn, index: int) -> bool:
    """Whether prompt ``index`` has something to print: its reply, or the text of one cut short."""
    return index in turn.replies or turn.cut_short(index)


def answer(server: Adapter, settings: Settings, prompts: list[str], output: Output, out: TextIO, err: TextIO,
           tty: bool, progress: Callable[[str], None]) -> int:
    """Send the prompts to a running server and print the answers; the exit code (130: Ctrl-C, the text that came
    printed all the same)."""
    turn = Exchange.new(settings, prompts).turn
    prepared = prepare(server, settings, prompts, request_id=turn.request_id, progress=progress)
    for note in (prepare_note(prepared.seconds), ignored_note(settings.model, prepared.ignored), *prepared.notes):
        if note:
            progress(f"note: {note}")
    printer = Printer(turn, settings, output, out, err, tty)
    prepared.begin(turn)
    try:
        with contextlib.closing(iter(prepared.call)) as events:  # closing an unfinished call cancels it
            for event in events:
                printer.event(event)
    except KeyboardInterrupt:
        seconds = time.perf_counter() - (turn.sent_at or 0.0)
        turn.apply(Failure(f"interrupted (Ctrl-C) after {seconds:.1f} s; {prepared.call.cancel_note}", Cancelled,
                           seconds))
        printer.finish()
        return 130
    except BaseException:
        printer.interrupted()
        raise
    return printer.finish()


def run(settings: Settings, prompt: str, server: Adapter | None, output: Output = Output(),
        out: TextIO | None = None, err: TextIO | None = None, tty: bool | None = None) -> int:
    """Headless mode end to end (``server`` None: serve the embedded model for the run).

    The exit code: 0 ok, 1 failed, 130 interrupted.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    tty = out.isatty() if tty is None else tty

    def progress(message: str) -> None:
        if not output.quiet:
            err.write(message + "\n")
            err.flush()

    try:
        prompts = split_prompts(prompt)  # bad input fails before any server starts
        if server is not None:
            return answer(server, settings, prompts, output, out, err, tty, progress)
        with embedded_server(settings.model, progress) as started:
            return answer(started_here(started.handle), settings, prompts, output, out, err, tty, progress)
    except ServerError as exc:
        err.write(f"error: {exc}\n")
        for line in exc.log_tail[-15:]:
            err.write(f"  | {line}\n")
    except ClientError as exc:
        err.write(f"error: {exc}\n")
    except (OSError, ValueError) as exc:  # e.g. the cache is not writable, a bad repository
        err.write(f"error: {' '.join(str(exc).split())}\n")
    except KeyboardInterrupt:
        err.write(f"{INTERRUPTED}\n")
        return 130
    return 1


def run_embed(server: Adapter, model: str | None, text: str, timeout: float | None, output: Output = Output(),
              out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``--embed "a|b|c"``: each input's dimension and norm and the cosine-similarity matrix (a table, or one JSON
    object) on stdout; the exit code (0 ok, 1 failed, 130 interrupted)."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        found = embed(server, model, split_prompts(text), timeout)
    except ClientError as exc:
        err.write(f"error: {exc}\n")
        return 1
    except KeyboardInterrupt:
        err.write(f"{INTERRUPTED}\n")
        return 130
    out.write((json.dumps(found.as_dict(), ensure_ascii=False) if output.json else found.table()) + "\n")
    if not output.quiet and not output.json:
        err.write(f"{len(found.texts)} vectors from {found.model} in {found.seconds:.3f} s\n")
    return 0
