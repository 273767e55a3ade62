"""The docs tier: every shell command of README.md and docs/*.md runs as written (``tests/doc_commands.py`` reads
them, with the one table of stand-ins for what a page names that this machine does not have).

Each block runs in a fresh folder, in order, as a reader pastes it: a folder that holds what a clone's root holds for
the commands (``.venv``, ``assets``) and, when the block names the pages' repository without writing it, the one the
README's step 1 writes. A command ends with exit code 0 and no traceback. One that runs until stopped (``serve``,
``web``, ``openai``, ``metrics --watch``: until it says ``press Ctrl-C to stop`` or prints; ``tui``: on a terminal,
until it draws) has the addresses it printed probed, then is stopped as a reader stops it and ends cleanly. The
commands that name the ports 8000-8002 talk to the tier's server, started once a module from ``SERVER`` (the README's
and serving.md's own command) while the blocks that need no server run. The page gives the commands to bash as a
reader's shell gets them: they are this repository's own text, never a caller's.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from doc_commands import PRELUDE, REPOSITORY, ROOT, SERVER, STAND_INS, Block, Command, shell_blocks
from helpers import SERVER_START, consecutive_ports, write_qpc

from console.server.ports import free_port

pytestmark = pytest.mark.server

READY = "press Ctrl-C to stop"  # serve, web and openai print it once they serve
TRACEBACK = "Traceback (most recent call last)"
ONE_SHOT = 300  # seconds a command that ends may take
URL = re.compile(r"http://127\.0\.0\.1:\d+[^\s),]*")
CLONE = (".venv", "assets")  # what a clone's root holds that the commands name
TERMINAL = (160, 45)


@dataclass(frozen=True)
class Until:
    """How a command that runs until stopped is run: what it shows once it serves (or has drawn), the signal that
    stops it as a reader does (Ctrl-C; the TUI, which reads Ctrl-C as a key, quits on SIGTERM), the exit code it then
    ends with (docs/errors-and-signals.md: a clean stop 0, any other Ctrl-C 130), and whether it needs a terminal."""

    ready: str
    stop: signal.Signals = signal.SIGINT
    code: int = 0
    terminal: bool = False


LONG_RUNNING = {"serve": Until(READY), "web": Until(READY), "openai": Until(READY, code=130),
                "metrics --watch": Until("card: "),  # each table of --watch ends with the card's line
                "tui": Until("F2", signal.SIGTERM, terminal=True)}  # its footer names the panes' keys once drawn


def until(text: str) -> Until | None:
    """How the command runs until stopped, or None: it ends by itself."""
    words = shlex.split(text)
    if words[:1] != ["qaic-console"] or len(words) < 2:
        return None
    return LONG_RUNNING.get(words[1]) or (LONG_RUNNING.get(f"{words[1]} --watch") if "--watch" in words else None)


def environment() -> dict[str, str]:
    """This environment with the venv's bin/ first on PATH, as `source .venv/bin/activate` leaves a reader's shell."""
    venv = Path(sys.prefix)
    return {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "TERM": "xterm-256color"}


class Running:
    """A command that runs until stopped: its output (stdout and stderr, or its terminal's screen) as it comes."""

    def __init__(self, text: str, cwd: Path, ready: str, terminal: bool = False) -> None:
        self.text, self.ready, self.output = text, ready, ""
        self._seen = threading.Event()
        if terminal:  # its own pseudo-terminal of the size users have
            reader, writer = pty.openpty()
            fcntl.ioctl(writer, termios.TIOCSWINSZ, struct.pack("HHHH", TERMINAL[1], TERMINAL[0], 0, 0))
            streams = {"stdin": writer, "stdout": writer, "stderr": writer}
        else:
            reader, writer = os.pipe()
            streams = {"stdin": subprocess.DEVNULL, "stdout": writer, "stderr": writer}
        self.process = subprocess.Popen(["bash", "-c", text], cwd=cwd, env=environment(), start_new_session=True,
                                        **streams)
        os.close(writer)
        self._reader = threading.Thread(target=self._read, args=(reader,), daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        try:
            while chunk := _read_some(fd):
                self.output += re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", chunk.decode(errors="replace"))
                if self.ready in self.output:
                    self._seen.set()
        finally:
            os.close(fd)
            self._seen.set()  # ended: nothing more comes

    def wait_ready(self, timeout: float) -> None:
        """Until it prints ``ready``; fails with its output if it ends first or does not within ``timeout``."""
        self._seen.wait(timeout)
        assert self.ready in self.output, f"{self.text!r} did not say {self.ready!r}:\n{self.output[-3000:]}"

    def stop(self, sig: signal.Signals, timeout: float = 120) -> int:
        """Send ``sig`` to its process group (as a terminal does); its exit code once it and its output ended."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
        try:
            code = self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._reader.join(10)
        return code


def _read_some(fd: int) -> bytes:
    """What ``fd`` has (b"" at its end; a terminal's end is EIO)."""
    select.select([fd], [], [])
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


def probe(output: str) -> None:
    """Every http:// address the command printed answers (any status below 500)."""
    for url in URL.findall(output):
        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                status = reply.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except urllib.error.URLError as exc:
            raise AssertionError(f"{url}, printed, does not answer ({exc.reason}):\n{output[-3000:]}") from None
        assert status < 500, f"{url} answered {status}:\n{output[-3000:]}"


class Tier:
    """The module's folders and server: the stand-ins, the README's repository, the server started from SERVER."""

    def __init__(self, root: Path) -> None:
        from repo_gen.artifacts import export
        from repo_gen.samples import write_samples

        self.root = root
        stand_ins = root / "stand-ins"
        write_qpc(stand_ins / "qpc")
        export(stand_ins)
        write_samples(("smollm2_kv",), stand_ins / "samples")
        shutil.copy(stand_ins / "samples" / "smollm2_kv" / "compile_config.json", stand_ins)
        http = consecutive_ports(3)  # the pages' layout (8000, 8001, 8002), which the consoles guess from one port
        self.values: dict[str, object] = {"stand_ins": stand_ins, "http": http, "grpc": http + 1, "metrics": http + 2}
        self.repository = self.folder("repository", with_repository=False)
        done = run(PRELUDE, self.repository)
        assert done.returncode == 0, done.stdout + done.stderr
        self.repository /= REPOSITORY
        self.server = Running(Command("", 0, SERVER).resolved(self.values), self.folder("server"), READY)
        self._ready: bool | None = None

    def folder(self, name: str, with_repository: bool = True) -> Path:
        """A fresh folder as a clone's root, with the README's repository when asked."""
        folder = self.root / name
        folder.mkdir()
        for entry in CLONE:
            (folder / entry).symlink_to(Path(sys.prefix) if entry == ".venv" else ROOT / entry)
        if with_repository:
            shutil.copytree(self.repository, folder / REPOSITORY, symlinks=True)
        return folder

    def wait_server(self) -> None:
        """Until the tier's server serves (once; its addresses probed)."""
        if self._ready is None:
            self._ready = False
            self.server.wait_ready(SERVER_START)
            probe(self.server.output)
            self._ready = True
        assert self._ready, f"the tier's server did not start:\n{self.server.output[-3000:]}"

    def stop(self) -> None:
        """Stop the server as a reader does (Ctrl-C); once it served, it ends saying so, with exit code 0."""
        code = self.server.stop(signal.SIGINT)
        if not self._ready:  # stopped while loading (no block needed it): that stop is another test's
            return
        assert (code, TRACEBACK in self.server.output) == (0, False), self.server.output[-3000:]
        assert self.server.output.rstrip().endswith("stopped"), self.server.output[-3000:]


def run(text: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command that ends, as bash runs it in ``cwd``."""
    return subprocess.run(["bash", "-c", text], cwd=cwd, env=environment(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=ONE_SHOT)


@pytest.fixture(scope="module")
def tier() -> Iterator[Tier]:
    # a folder of its own, not pytest's numbered one: another pytest session's clean-up of those would take it away
    root = Path(tempfile.mkdtemp(prefix="docs-tier-"))
    try:
        made = Tier(root)
        yield made
        made.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def uses_server(command: Command) -> bool:
    """Whether the command names the tier's server's ports (then it waits for that server)."""
    return command.text == SERVER or any(key in command.text and "{" + field + "}" in STAND_INS[key]
                                         for key in STAND_INS for field in ("http", "grpc", "metrics"))


def run_block(block: Block, tier: Tier) -> None:
    """The block's commands in order in a fresh folder; every failure named with the command and its output."""
    folder = tier.folder(f"{Path(block.page).stem}-{block.line}", with_repository=block.needs_repository)
    values = {**tier.values, "free": free_port()}
    for command in block.commands:
        if command.skip:
            continue
        if uses_server(command):
            tier.wait_server()
        if command.text == SERVER:  # the tier's server is this command, already serving
            continue
        run_command(command, folder, values)


def run_command(command: Command, folder: Path, values: dict[str, object]) -> None:
    """One command in ``folder``: it ends with exit code 0 and no traceback, or it runs until it serves, answers at
    the addresses it printed and stops as a reader stops it."""
    text, how = command.resolved(values), until(command.text)
    where = f"{command.page}:{command.line}: {text}"
    if how is None:
        done = run(text, folder)
        output = done.stdout + done.stderr
        assert (done.returncode, TRACEBACK in output) == (0, False), f"{where}\n{output[-3000:]}"
        return
    running = Running(text, folder, how.ready, terminal=how.terminal)
    try:
        running.wait_ready(SERVER_START)
        probe(running.output)
    finally:
        code = running.stop(how.stop)
    assert (code, TRACEBACK in running.output) == (how.code, False), f"{where}\n{running.output[-3000:]}"


def params() -> list:
    found = []
    for block in shell_blocks():
        marks = [pytest.mark.skip(reason="; ".join(sorted({c.skip or "" for c in block.commands})))] \
            if all(c.skip for c in block.commands) else []
        found.append(pytest.param(block, id=f"{block.page}:{block.line}", marks=marks))
    return found


@pytest.mark.parametrize("block", params())
def test_the_block_runs_as_written(block: Block, tier: Tier) -> None:
    run_block(block, tier)
