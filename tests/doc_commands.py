"""The shell commands of README.md and docs/*.md as a reader copies them, for the docs tier
(``tests/e2e/test_docs_commands.py``), which runs them, and ``tests/fast/test_doc_commands.py``, which checks that none
is dropped.

A fence tagged ``sh`` or ``bash`` holds commands: one a line, a line ending with ``\\`` continued on the next, ``#``
comments dropped. Every other fence is not run: output (``text``), a shell session with its output (``console``),
a file (``yaml``, ``json``, ``haproxy``) or code (``python``); an untagged fence is refused, so a command is never left
out by a missing tag. A command the tier cannot run says why in the page itself, in an HTML comment just above its
fence: ``<!-- not run by the docs tier:`` then one line a command, ``\\`PREFIX\\`: reason`` (every command of the
block starting with PREFIX), then ``-->``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELLS = ("sh", "bash", "shell")
SKIPS_OPEN = "<!-- not run by the docs tier:"
SKIP_LINE = re.compile(r"`(?P<prefix>[^`]+)`:\s*(?P<reason>\S.*)")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>\S*)\s*$")

# What the pages' commands name that a fresh clone on this machine does not have, and what the tier gives instead:
# ONE table. {http} {grpc} {metrics}: the tier's server (started once a module from SERVER); {free}: a port free when
# the block starts; {stand_ins}: a folder the tier writes once a module (what each stands in for, beside it).
STAND_INS = {
    "<path/to/qpc>": "{stand_ins}/qpc",  # a compiled QPC's layout (programqpc.bin): a card loads it, the CPU refuses
    "/opt/qti-aic/integrations/triton/backends/qaic/qaic_backend_python/":
        "{stand_ins}/qaic_backend_python/",  # the container's backend folder: the one `artifacts export` writes
    "<custom_model>": "my_model",
    "<compile_config.json>": "{stand_ins}/compile_config.json",  # the embedded sample smollm2_kv's
    "<org/model>": "embedded",  # the embedded SmolLM2
    "HOST:PORT": "127.0.0.1:{http}",  # a running server: the tier's
    "8000": "{http}",
    "8001": "{grpc}",
    "8002": "{metrics}",
    "9000": "{free}",  # the OpenAI-compatible front's port
}
_STAND_IN = re.compile("|".join(rf"(?<![\w.]){re.escape(key)}(?![\w])" for key in
                                sorted(STAND_INS, key=len, reverse=True)))

# The tier's server: this command, as the README and serving.md write it, started once a module; the commands that
# name its ports talk to it, and a page that holds it checks that one.
SERVER = "qaic-console serve --model-repository llm_model_dir --http-port 8000 --grpc-port 8001 --metrics-port 8002"
# A block that names the pages' repository without writing it starts with what the README's step 1 writes.
REPOSITORY = "llm_model_dir"
PRELUDE = "qaic-console repo samples --embedded -o llm_model_dir"
WRITERS = ("generate-llm-model-repo ", "qaic-console repo gen ", "qaic-console repo samples ")


class DocsError(ValueError):
    """A page the tier cannot read: an untagged or unclosed fence, a skip that names no command."""


@dataclass(frozen=True)
class Command:
    """One command of a page: where it starts, its text (continuations joined, comment dropped), and the page's
    reason when the tier does not run it."""

    page: str
    line: int
    text: str
    skip: str | None = None

    def resolved(self, values: dict[str, object]) -> str:
        """The text with the stand-ins of ``STAND_INS`` in place, ``values`` filling their fields."""
        return _STAND_IN.sub(lambda m: STAND_INS[m.group(0)].format(**values), self.text)


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: its language, its lines and, for a shell block, its commands in order."""

    page: str
    line: int
    lang: str
    body: tuple[str, ...]
    commands: tuple[Command, ...] = ()

    @property
    def needs_repository(self) -> bool:
        """Whether it names the pages' repository without writing it (then it starts with the README's)."""
        return (any(REPOSITORY in c.text for c in self.commands)
                and not any(c.text.startswith(WRITERS) for c in self.commands))


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def blocks(page: str, text: str) -> list[Block]:
    """The fenced blocks of ``text``, the page named ``page``; DocsError when it cannot be read."""
    lines = text.splitlines()
    found: list[Block] = []
    skips: dict[str, str] = {}
    i = 0
    while i < len(lines):
        if lines[i].strip().startswith(SKIPS_OPEN):
            skips, i = _skips(page, lines, i)
            continue
        fence = FENCE.match(lines[i])
        if fence is None:
            if skips and lines[i].strip():
                raise DocsError(f"{page}:{i + 1}: a skip comment with no fence right below it")
            i += 1
            continue
        lang, start = fence.group("lang"), i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise DocsError(f"{page}:{start + 1}: a fence that is not closed")
        if not lang:
            raise DocsError(f"{page}:{start + 1}: an untagged fence (sh for commands; text, console, yaml ...)")
        commands = _commands(page, start + 2, lines[start + 1:end]) if lang in SHELLS else ()
        body = tuple(lines[start + 1:end])
        found.append(Block(page, start + 1, lang, body, _skipped(page, start + 1, commands, skips)))
        skips, i = {}, end + 1
    if skips:
        raise DocsError(f"{page}: a skip comment with no fence right below it")
    return found


def shell_blocks(root: Path = ROOT) -> list[Block]:
    """Every shell block of every page, in page order."""
    return [b for path in pages(root) for b in blocks(path.relative_to(root).as_posix(), path.read_text("utf-8"))
            if b.lang in SHELLS]


def _skips(page: str, lines: list[str], i: int) -> tuple[dict[str, str], int]:
    """The skip comment opening at line ``i``: {prefix: reason}, and the line after it."""
    skips: dict[str, str] = {}
    for j in range(i + 1, len(lines)):
        line = lines[j].strip()
        if line == "-->":
            return skips, j + 1
        entry = SKIP_LINE.fullmatch(line)
        if entry is None:
            raise DocsError(f"{page}:{j + 1}: a skip line is `COMMAND PREFIX`: reason")
        skips[entry.group("prefix")] = entry.group("reason")
    raise DocsError(f"{page}:{i + 1}: a skip comment that is not closed")


def _skipped(page: str, line: int, commands: tuple[Command, ...], skips: dict[str, str]) -> tuple[Command, ...]:
    """``commands`` with the reasons of ``skips``; DocsError for a skip that names none of them."""
    for prefix in skips:
        if not any(c.text.startswith(prefix) for c in commands):
            raise DocsError(f"{page}:{line}: the skip `{prefix}` names no command of the block below it")
    return tuple(Command(c.page, c.line, c.text, next((r for p, r in skips.items() if c.text.startswith(p)), None))
                 for c in commands)


def _commands(page: str, first: int, lines: list[str]) -> tuple[Command, ...]:
    """The commands of a shell block whose first line is line ``first`` of the page."""
    commands: list[Command] = []
    text, start = "", first
    for number, raw in enumerate(lines, first):
        if not text:
            start = number
        line = _uncommented(raw).rstrip()
        if line.endswith("\\"):
            text += line[:-1].strip() + " "
            continue
        text = (text + line.strip()).strip()
        if text:
            commands.append(Command(page, start, text))
        text = ""
    if text:
        raise DocsError(f"{page}:{start}: a command continued past its block's end")
    return tuple(commands)


def _uncommented(line: str) -> str:
    """``line`` without its ``#`` comment (a ``#`` that starts a word outside quotes, as the shell reads it)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line
