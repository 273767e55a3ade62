"""The command line starts light: ``--help`` imports no heavy library, and a command whose optional part is missing
ends with the one line that installs it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

HEAVY = ("torch", "transformers", "gradio", "onnx", "onnxruntime", "fastapi", "matplotlib")
# run the CLI in a fresh interpreter, then name the heavy modules it imported (atexit: after click's sys.exit)
PROBE = ("import atexit, sys\n"
         "atexit.register(lambda: print('imported:', *sorted(set(sys.modules) & set({heavy!r}))))\n"
         "{block}\n"
         "from console.cli import main\n"
         "main({args!r})\n")


def run_cli(*args: str, block: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``qaic-console ARGS`` in a fresh interpreter; ``block``: modules that are not installed there. Its temp dir is
    its own: what other consoles left in /tmp (a killed web console's folder, which ``web`` removes, saying so) is
    not its output."""
    blocked = "".join(f"sys.modules[{name!r}] = None\n" for name in block)
    code = PROBE.format(heavy=HEAVY, block=blocked, args=list(args))
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "TMPDIR": tmp})


def imported(done: subprocess.CompletedProcess) -> list[str]:
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("imported:")]
    return line.split()[1:]


def test_help_imports_no_heavy_library() -> None:
    done = run_cli("--help")
    assert done.returncode == 0, done.stderr
    assert imported(done) == []


def test_every_commands_help_imports_no_heavy_library() -> None:
    """Each command's ``--help`` (and each group's commands'), all in one interpreter."""
    code = ("import sys\n"
            "from click.testing import CliRunner\n"
            "from console.cli import main\n"
            "def walk(group, path):\n"
            "    for name, command in group.commands.items():\n"
            "        done = CliRunner().invoke(main, [*path, name, '--help'])\n"
            "        assert done.exit_code == 0, (path, name, done.output)\n"
            "        print(' '.join([*path, name]))\n"
            "        walk(command, [*path, name]) if hasattr(command, 'commands') else None\n"
            "walk(main, [])\n"
            f"print('imported:', *sorted(set(sys.modules) & set({HEAVY!r})))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert {"serve", "web", "openai", "check", "onnx export", "bench report", "eval"} <= set(done.stdout.splitlines())
    assert imported(done) == []


def test_importing_the_cli_imports_no_heavy_library() -> None:
    code = f"import sys, console.cli; print(sorted(set(sys.modules) & set({HEAVY!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_version_names_the_package() -> None:
    from importlib.metadata import version

    done = run_cli("--version")
    assert done.stdout.splitlines()[0] == f"qaic-console {version('qaic-console')}"


@pytest.mark.parametrize(("args", "module", "extra"), [
    (["web", "--no-start"], "gradio", "web"),
    (["openai", "--url", "127.0.0.1:1", "--grpc-url", "127.0.0.1:2", "--port", "1"], "uvicorn", "front"),
    (["check", "--max-tokens", "1"], "torch", "serve"),
])
def test_a_missing_extra_is_one_line_naming_its_install(args: list[str], module: str, extra: str) -> None:
    done = run_cli(*args, block=(module,))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: {module} is not installed ({extra_what(extra)} need it): pip install 'qaic-console[{extra}]'"]


def test_a_missing_module_of_no_extra_is_not_hidden() -> None:
    done = run_cli("web", "--no-start", block=("console.web.app",))
    assert done.returncode == 1
    assert "ModuleNotFoundError" in done.stderr and "pip install" not in done.stderr


def extra_what(extra: str) -> str:
    from console.infra.extras import EXTRAS

    return EXTRAS[extra][0]
