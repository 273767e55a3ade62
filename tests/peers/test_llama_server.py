"""``make bench``'s CPU peer for real: llama.cpp's ``llama-server -np 8 -cb`` (built by
``scripts/setup-llama-server.sh``, which ``make test-peers`` runs, not ``make test``: the build takes many minutes)
beside the served demo precision, a short round of each."""

from __future__ import annotations

import pytest

from console.bench import llama_cpp
from console.bench import report as perf


@pytest.mark.server
def test_the_report_puts_the_demo_precision_beside_llama_server() -> None:
    if llama_cpp.peer_binary()[0] is None:
        pytest.fail(f"no llama-server: {llama_cpp.peer_binary()[1]} (make test-peers runs the script)")
    report = perf.Report()
    llama_cpp.llama_server_section(report, perf.ReportOptions(tokens=8, repeats=1), progress=lambda m: None)
    said = report.context["llama_server"]
    assert said.startswith("llama.cpp's llama-server (version: ") and " -np 8 -cb " in said, said
    for n in perf.STREAMS:
        assert report.context[f"demo_{n}_tokens_per_s"] > 0 and report.context[f"llama_server_{n}_tokens_per_s"] > 0
        assert report.ratios[f"demo_{n}_over_llama_server"] > 0
    assert report.context["llama_server_tokens_per_stream"] == {"served": 8, "llama_server": 8}  # none ended sooner
    assert min(report.context["llama_server_cores_busy"].values()) > 0  # each side's processes, found by group
