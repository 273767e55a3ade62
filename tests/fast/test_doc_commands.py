"""The docs tier's reader (``tests/doc_commands.py``): what it takes from a page as a command, and that every command
of README.md and docs/*.md is run by ``tests/e2e/test_docs_commands.py`` or skipped with a reason in the page."""

from __future__ import annotations

import re

import pytest
from doc_commands import PRELUDE, SERVER, SHELLS, STAND_INS, Command, DocsError, blocks, pages, shell_blocks

PAGE = """\
# A page

<!-- not run by the docs tier:
`make test`: the whole suite
-->
```sh
source .venv/bin/activate   # the venv
make test
qaic-console --prompt "a # b|c" \\
    --url 127.0.0.1:8001  # a running server

# a comment line
generate-llm-model-repo --model_name <custom_model> --aic_binary_dir <path/to/qpc>
```

```text
qaic-console serve   (an output, not run)
```
"""
# the first word of a command line, as pages write them (a fence that is not sh holding one would drop it)
PROGRAMS = re.compile(r"\s*(qaic-console|generate-llm-model-repo|make|pip|curl|python|kubectl|promtool|lm_eval|"
                      r"source)\s")


def test_a_shell_block_gives_its_commands_joined_uncommented_and_skipped_as_the_page_says() -> None:
    shell, text = blocks("page.md", PAGE)
    assert (shell.lang, text.lang, text.commands) == ("sh", "text", ())
    assert text.body == ("qaic-console serve   (an output, not run)",)
    assert shell.commands == (
        Command("page.md", 7, "source .venv/bin/activate"),
        Command("page.md", 8, "make test", "the whole suite"),
        Command("page.md", 9, 'qaic-console --prompt "a # b|c" --url 127.0.0.1:8001'),
        Command("page.md", 13, "generate-llm-model-repo --model_name <custom_model> --aic_binary_dir <path/to/qpc>"))


def test_the_stand_ins_replace_whole_words_once() -> None:
    command = Command("p.md", 1, "curl localhost:8000/v2 --port 18000 --qpc <path/to/qpc> --url HOST:PORT")
    resolved = command.resolved({"http": 5, "grpc": 6, "metrics": 7, "free": 8, "stand_ins": "/s"})
    assert resolved == "curl localhost:5/v2 --port 18000 --qpc /s/qpc --url 127.0.0.1:5"


@pytest.mark.parametrize(("text", "error"), [
    ("```\nqaic-console serve\n```\n", "an untagged fence"),
    ("```sh\nqaic-console serve\n", "a fence that is not closed"),
    ("<!-- not run by the docs tier:\n`make run`: slow\n-->\n```sh\nmake test\n```\n", "names no command"),
    ("<!-- not run by the docs tier:\nmake run: slow\n-->\n```sh\nmake run\n```\n", "a skip line is"),
    ("```sh\nqaic-console serve \\\n```\n", "continued past its block's end"),
    ("<!-- not run by the docs tier:\n`make run`: slow\n-->\n\nprose\n\n```sh\nmake run\n```\n", "right below"),
])
def test_a_page_the_tier_cannot_read_is_refused_naming_where(text: str, error: str) -> None:
    with pytest.raises(DocsError, match=error):
        blocks("p.md", text)


def test_every_page_reads_and_every_command_runs_or_says_why_not() -> None:
    commands = [c for b in shell_blocks() for c in b.commands]
    assert len(commands) > 80  # README.md and docs/*.md's commands (a reader that found none would pass)
    assert [c for c in commands if c.skip is not None and len(c.skip) < 10] == []
    run = [c for c in commands if c.skip is None]
    assert {SERVER, PRELUDE} <= {c.text for c in run}  # the tier's server and repository are the pages' own
    placeholders = [(c.page, c.line, p) for c in run for p in re.findall(r"<[^<>\s]+>", c.text) if p not in STAND_INS]
    assert placeholders == []


def test_no_command_hides_in_a_fence_that_is_not_run() -> None:
    hidden = [(path.name, block.line, line) for path in pages()
              for block in blocks(path.name, path.read_text("utf-8")) if block.lang not in SHELLS
              for line in block.body if PROGRAMS.match(line)]
    assert hidden == []
