"""Served speed pieces in a real tritonserver: the automatic thread count and the zero-cost model.

One server loads two of a repository's three CPU models: the int4 stream sample and the bench's
zero-cost model (the bundled glue and engine loop with no compute); a send that names no model goes to what it serves.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import SERVER_START, wait_until

from backend_model.sessions.threads import auto_threads
from console.bench.capacity import MODEL, client_capacity, write_zero_cost_repo
from console.server import TritonServer
from repo_gen.samples import write_samples

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    repo: Path = tmp_path_factory.mktemp("speed_repo")
    write_samples(("smollm2_decoupled", "smollm2_decoupled_fp32"), repo)
    write_zero_cost_repo(repo)
    server = TritonServer(repo, models=("smollm2_decoupled", MODEL))
    server.start(timeout=SERVER_START)
    yield server
    server.stop()


def test_a_model_reports_the_threads_it_picked_for_the_models_loaded(server) -> None:
    cpus = len(os.sched_getaffinity(0))
    line = next(m for m in server.log_tail(500) if "smollm2_decoupled: engine=cpu" in m)
    assert "precision=int4" in line
    assert f"threads={auto_threads(cpus, 2)} (auto: {cpus} cpus, 2 cpu models)" in line  # fp32 sample not loaded


def test_sixteen_zero_cost_streams_get_every_token_in_order(server) -> None:
    result = client_capacity(server.grpc_url, streams=16, tokens=500)
    assert result.complete, result.errors
    assert result.received == result.expected == 8000
    # the backend logs a request after its last response: the log can trail the client by a moment
    def logged() -> int:
        log = "\n".join(server.log_tail(500))
        return log.count("zero_cost_stream: request") if "finish=length" in log else 0

    wait_until(lambda: logged() >= 16, 30, "the server log to hold the 16 requests", lambda: f"it held {logged()}")


def test_models_names_a_repository_model_that_is_not_loaded(server) -> None:
    from click.testing import CliRunner

    from console.cli import main

    result = CliRunner().invoke(main, ["models", "--url", server.http_url])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[2:] if line.strip()}
    assert "not loaded" in rows["smollm2_decoupled_fp32"] and "READY" in rows["smollm2_decoupled"]


def test_a_send_without_model_goes_to_a_served_model_that_answers_its_mode(server) -> None:
    """Only smollm2_decoupled of the samples is loaded: batch and generate go to it (a decoupled model with a
    stream switch answers once too), not to smollm2_kv, which the repository has but the server does not serve."""
    from click.testing import CliRunner

    from console.cli import main
    from console.core.adapters.triton import TritonAdapter

    adapter = TritonAdapter.at(server.http_url)
    assert {mode: adapter.default_model(mode) for mode in ("stream", "batch", "generate")} == dict.fromkeys(
        ("stream", "batch", "generate"), "smollm2_decoupled")
    result = CliRunner().invoke(main, ["--prompt", "Hi", "--url", server.http_url, "--mode", "batch",
                                       "--max-tokens", "4", "--raw", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert row["model"] == "smollm2_decoupled" and row["output_tokens"] == 4
