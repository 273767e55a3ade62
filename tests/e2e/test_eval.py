"""``qaic-console eval`` on a real tritonserver serving the embedded samples at fp32 and int4.

The served fp32 sample is the reference. The CPU engine is batch-invariant, so the same precision in-process must
agree on every token (the bundled backend gives its token ids with its logprobs) and score the same likelihood (the
server scores through its continuation input), and the served int4 sample must answer exactly as int4 does
in-process; the int4 and int8 candidates differ from fp32 on these prompts. A golden run of the
fp32 sample passes ``eval compare`` against itself and fails against int4.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from helpers import LLAMA_MODEL, cli, greedy_answer

from console.server import TritonServer

pytestmark = [pytest.mark.server]
FP32, INT4 = "smollm2_decoupled_fp32", "smollm2_decoupled"
PROMPTS = ["My name is", "2 + 2 =", "def fibonacci(n):", "Question: What is the capital of Japan?\\nAnswer:"]
TOKENS = "12"
CORPUS = "It is for us the living, rather, to be dedicated here to the unfinished work.\n"  # perplexity, briefly


@pytest.fixture(scope="module")
def served(embedded_server: TritonServer) -> TritonServer:
    """The session's tritonserver: the embedded samples at fp32 and int4 among them."""
    return embedded_server


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("eval_prompts") / "prompts.txt"
    path.write_text("# four kinds\n" + "\n".join(PROMPTS) + "\n", encoding="utf-8")
    return path


def test_served_against_served_and_in_process(served, prompt_file: Path, tmp_path: Path) -> None:
    at, corpus = served.grpc_url, tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    result = cli("eval", "--reference", f"{FP32}@{at}", "--candidate", f"{INT4}@{at}", "--candidate", "cpu:int8",
                 "--candidate", "cpu:fp32", "--candidate", "cpu:int4", "--prompts", str(prompt_file),
                 "--max-tokens", TOKENS, "--corpus", str(corpus), "-o", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].split()[:3] == ["path", "kind", "exact"]
    document = json.loads((tmp_path / "eval.json").read_text())
    rows = {row["path"]: row for row in document["summary"]}
    assert rows["cpu-fp32"]["exact"] == len(PROMPTS), rows["cpu-fp32"]  # batch-invariant: served == in-process
    assert rows["cpu-fp32"]["units"] == ["token"]  # the bundled backend gives its token ids (logprobs)
    assert rows[f"{INT4}@{at}"]["exact"] < len(PROMPTS) and rows["cpu-int8"]["exact"] < len(PROMPTS)
    answers = document["paths"]
    served_int4 = [a["text"] for a in answers[f"{INT4}@{at}"]["answers"]]
    assert served_int4 == [a["text"] for a in answers["cpu-int4"]["answers"]]
    # every path scores the served reference's answers: in-process, or by the server (continuation + logprobs), the
    # same figures for the same precision; KL needs the reference's distributions (in-process)
    reference = f"{FP32}@{at}"
    assert rows["cpu-int8"]["mean_nll"] > rows["cpu-fp32"]["mean_nll"] > 0
    assert rows["cpu-fp32"]["mean_nll"] == pytest.approx(rows[reference]["mean_nll"], abs=1e-4)
    assert rows["cpu-int4"]["mean_nll"] == pytest.approx(rows[f"{INT4}@{at}"]["mean_nll"], abs=1e-4)
    assert rows["cpu-int4"]["mean_nll"] != pytest.approx(rows["cpu-fp32"]["mean_nll"], abs=1e-3)
    assert rows["cpu-int8"]["perplexity"] > rows["cpu-fp32"]["perplexity"] > 1 and rows["cpu-int8"]["mean_kl"] is None
    assert any("KL: not measured" in n for n in document["notes"])
    page = (tmp_path / "eval.html").read_text()
    first = next(c for c in answers[f"{INT4}@{at}"]["comparisons"] if not c["exact"])
    assert "first divergence" in page and "<script" not in page
    assert html.escape(repr(first["candidate_next"])) in page
    summary = (tmp_path / "eval_summary.csv").read_text().splitlines()
    assert summary[0].startswith("path,spec,kind,exact") and len(summary) == 6


def test_record_then_compare_is_a_gate(served, prompt_file: Path, tmp_path: Path) -> None:
    at = f"{served.http_url},{served.grpc_url}"  # both endpoints
    golden = tmp_path / "golden.json"
    recorded = cli("eval", "record", "--path", f"{FP32}@{at}", "--prompts", str(prompt_file), "--max-tokens", TOKENS,
                   "-o", str(golden), "-q")  # the server scores its own answers: the recorded NLL
    assert recorded.exit_code == 0, recorded.output
    assert json.loads(golden.read_text())["summary"][0]["mean_nll"] > 0
    same = cli("eval", "compare", str(golden), "--candidate", f"{FP32}@{at}", "--candidate", "cpu:fp32", "-q",
               "--no-likelihood")
    assert same.exit_code == 0, same.output
    assert same.stdout.count("\npass ") == 2 and "FAIL" not in same.stdout
    other = cli("eval", "compare", str(golden), "--candidate", f"{INT4}@{at}", "-q", "--no-likelihood")
    assert other.exit_code == 1, other.output
    assert f"FAIL {INT4}@{at}: exact" in other.stdout
    loose = cli("eval", "compare", str(golden), "--candidate", f"{INT4}@{at}", "-q", "--no-likelihood",
                "--min-exact", "0")
    assert loose.exit_code == 0, loose.output
    likely = cli("eval", "compare", str(golden), "--candidate", f"{FP32}@{at}", "-q", "--max-nll-increase", "1e-4")
    assert likely.exit_code == 0 and "NLL" in likely.stdout, likely.output
    unlikely = cli("eval", "compare", str(golden), "--candidate", f"{INT4}@{at}", "-q", "--min-exact", "0",
                   "--max-nll-increase", "0")
    assert unlikely.exit_code == 1 and f"FAIL {INT4}@{at}: exact" in unlikely.stdout, unlikely.output


def test_an_openai_compatible_server_is_a_path(llama_server, tmp_path: Path) -> None:
    """llama.cpp's server on the embedded GGUF, reached through its adapter: its greedy texts are the ones the
    ``openai`` client gets itself, compared with the in-process int4 engine on the same 4-bit weights."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS[:2]) + "\n", encoding="utf-8")
    spec = f"{LLAMA_MODEL}@{llama_server.base_url}"
    result = cli("eval", "--reference", spec, "--candidate", "cpu:int4", "--prompts", str(prompts),
                 "--max-tokens", TOKENS, "-o", str(tmp_path / "report"), "-q")
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "report" / "eval.json").read_text())
    texts = [a["text"] for a in document["paths"][spec]["answers"]]
    assert texts == [greedy_answer(llama_server.base_url, LLAMA_MODEL, int(TOKENS), p) for p in PROMPTS[:2]]
    assert document["paths"][spec]["kind"] == "served"
    assert [c["unit"] for c in document["paths"]["cpu-int4"]["comparisons"]] == ["retokenized"] * 2
