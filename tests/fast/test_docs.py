"""The documentation: every ``qaic-console`` command and flag the README and ``docs/`` name is in that command's
``--help`` (read from the click command objects, as ``--help`` prints them), and the site builds in strict mode (a
broken link or anchor fails)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from doc_commands import blocks, pages

ROOT = Path(__file__).resolve().parents[2]
PAGES = pages()
INLINE = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)*)`(?!`)")


def _generator_parser() -> argparse.ArgumentParser:
    from repo_gen import command

    return command.parser("generate-llm-model-repo", command.DEFAULT_OUT, None)


def _main() -> click.Group:
    from console.cli import main

    return main


def commands_in(text: str) -> Iterator[str]:
    """The command lines a page names: the commands of its shell blocks (as the docs tier reads them), and inline
    code that starts with a command."""
    for block in blocks("page", text):
        yield from (c.text for c in block.commands if c.text.startswith(("qaic-console", "generate-llm-model-repo")))
    top = set(_main().commands)
    for span in INLINE.findall(text):
        span = " ".join(span.split())
        first = span.split(" ", 1)[0]
        if first in ("qaic-console", "generate-llm-model-repo"):
            yield span
        elif first in top and " --" in span:  # `serve --stop-stale`, `tui --http-url`: a command named in passing
            yield "qaic-console " + span


def _words(line: str) -> list[str]:
    """The words of a command line, up to a comment or a pipe; placeholders (<its gRPC>) one word, brackets dropped."""
    line = re.sub(r"<[^<>]*>", "PLACEHOLDER", line)
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote in prose: its words all the same
        words = line.split()
    words = words[: words.index("|")] if "|" in words else words
    return [w.strip("[]") for w in words if w.strip("[]")]


def _argparse_problems(line: str, words: list[str]) -> list[str]:
    known = _generator_parser()._option_string_actions
    return [f"{line!r}: {w.split('=')[0]} is not an option of the generator"
            for w in words if w.startswith("-") and w.split("=")[0] not in known]


def problems(line: str) -> list[str]:
    """What in one command line is not in ``--help``: a subcommand or an option of the command it reaches."""
    words = _words(line)
    if words[0] == "generate-llm-model-repo":
        return _argparse_problems(line, words[1:])
    command: click.Command = _main()
    path, found = ["qaic-console"], []
    words = words[1:]
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--" or word == "...":
            break
        if word.startswith("-") and len(word) > 1:
            name = word.split("=")[0]
            shown = [p for p in command.params if not getattr(p, "hidden", False)]
            params = {o: p for p in shown for o in p.opts + p.secondary_opts}
            params.update({o: None for o in ("--help", "-h")})
            if name not in params:
                found.append(f"{line!r}: {' '.join(path)} has no option {name}")
            option = params.get(name)
            takes_value = isinstance(option, click.Option) and not option.is_flag and not option.count
            i += 2 if takes_value and "=" not in word else 1
            continue
        if isinstance(command, click.Group):
            names = word.split("|")  # `client stream|batch|generate`
            if all(n in command.commands for n in names):
                path.append(names[0])
                command = command.commands[names[0]]
                if path[-2:] == ["repo", "gen"]:  # argparse's own flags (the seed's generator)
                    return _argparse_problems(line, [w for w in words[i + 1:] if w != "--"])
            elif path == ["qaic-console"]:  # it takes no arguments
                return [*found, f"{line!r}: qaic-console has no command {word!r}"]
        i += 1
    return found


def test_every_command_and_flag_the_docs_name_is_in_its_help() -> None:
    named = [(page.relative_to(ROOT), line) for page in PAGES for line in commands_in(page.read_text())]
    assert len(named) > 50  # the parser finds the pages' commands (it would pass on none)
    wrong = [f"{page}: {p}" for page, line in named for p in problems(line)]
    assert wrong == []


@pytest.mark.parametrize(("line", "wrong"), [
    ("qaic-console serve --no-such-flag", "qaic-console serve has no option --no-such-flag"),
    ("qaic-console bench compare a.json --nope", "qaic-console bench compare has no option --nope"),
    ("qaic-console servee --model-repository x", "qaic-console has no command 'servee'"),
    ("qaic-console repo gen --model_name x --no_such", "--no_such is not an option of the generator"),
    ("generate-llm-model-repo --model_name x --engine onnx --bogus 1", "--bogus is not an option of the generator"),
])
def test_the_check_finds_a_flag_or_command_that_help_does_not_have(line: str, wrong: str) -> None:
    assert [p.split(": ", 1)[1] for p in problems(line)] == [wrong]


def test_the_check_reads_commands_from_blocks_and_inline_code() -> None:
    page = ("```sh\nqaic-console serve \\\n    --model-repository R  # a comment --not-a-flag\n```\n"
            "Run `qaic-console models --url HOST:PORT`, or `tui --http-url` in passing; `make run` is not ours.")
    assert list(commands_in(page)) == ["qaic-console serve --model-repository R",
                                       "qaic-console models --url HOST:PORT", "qaic-console tui --http-url"]
    assert [problems(line) for line in commands_in(page)] == [[], [], []]


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    """mkdocs-material, strict: a link to a page or an anchor that is not there fails."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "serving" / "index.html").is_file()


def test_the_readme_is_short_and_its_links_lead_somewhere() -> None:
    """The README is the two commands, the flow and the way in; the reference lives in docs/ (the site checks its
    own links)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert readme.split("```sh\n")[1].startswith("make run ") and "\nmake test " in readme.split("```")[1]
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert "docs/serving.md" in targets
    assert [t for t in targets if not (ROOT / t).exists()] == []
