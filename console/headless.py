"""Headless mode's output: replies on stdout (streamed on a terminal, whole when piped, or JSON lines),
speed figures and errors on stderr, and the exit code.

``qaic-console --prompt "My name is|Maroon bells"`` (see :mod:`console.cli`) sends through the core
pipeline; without ``--url`` the embedded SmolLM2 is served for the run.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from console.clients import ClientError, Event, Reply, TextDelta, format_stats, split_prompts
from console.core.adapters import Adapter, started_here
from console.core.request import Exchange, Settings, prepare
from console.core.turns import Turn, batch_model_note
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
        """Print what is left; the exit code."""
        replies, failure = self.turn.replies, self.turn.failure
        if self.live_open and 0 not in replies:
            self._write("\n")
        for i in range(len(self.prompts)):
            reply = replies.get(i)
            if self.output.json:
                self._write(json.dumps(self._json(i, reply), ensure_ascii=False) + "\n")
            elif reply is not None:
                if i == 0 and self.live_open:
                    self._write("\n")
                else:
                    self._write(("\n" if self.multi and i > 0 else "") + self._header(i) + self.turn.shown(i) + "\n")
            if reply is not None and not self.output.quiet:
                where = f"[{i + 1}/{len(self.prompts)}] " if self.multi else ""
                self.err.write(f"{where}{reply.finish_reason or '?'} · {format_stats(reply.stats)}\n")
        batch = batch_model_note(self.settings.model, self.settings.mode, list(replies.values()))
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

    def _json(self, i: int, reply: Reply | None) -> dict[str, Any]:
        row: dict[str, Any] = {"index": i, "prompt": self.prompts[i], "model": self.settings.model,
                               "mode": self.settings.mode}
        if reply is not None:
            return {**row, "text": self.turn.shown(i), "finish_reason": reply.finish_reason, **reply.stats.as_dict()}
        failure = self.turn.failure
        return {**row, "text": None, "finish_reason": None, "error": failure.message if failure else "no reply",
                "error_kind": failure.kind if failure else None}


PREPARE_NOTE = 0.5  # s: a preparation this long is said (the figures start when the request is sent)


def answer(server: Adapter, settings: Settings, prompts: list[str], output: Output, out: TextIO, err: TextIO,
           tty: bool, progress: Callable[[str], None]) -> int:
    """Send the prompts to a running server and print the answers; the exit code."""
    if settings.templated:
        progress(f"applying the chat template of {settings.model} ...")
    turn = Exchange.new(settings, prompts).turn
    prepared = prepare(server, settings, prompts, request_id=turn.request_id, progress=progress)
    if prepared.seconds >= PREPARE_NOTE:
        progress(f"prepared in {prepared.seconds:.1f} s (model config, chat template): not part of the figures below")
    if prepared.ignored:
        progress(f"note: {settings.model} has no input for {', '.join(prepared.ignored)}: not sent")
    for note in prepared.notes:
        progress(f"note: {note}")
    printer = Printer(turn, settings, output, out, err, tty)
    try:
        with contextlib.closing(iter(prepared.call)) as events:  # closing an unfinished call cancels it
            for event in events:
                printer.event(event)
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
        err.write("error: interrupted\n")
        return 130
    return 1
