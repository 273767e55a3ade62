"""What the card-twin tests share: the bench report's first 8 prompts, tokens per prompt, the compiled
ctx_len of the embedded model's graphs, and the real QEfficient exports in the shared fixtures."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from console.bench.engine import BENCH_PROMPTS
from console.clients import Failure, Reply

PROMPTS = BENCH_PROMPTS[:8]
TOKENS = 32
CTX_LEN = 64
VOCAB = 49152
ROOT = Path(__file__).resolve().parents[1]
QEFF_FIXTURES = "QAIC_QEFF_FIXTURES"
QEFF_GRAPH = "LlamaForCausalLM.onnx"


@dataclass(frozen=True)
class QeffFixtures:
    """``tiny-llama``: its HF folder, the regular and continuous-batching exports, the HF greedy reference."""

    root: Path

    @property
    def hf(self) -> Path:
        return self.root / "hf"

    def graph(self, mode: str) -> Path:
        """The export folder of ``mode`` ('regular' or 'cb') as the fixtures hold it (with specializations.json)."""
        return self.root / mode

    @property
    def reference(self) -> dict[str, list[int]]:
        """{prompt: transformers' 24 greedy tokens}."""
        return json.loads((self.root / "hf_greedy.json").read_text())


def qeff_fixtures(candidates: list[str | Path | None] | None = None) -> QeffFixtures:
    """The real QEfficient exports: ``$QAIC_QEFF_FIXTURES``, else ``<repo>/../shared/fixtures/qeff``, else
    ``/work/shared/fixtures/qeff`` (CI's fresh clone sits in a temporary folder). Fails, never skips."""
    if candidates is None:
        candidates = [os.environ.get(QEFF_FIXTURES), ROOT.parent / "shared/fixtures/qeff", "/work/shared/fixtures/qeff"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "tiny-llama" / "hf_greedy.json").is_file():
            return QeffFixtures(Path(candidate) / "tiny-llama")
    tried = ", ".join(str(c) for c in candidates if c)
    pytest.fail(f"QEfficient export fixtures not found (tried {tried}): set {QEFF_FIXTURES} to the folder "
                "holding tiny-llama/", pytrace=False)


def generate_model(repo: Path, name: str, config: dict, *flags: str) -> None:
    """``generate-llm-model-repo --model_name NAME`` with ``config`` as its compile config, into ``repo``."""
    from click.testing import CliRunner

    from console.commands.repo import gen

    path = repo.parent / f"{name}.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(gen, ["--model_name", name, "--compile_config_path", str(path), "-o", str(repo),
                                      *flags])
    assert result.exit_code == 0, result.output


def events(call: Iterable) -> list:
    """Every event of a client call, none a failure."""
    found = list(call)
    assert not [e for e in found if isinstance(e, Failure)], found
    return found


def texts(found: list) -> list[str]:
    """The replies' texts, in prompt order."""
    return [e.text for e in sorted((e for e in found if isinstance(e, Reply)), key=lambda e: e.index)]
