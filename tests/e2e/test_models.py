"""Model sources: the embedded model is prepared once (cached, keyed), hub names fail clearly offline."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from backend_model import models
from backend_model.models import ModelSourceError, load_pretrained, prepare_embedded
from console.server import ServerError, TritonServer
from repo_gen.writer import ModelSpec, write_model


def test_embedded_preparation_is_cached_and_keyed(tmp_path, monkeypatch):
    monkeypatch.setenv("QAIC_CONSOLE_CACHE", str(tmp_path))
    said: list[str] = []
    folder = prepare_embedded(progress=said.append)
    assert said and "preparing the embedded model" in said[0]
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    again: list[str] = []
    start = time.perf_counter()
    assert prepare_embedded(progress=again.append) == folder
    assert again == [] and time.perf_counter() - start < 1.0  # no second preparation
    model, tokenizer = load_pretrained("embedded", progress=again.append)
    assert model.config.num_hidden_layers == 30 and tokenizer.chat_template
    assert again == []
    gguf = models.embedded_gguf()
    assert models._embedded_dir(gguf, "bf16") != folder  # another stored precision, another folder
    copy = tmp_path / "another_venv" / gguf.name
    copy.parent.mkdir()
    shutil.copyfile(gguf, copy)  # the same package in another virtual environment: another path, another mtime
    assert models._embedded_dir(copy, "fp32") == folder  # finds what the first prepared
    with open(copy, "r+b") as f:  # a changed source re-prepares
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    models._content_hash.cache_clear()  # what a new process sees, whatever the clock's grain between the writes
    assert models._embedded_dir(copy, "fp32") != folder


def test_hub_name_offline_fails_fast_with_a_clear_message(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(ModelSourceError, match="not in the local Hugging Face cache.*offline"):
        load_pretrained("someorg/some-model")
    assert time.perf_counter() - start < 15


def test_local_folder_errors(tmp_path):
    with pytest.raises(ModelSourceError, match="does not exist"):
        load_pretrained(str(tmp_path / "missing"))
    with pytest.raises(ModelSourceError, match="no config.json"):
        load_pretrained(str(tmp_path))


@pytest.mark.server
def test_a_model_that_cannot_be_fetched_fails_to_load_with_the_reason(tmp_path: Path):
    write_model(ModelSpec("offline_model", hf_model_name="someorg/not-cached", engine="cpu"), tmp_path)
    server = TritonServer(tmp_path, env={"HF_HUB_OFFLINE": "1"})
    with pytest.raises(ServerError) as info:
        server.start(timeout=120)
    assert "offline_model" in str(info.value)
    assert "not in the local Hugging Face cache" in info.value.details()
    assert not server.running
