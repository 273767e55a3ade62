"""``qaic-console serve`` hosting Python models that import vllm (``vllm_model.py`` beside this file, our own: vLLM's
offline engine or its tokenizer) beside a bundled sample: through ``--python-env <vllm venv>`` (every stub in that
environment), and through a model's own ``EXECUTION_ENV_PATH`` (the others on the console's Python)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner, Result
from helpers import wait_until
from peer_vllm import VLLM_ENV, VllmServer

from console.cli import main
from repo_gen.samples import write_samples

HERE = Path(__file__).resolve().parent
PROMPT = "My name is"


def vllm_model(python_model, repo: Path, name: str, hf_model: Path, answer: str, env: Path | None = None) -> None:
    """A model folder running vllm_model.py (the consoles' text interface): ``answer`` generate (16 greedy
    tokens) or tokens; ``env``: its EXECUTION_ENV_PATH."""
    folder = python_model(repo, name, (HERE / "vllm_model.py").read_text(), llm=True)
    params = {"hf_model": hf_model, "answer": answer, "max_tokens": 16, **({"EXECUTION_ENV_PATH": env} if env else {})}
    with (folder / "config.pbtxt").open("a") as config:
        config.writelines(f'parameters: {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items())


@contextmanager
def serving(repo: Path, *options: str) -> Iterator[tuple[list[str], str]]:
    """``qaic-console serve`` in a process of its own until it is ready: (its output so far, its HTTP host:port).
    SIGTERM at the end, which it must survive with exit code 0."""
    cmd = [sys.executable, "-u", "-c", "from console.cli import main; main()", "serve", "--model-repository",
           str(repo), "--timeout", "900", *options]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **VLLM_ENV})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in proc.stdout), daemon=True)
    reader.start()
    try:
        wait_until(lambda: "press Ctrl-C to stop" in lines or proc.poll() is not None, 900, "serve to be ready")
        assert "press Ctrl-C to stop" in lines, "\n".join(lines[-40:])
        http = next(m.group(1) for line in lines if (m := re.match(r"\s+HTTP\s+(\S+)", line)))
        yield lines, http
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
        reader.join(10)
        assert lines[-1] == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def ask(http: str, model: str, *options: str) -> dict:
    """One batch-mode answer of ``model`` through the console, as its --json row."""
    result: Result = CliRunner().invoke(main, ["--prompt", PROMPT, "--url", http, "--mode", "batch", "--model", model,
                                               "--json", *options])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return row


def test_serve_python_env_hosts_models_that_import_vllm_beside_a_bundled_sample(
        venv: Path, hf_model: Path, vllm_server: VllmServer, python_model, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_samples(("smollm2_kv",), repo)
    vllm_model(python_model, repo, "vllm_generate", hf_model, "generate")
    vllm_model(python_model, repo, "vllm_tokens", hf_model, "tokens")
    with serving(repo, "--python-env", str(venv)) as (lines, http):
        for name in ("smollm2_kv", "vllm_generate", "vllm_tokens"):
            assert f"  model {name}: READY" in lines, "\n".join(lines[-30:])
        # vLLM's engine in Triton's stub answers as vLLM's own server does (greedy, same weights)
        expected = vllm_server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 16, "temperature": 0})
        assert ask(http, "vllm_generate")["text"] == expected["choices"][0]["text"]
        tokens = vllm_server.post("/tokenize", {"prompt": PROMPT})["tokens"]
        assert json.loads(ask(http, "vllm_tokens")["text"]) == tokens
        sample = ask(http, "smollm2_kv", "--max-tokens", "8")  # the bundled backend, in the vllm venv too
        assert sample["output_tokens"] == 8 and sample["text"].strip()
        listed = CliRunner().invoke(main, ["models", "--url", http])
        assert re.search(r"^vllm_generate\s+READY\s", listed.stdout, re.M) and listed.exit_code == 0, listed.output


def test_a_models_execution_env_path_runs_it_in_the_vllm_venv(venv: Path, hf_model: Path, vllm_server: VllmServer,
                                                              python_model, tmp_path: Path) -> None:
    """The others stay on the console's Python; a model needing vllm without the environment fails alone."""
    repo = tmp_path / "repo"
    write_samples(("smollm2_kv",), repo)
    vllm_model(python_model, repo, "vllm_tokens", hf_model, "tokens", env=venv)
    vllm_model(python_model, repo, "vllm_missing", hf_model, "tokens")
    with serving(repo) as (lines, http):
        assert "  model smollm2_kv: READY" in lines and "  model vllm_tokens: READY" in lines, "\n".join(lines[-30:])
        assert any(line.startswith("  model vllm_missing: FAILED (") and "No module named 'vllm'" in line
                   for line in lines), "\n".join(lines)
        tokens = vllm_server.post("/tokenize", {"prompt": PROMPT})["tokens"]
        assert json.loads(ask(http, "vllm_tokens")["text"]) == tokens
        assert ask(http, "smollm2_kv", "--max-tokens", "8")["output_tokens"] == 8
