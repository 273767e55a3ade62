"""Fixtures of the card-twin tests: the embedded model, its two exported graphs, the HF reference (kept between
runs in the console's cache, under a key of everything that decides it).

The graphs are exported once per session (regular and continuous batching); their axes are
dynamic, so one graph serves every compile: ``compiled`` links it into a folder beside the
specializations.json of the dimensions a test wants, as a QPC of those dimensions would be.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import computed_key, front_before, made_once
from twin_data import CTX_LEN, PROMPTS, TOKENS

from backend_model.contract import specializations


@pytest.fixture(scope="session")
def smol():
    from backend_model.models import load_pretrained

    return load_pretrained("embedded", progress=lambda message: None)


@pytest.fixture(scope="session")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"regular": folder, "continuous": folder}: the regular one through the CLI, the other through the API;
    exported once per run (``made_once``: pytest-xdist's workers share them; removed at the run's end)."""
    root = made_once(tmp_path_factory, "graphs", export_graphs)
    return {"regular": root / "regular", "continuous": root / "continuous"}


def export_graphs(root: Path) -> None:
    from click.testing import CliRunner

    from console.cli import main
    from repo_gen.onnx_export import export

    result = CliRunner().invoke(main, ["onnx", "export", "--ctx-len", str(CTX_LEN), "--prefill-seq-len", "8",
                                       "--batch-size", "2", "-o", str(root / "regular")])
    assert result.exit_code == 0, result.output
    export("embedded", root / "continuous", ctx_len=CTX_LEN, prefill_seq_len=4, full_batch_size=4,
           progress=lambda message: None)


Compile = Callable[..., Path]


@pytest.fixture(scope="session")
def compiled(graphs) -> Compile:
    """``compiled(batch_size=, prefill_seq_len=, full_batch_size=, flat=False)``: a folder holding the graph
    (a hard link) and the specializations.json of those dimensions (``flat``: the older form)."""
    made: dict[tuple, Path] = {}

    def make(batch_size: int = 1, prefill_seq_len: int = 8, full_batch_size: int = 0, flat: bool = False) -> Path:
        key = (batch_size, prefill_seq_len, full_batch_size, flat)
        if key not in made:
            # beside the graphs, removed with them; a name of its own (the workers share the graphs' folder)
            folder = Path(tempfile.mkdtemp(prefix=f"compiled-{len(made)}-", dir=graphs["regular"].parent))
            source = graphs["continuous" if full_batch_size else "regular"] / "model.onnx"
            os.link(source, folder / "model.onnx")
            entries = specializations.build(batch_size, prefill_seq_len, CTX_LEN, full_batch_size)
            if flat:
                document = {"specializations": [e["symbols"] for e in entries]}
                (folder / specializations.FILE).write_text(json.dumps(document))
            else:
                specializations.write(folder, entries)
            made[key] = folder
        return made[key]

    return make


def reference_key() -> str:
    """What decides the reference tokens: the embedded weights' folder (named by their content), the prompts, the
    code that decodes (and the machine: ``computed_key``)."""
    from backend_model.models import prepare_embedded
    from console.twin import agreement

    weights = prepare_embedded(progress=lambda message: None).name
    return computed_key(weights, json.dumps([PROMPTS, TOKENS]), inspect.getsource(agreement.hf_greedy))


@pytest.fixture(scope="session")
def reference(smol, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[int]]:
    """``reference(prompt)``: transformers fp32 greedy, full recompute, ``TOKENS`` tokens. The twin tests' prompts
    are computed once (3 s of CPU each) and kept in the console's cache under ``reference_key``, so a later run on
    the same weights, code and CPU reads them; any other prompt is computed once a worker."""
    from backend_model.models import cache_root
    from console.twin.agreement import hf_greedy

    model, tokenizer = smol
    kept = cache_root() / "test-references" / f"{reference_key()}.json"

    def make(folder: Path) -> None:
        folder.mkdir()
        if not kept.is_file():
            tokens = {prompt: hf_greedy(model, tokenizer, prompt, TOKENS) for prompt in PROMPTS}
            kept.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=kept.parent, suffix=".part", delete=False) as part:
                part.write(json.dumps(tokens))
            os.replace(part.name, kept)
        shutil.copyfile(kept, folder / "tokens.json")

    cache: dict[str, list[int]] = json.loads((made_once(tmp_path_factory, "references", make) / "tokens.json")
                                             .read_text())

    def tokens(prompt: str) -> list[int]:
        if prompt not in cache:
            cache[prompt] = hf_greedy(model, tokenizer, prompt, TOKENS)
        return cache[prompt]

    return tokens


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llm_interfaces"


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory: pytest.TempPathFactory):
    """A tritonserver serving every stand-in (one shared model.py, one config each)."""
    from console.server import TritonServer

    repo = tmp_path_factory.mktemp("llm_interfaces")
    for config in FIXTURES.glob("*.pbtxt"):
        (repo / config.stem / "1").mkdir(parents=True)
        shutil.copy2(config, repo / config.stem / "config.pbtxt")
        shutil.copy2(FIXTURES / "model.py", repo / config.stem / "1" / "model.py")
    server = TritonServer(repo)
    server.start(timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def front(embedded_server):
    """The OpenAI-compatible front (in this process, on a free loopback port, no key) before ``embedded_server``."""
    with front_before(embedded_server) as started:
        yield started
