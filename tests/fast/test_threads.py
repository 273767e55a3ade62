"""cpu_threads 0 = automatic: all CPUs but one, shared by the CPU models the server loads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backend_model.build import BackendSettings, build_engine
from backend_model.sessions import threads
from repo_gen.samples import EMBEDDED_EMBEDDING, EMBEDDED_SAMPLES, SAMPLES, write_samples
from repo_gen.writer import ModelSpec, write_model


def test_auto_threads_leave_one_cpu_and_share_the_rest() -> None:
    assert [threads.auto_threads(2, n) for n in (1, 2, 5)] == [1, 1, 1]
    assert [threads.auto_threads(8, n) for n in (1, 2, 3, 7, 20)] == [7, 3, 2, 1, 1]
    assert threads.auto_threads(1, 1) == 1 and threads.auto_threads(16, 0) == 15
    assert threads.choose_threads(3, 4) == (3, "set")
    count, how = threads.choose_threads(0, 2)
    cpus = len(os.sched_getaffinity(0))
    assert count == threads.auto_threads(cpus, 2) and how == f"auto: {cpus} cpus, 2 cpu models"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The embedded samples, a card-only model and a CPU model with two instances."""
    write_samples(EMBEDDED_SAMPLES, tmp_path)
    write_model(ModelSpec("card", engine="qaic", hf_model_name="org/m"), tmp_path)
    twice = write_model(ModelSpec("twice", engine="cpu"), tmp_path)
    config = twice / "config.pbtxt"
    config.write_text(config.read_text().replace("count: 1", "count: 2"))
    (tmp_path / "notes").mkdir()  # not a model
    return tmp_path


def test_the_server_command_line_says_which_models_load(repo: Path) -> None:
    every = sorted(p.name for p in threads.loaded_models(repo, []))
    assert every == sorted([*EMBEDDED_SAMPLES, "card", "twice"])
    explicit = ["tritonserver", f"--model-repository={repo}", "--model-control-mode=explicit",
                "--load-model=smollm2_kv", "--load-model", "twice"]
    assert [p.name for p in threads.loaded_models(repo, explicit)] == ["smollm2_kv", "twice"]
    assert len(threads.loaded_models(repo, [*explicit[:3], "--load-model=*"])) == len(every)
    assert len(threads.loaded_models(repo, [*explicit[:2], "--load-model=smollm2_kv"])) == len(every)  # mode none


def test_cpu_models_count_instances_and_skip_the_card(repo: Path) -> None:
    assert threads.cpu_instances(repo / "twice") == 2 and threads.cpu_instances(repo / "card") == 0
    assert threads.cpu_instances(repo / "smollm2_kv") == 1
    assert threads.cpu_instances(repo / "smollm2_kv", card=True) == 0  # engine auto takes the card
    assert threads.cpu_instances(repo / "notes") == 0
    (encoder,) = write_samples(EMBEDDED_EMBEDDING, repo / "more")
    assert threads.cpu_instances(encoder) == 1 and threads.cpu_instances(encoder, card=True) == 0
    embedded = len(EMBEDDED_SAMPLES)
    # outside a tritonserver the parent's command line names no models: every folder counts
    assert threads.served_cpu_models(repo / "smollm2_kv") == embedded + 2
    assert threads.served_cpu_models(repo / "smollm2_kv", card=True) == 2


def test_the_command_line_of_a_process_is_read(tmp_path: Path) -> None:
    assert threads.server_args(os.getpid())[:1] and threads.server_args(2**30) == []


def test_an_engine_uses_and_reports_the_threads_it_picked() -> None:
    import torch

    from backend_model.contract import compile_config

    before = torch.get_num_threads()
    settings = BackendSettings(compile=compile_config.validate(SAMPLES["smollm2_kv"].compile),
                               cpu_models=3)
    try:
        _, description = build_engine(settings, progress=lambda m: None)
        expected, how = threads.choose_threads(0, 3)
        assert f"threads={expected} ({how})" in description and torch.get_num_threads() == expected
    finally:
        torch.set_num_threads(before)
