"""``qaic-console artifacts export``: Qualcomm's release-artifacts layout, run where the user runs it.

The sample clients run in a bare virtual environment holding only tritonclient and numpy (Python
3.8 with tritonclient 2.29, as in the 22.12 SDK container, when a Python 3.8 is here); the
generator runs under a Python without site-packages; both from the exported folder, with the
seed's commands as written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from google.protobuf import text_format
from helpers import SERVER_START, outside_env, python38, write_qpc
from tritonclient.grpc import model_config_pb2

from backend_model.models import cache_root
from console.cli import main

SDK_22_12 = ["tritonclient[all]==2.29.0", "numpy<1.25"]  # what nvcr.io/nvidia/tritonserver:22.12-py3-sdk has
PROMPT = "My name is|Maroon bells"
SEED_MISTRAL = {"num_cores": 16, "prefill_seq_len": 32, "ctx_len": 256, "full_batch_size": 3, "mxfp6_matmul": True}
BACKEND_MODULES = ("contract.errors", "contract.parameters", "contract.compile_config", "contract.cpu_support",
                   "contract.qpc", "sessions.protocol", "engine.sampling", "engine.detok", "engine.loop", "models",
                   "sessions.qaic", "build")  # not the torch sessions, nor the server's triton_model


def _bare_venv() -> tuple[Path, str]:
    """(python of a venv holding only tritonclient and numpy, tritonclient's version); made once, kept in the cache."""
    base = python38()
    requirements = SDK_22_12 if base else ["tritonclient[all]", "numpy"]
    base = base or getattr(sys, "_base_executable", sys.executable)
    key = f"py{'38' if python38() else sys.version_info.minor}-{'-'.join(requirements)}".replace("[all]", "")
    root = cache_root() / "venvs" / "".join(c if c.isalnum() or c in ".-=" else "_" for c in key)
    python = root / "bin" / "python"
    if not (root / ".complete").is_file():
        subprocess.run([base, "-m", "venv", "--clear", str(root)], check=True, timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True, timeout=1200)
        (root / ".complete").write_text("\n".join(requirements) + "\n")
    version = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('tritonclient'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return python, version


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    python, version = _bare_venv()
    if python38():
        assert version == "2.29.0"
    return python


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("release-artifacts")
    result = CliRunner().invoke(main, ["artifacts", "export", str(root)])
    assert result.exit_code == 0, result.output
    return root


def bare_generator() -> list[str]:
    """A Python with no third-party packages: no site-packages at all (-S), no user site, no environment."""
    return [python38() or sys.executable, "-E", "-s", "-S"]


def config_of(folder: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def test_the_layout_holds_nothing_that_needs_qaic_console(exported: Path) -> None:
    llm = exported / "llm-models"
    for mode in ("stream", "batch"):
        for kind in ("kv", "causal"):
            assert (llm / "tests" / f"{mode}-response" / f"client_example_{kind}.py").is_file()
    assert (exported / "qaic_backend_python" / "model.py").is_file()
    assert (exported / "qaic_backend_python" / "backend_model" / "triton_model.py").is_file()
    for path in [*llm.rglob("*.py"), *(exported / "qaic_backend_python").rglob("*.py")]:
        text = path.read_text()
        assert "import console" not in text and "from console" not in text and not path.is_symlink(), path
        entry = path.name in ("model.py", "embedding_model.py")  # Triton's entries (a decoder's, an encoder's)
        assert "sys.path" not in text or entry, path  # an entry adds its own folder only


@pytest.mark.parametrize(("mode", "kind", "model"), [
    ("stream", "kv", "smollm2_decoupled"), ("stream", "causal", "smollm2_causal_decoupled"),
    ("batch", "kv", "smollm2_kv"), ("batch", "causal", "smollm2_causal"),
])
def test_sample_clients_in_a_bare_sdk_venv(embedded_server, exported: Path, sdk_python: Path, mode: str, kind: str,
                                           model: str) -> None:
    url = embedded_server.grpc_url if mode == "stream" else embedded_server.http_url
    script = exported / "llm-models" / "tests" / f"{mode}-response" / f"client_example_{kind}.py"
    cmd = [str(sdk_python), str(script), "--prompt", PROMPT, "--url", url, "--model_name", model, "--max_tokens", "8"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd="/", env=env)
    assert done.returncode == 0, done.stderr
    for prompt in PROMPT.split("|"):
        assert any(line.startswith(prompt) and len(line) > len(prompt) + 3 for line in done.stdout.splitlines()), (
            done.stdout)
    assert f"{model}: " in done.stderr


def test_backend_modules_import_on_the_sdk_python(exported: Path, sdk_python: Path) -> None:
    """Module-level code of the backend, evaluated by the venv's Python (3.8 when here) with numpy only."""
    code = "; ".join(f"import backend_model.{m}" for m in BACKEND_MODULES)
    done = subprocess.run([str(sdk_python), "-c", code], cwd=exported / "qaic_backend_python", capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_seeds_generator_commands_as_written(exported: Path, tmp_path: Path) -> None:
    llm = exported / "llm-models"
    qpc = write_qpc(tmp_path / "mistral-qpc")
    backend = f"{exported / 'qaic_backend_python'}/"
    done = subprocess.run([*bare_generator(), "generate_llm_model_repo.py", "--model_name", "mistral_7b",
                           "--aic_binary_dir", str(qpc), "--python_backend_dir", backend],
                          cwd=llm, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    folder = llm / "llm_model_dir" / "mistral_7b"  # beside the script, as the seed says
    config = config_of(folder)
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert (params["use_kv_cache"], params["aic_binary_dir"]) == ("true", str(qpc))
    assert not config.model_transaction_policy.decoupled and json.loads(
        (folder / "compile_config.json").read_text()) == SEED_MISTRAL
    assert (folder / "1" / "backend_model" / "triton_model.py").is_file() and (folder / "1" / "model.py").is_file()
    assert "not qaic-console's backend" not in done.stderr

    custom_qpc = write_qpc(tmp_path / "custom-qpc", kv=False)
    (tmp_path / "compile_config.json").write_text(json.dumps({**SEED_MISTRAL, "ctx_len": 512}))
    done = subprocess.run([*bare_generator(), "generate_llm_model_repo.py", "--model_name", "custom_model",
                           "--aic_binary_dir", str(custom_qpc), "--compile_config_path",
                           str(tmp_path / "compile_config.json"), "--hf_model_name", "--decoupled"],
                          cwd=llm, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "model type: causal" in done.stderr  # read from specializations.json, no runtime needed
    folder = llm / "llm_model_dir" / "custom_model"
    assert config_of(folder).model_transaction_policy.decoupled
    assert json.loads((folder / "compile_config.json").read_text())["ctx_len"] == 512
    assert (folder / "1" / "backend_model").is_dir()  # the default backend: ../qaic_backend_python


def test_a_foreign_backend_folder_is_copied_and_its_interface_named(exported: Path, tmp_path: Path) -> None:
    foreign = tmp_path / "qaic_backend_python"
    foreign.mkdir()
    (foreign / "model.py").write_text("# someone else's backend\n")
    (foreign / "config.pbtxt.tmpl").write_text(
        'name: "$name"\nbackend: "python"\nmax_batch_size: 0\n$decoupled_block\n'
        'input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]\n$parameters\n')
    done = subprocess.run([*bare_generator(), "generate_llm_model_repo.py", "--model_name", "theirs",
                           "--hf_model_name", "org/theirs", "--python_backend_dir", str(foreign)],
                          cwd=exported / "llm-models", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "is not qaic-console's backend" in done.stderr and "its own config.pbtxt.tmpl" in done.stderr
    assert "declares inputs text_input -> outputs text_output" in done.stderr
    folder = exported / "llm-models" / "llm_model_dir" / "theirs"
    assert sorted(p.name for p in (folder / "1").iterdir()) == ["model.py"]
    assert [i.name for i in config_of(folder).input] == ["text_input"]


def test_generate_serve_and_ask_from_the_exported_folder(exported: Path, sdk_python: Path) -> None:
    """The whole seed flow from the export: its generator writes an embedded sample with its backend folder,
    tritonserver serves it, its stream client asks it."""
    from console.server import TritonServer

    llm = exported / "llm-models"
    done = subprocess.run([*bare_generator(), "generate_llm_model_repo.py", "--model_name", "smollm2_decoupled",
                           "--force"], cwd=llm, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    server = TritonServer(llm / "llm_model_dir", models=("smollm2_decoupled",))
    server.start(timeout=SERVER_START)
    try:
        script = llm / "tests" / "stream-response" / "client_example_kv.py"
        asked = subprocess.run([str(sdk_python), str(script), "--prompt", "My name is", "--url", server.grpc_url,
                                "--model_name", "smollm2_decoupled", "--max_tokens", "6"], capture_output=True,
                               text=True, timeout=300)
        assert asked.returncode == 0, asked.stderr
        assert asked.stdout.startswith("My name is") and len(asked.stdout.strip()) > len("My name is")
    finally:
        server.stop()


def test_the_sdk_venv_holds_only_tritonclient_and_numpy(sdk_python: Path) -> None:
    for module in ("console", "repo_gen", "torch", "transformers"):
        done = subprocess.run([str(sdk_python), "-c", f"import {module}"], capture_output=True, text=True, cwd="/",
                              env=outside_env())  # a PYTHONPATH to the checkout is not the venv's
        assert done.returncode != 0 and f"No module named '{module}'" in done.stderr

