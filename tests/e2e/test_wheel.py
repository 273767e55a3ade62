"""A plain install: the wheel built from this tree, installed into a fresh virtual environment, generates a
repository and serves it from a folder outside the source tree.

The fresh environment gets only the wheel (``--no-deps``); the heavy dependencies (torch, tritonclient,
the nvidia-pytriton server, the embedded model) come from the project's environment through a ``.pth``
line, which adds that folder to ``sys.path`` without running its ``.pth`` files (so the project's
editable install is not active there).
"""

from __future__ import annotations

import signal
import subprocess
import sysconfig
from pathlib import Path

import pytest
from helpers import ROOT, outside_env, site_packages, wheel_in_fresh_venv

from backend_model.models import cache_root


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{'bin': the fresh venv's bin/, 'work': an empty folder outside the tree, 'env' ...}."""
    tmp = tmp_path_factory.mktemp("wheel")
    python = wheel_in_fresh_venv(tmp)
    Path(site_packages(python), "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp / "work"
    work.mkdir()
    cache = tmp / "cache"
    cache.mkdir()
    for shared in ("models", "triton-backends"):  # the prepared weights and backend folder, not the repository
        if (cache_root() / shared).is_dir():
            (cache / shared).symlink_to(cache_root() / shared)
    return {"bin": python.parent, "work": work, "cache": cache}


def run(installed: dict[str, Path], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=installed["work"], env=env_of(installed), capture_output=True, text=True,
                          timeout=timeout)


def env_of(installed: dict[str, Path]) -> dict[str, str]:
    env = outside_env()
    return {**env, "QAIC_CONSOLE_CACHE": str(installed["cache"]), "PATH": f"{installed['bin']}:{env['PATH']}"}


def test_the_wheel_carries_its_data_and_not_the_tree(installed: dict[str, Path]) -> None:
    code = ("import console, repo_gen.writer as w, repo_gen.artifacts as a; print(console.__file__); "
            "print(all(p.is_file() for p in (w.TEMPLATES / 'model.py', w.TEMPLATES / 'config.pbtxt.tmpl', "
            "a.seed_client_dir('batch') / 'seed_client.py', a.RELEASE / 'generate_llm_model_repo.py')))")
    done = run(installed, str(installed["bin"] / "python"), "-c", code)
    assert done.returncode == 0, done.stderr
    where, data = done.stdout.split()
    assert where.startswith(str(installed["bin"].parent)) and not where.startswith(str(ROOT)), where
    assert data == "True"


def test_generate_serve_and_ask(installed: dict[str, Path]) -> None:
    bin_ = installed["bin"]
    done = run(installed, str(bin_ / "generate-llm-model-repo"), "--model_name", "smollm2_kv")
    assert done.returncode == 0, done.stderr
    model = installed["work"] / "llm_model_dir" / "smollm2_kv"
    assert (model / "1" / "model.py").is_file() and (model / "1" / "backend_model" / "triton_model.py").is_file()
    serve = subprocess.Popen([str(bin_ / "qaic-console"), "serve", "--model-repository", "llm_model_dir"],
                             cwd=installed["work"], env=env_of(installed), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in serve.stdout:  # until the ready block names the endpoints (or the server gives up)
            lines.append(line.rstrip())
            if line.startswith("  HTTP"):
                break
        http = lines[-1].split()[-1]
        assert lines[-1].startswith("  HTTP"), "\n".join(lines[-30:])
        assert any("model smollm2_kv: READY" in line for line in lines), lines
        asked = run(installed, str(bin_ / "qaic-console"), "client", "batch", "--prompt", "My name is", "--url",
                    http, "--model_name", "smollm2_kv", "--max_tokens", "4")
        assert asked.returncode == 0, asked.stderr
        assert asked.stdout.startswith("My name is") and len(asked.stdout.strip()) > len("My name is")
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=120)
    assert serve.returncode == 0
