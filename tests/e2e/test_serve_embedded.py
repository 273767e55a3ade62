"""``qaic-console serve`` as docs/serving.md writes it, with no ``--model-repository``: the installed command runs as a
real process, serves the embedded samples (or the ``--model`` named), answers, and stops on a signal."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cli, json_rows, started

pytestmark = pytest.mark.server
QAIC_CONSOLE = Path(sys.executable).with_name("qaic-console")  # the installed command, as a user types it


def own_cache(tmp_path: Path) -> dict[str, str]:
    """An environment whose console cache is a fresh folder (the embedded repository is written there), sharing the
    prepared weights and backend of this user's cache."""
    from backend_model.models import cache_root

    cache = tmp_path / "cache"
    cache.mkdir()
    for shared in ("models", "triton-backends"):
        if (cache_root() / shared).is_dir():
            (cache / shared).symlink_to(cache_root() / shared)
    return {**os.environ, "QAIC_CONSOLE_CACHE": str(cache)}


def answer(url: str, model: str, mode: str) -> dict:
    result = cli("--prompt", "My name is", "--url", url, "--model", model, "--mode", mode, "--max-tokens", "4",
                 "--json", "--raw")
    (row,) = json_rows(result)
    return row


@pytest.mark.parametrize(("args", "served"), [
    ((), {"smollm2_decoupled": "stream", "smollm2_kv": "batch"}),  # the embedded samples' stream and batch models
    (("--model", "smollm2_decoupled"), {"smollm2_decoupled": "stream"}),
], ids=["serve", "serve --model smollm2_decoupled"])
def test_serve_without_a_repository_serves_the_embedded_samples(tmp_path: Path, args: tuple[str, ...],
                                                                 served: dict[str, str]) -> None:
    env = own_cache(tmp_path)
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr, started([str(QAIC_CONSOLE), "serve", *args], stdout=subprocess.PIPE,
                                             stderr=stderr, env=env, cwd=tmp_path) as proc:
        assert proc.stdout is not None
        printed = []
        for line in proc.stdout:  # until the address block's end, or the process's
            printed.append(line.rstrip("\n"))
            if line.startswith("press Ctrl-C"):
                break
        addresses = dict(re.findall(r"^  (HTTP|gRPC) +(\S+)$", "\n".join(printed), re.MULTILINE))
        assert set(addresses) == {"HTTP", "gRPC"}, (printed, proc.wait(timeout=60), errors.read_text())
        loaded = re.findall(r"^  model (\S+): READY$", "\n".join(printed), re.MULTILINE)
        assert sorted(loaded) == sorted(served), printed
        for model, mode in served.items():
            row = answer(addresses["gRPC" if mode == "stream" else "HTTP"], model, mode)
            assert row["model"] == model and row["output_tokens"] == 4 and row["text"], row
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    err = errors.read_text()
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == "stopped" and "Traceback" not in out + err, (out, err)
