"""The eval's parts on their own: path specs, greedy agreement, the histogram, forced scoring against transformers,
golden files and the report (the whole command on real servers is ``tests/e2e/test_eval.py``)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import cli, engine_threads  # noqa: F401 (autouse: the engine's threads)
from tiny_models import tiny_model
from transformers import AutoTokenizer

from backend_model.engine.loop import Engine
from backend_model.models import prepare_embedded
from backend_model.mx_formats import Mx
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.protocol import Dims
from console.eval import golden, greedy, likelihood, report
from console.eval.paths import Answer, EvalPath, InProcess, SpecError, parse
from console.eval.run import CORPUS, PROMPTS, Evaluation, evaluate, read_prompts


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))


@pytest.fixture(scope="module")
def engines(tokenizer) -> dict[str, Engine]:
    """Two tiny random models on the CPU KV session (continuous batching): a reference and a different one."""
    dims = Dims(1, 4, 64, 49152, full_batch_size=2)
    return {name: Engine(CpuKVSession.of(tiny_model("llama", seed), dims, "fp32"), tokenizer, [2])
            for name, seed in (("a", 0), ("b", 1))}


def test_specs() -> None:
    assert parse("cpu:int4") == ("cpu", InProcess("int4"))
    assert parse("twin") == ("twin", InProcess())
    assert parse("cpu:mxfp6") == ("cpu", InProcess("fp32", Mx(mxfp6_matmul=True)))
    assert parse("cpu:bf16+mxint8kv") == ("cpu", InProcess("bf16", Mx(mxint8_kv_cache=True)))
    assert parse("twin:mxfp6+mxint8kv") == ("twin", InProcess(mx=Mx(True, True)))
    assert parse("m@127.0.0.1:8001") == ("served", ("m", "127.0.0.1:8001"))
    assert parse("m@http://h:8080/v1") == ("served", ("m", "http://h:8080/v1"))
    for bad, says in (("cpu:int3", "fp32, bf16, int8, int4"), ("nothing", "names no path"),
                      ("twin:/no/such.onnx", "no graph"), ("twin:/no/such.onnx+mxfp6", "no graph at /no/such.onnx$"),
                      ("cpu:fp32+mxfp4", "'mxfp4' is not an MX format")):
        with pytest.raises(SpecError, match=says):
            parse(bad)


def test_shipped_prompts_and_corpus() -> None:
    prompts = read_prompts(PROMPTS)
    assert len(prompts) >= 30 and any("\n" in p for p in prompts) and not any(p.startswith("#") for p in prompts)
    assert "Four score and seven years ago" in CORPUS.read_text()
    assert "public domain" in (CORPUS.parent / "SOURCES.md").read_text().lower()


def test_greedy_comparison(tokenizer) -> None:
    same = greedy.compare(Answer("a b", [5, 6, 7]), Answer("a b", [5, 6, 7]))
    assert same.exact and same.first is None and same.common == 3
    longer = greedy.compare(Answer("", [5, 6]), Answer("", [5, 6, 9]))
    assert not longer.exact and longer.first == 2 and longer.common == 2
    text = greedy.compare(Answer(" Paris is big"), Answer(" Paris is small"))
    assert (text.unit, text.before, text.reference_next) == ("char", " Paris is ", "big")
    mixed = greedy.compare(Answer(" Paris is big", [1]), Answer(" Paris is small"), tokenizer)
    assert mixed.unit == "retokenized" and mixed.first == 2 and mixed.candidate_next == " small"


def test_histogram_bins() -> None:
    assert greedy.bins(16) == [(0, 0), (1, 1), (2, 3), (4, 7), (8, 15)]
    comparisons = [greedy.Comparison("token", False, f, f, 16, 16) for f in (0, 3, 3, 9, 40)]
    counts = [b["prompts"] for b in greedy.histogram(comparisons, 16)]
    assert counts == [1, 0, 2, 0, 2]  # past the budget counts in the last bin
    summary = greedy.summary([*comparisons, greedy.Comparison("token", True, None, 16, 16, 16)], 16)
    assert summary["exact"] == 1 and summary["median_first_divergence"] == 3


def test_forced_scoring_is_transformers_log_softmax(engines) -> None:
    """The engine's loop fed the continuation gives each token the log-probability of one full forward pass."""
    engine = engines["a"]
    prompts, continuations = [[1, 400, 500], [1, 9, 99, 999, 7]], [[2, 3, 4, 5, 6, 7], [8, 9]]
    scored = likelihood.score(engine, prompts, continuations, keep_rows=True)
    reference = tiny_model("llama", 0)  # the same weights, run whole by transformers
    for prompt, continuation, forced in zip(prompts, continuations, scored):
        ids = torch.tensor([prompt + continuation])
        with torch.inference_mode():
            logp = torch.log_softmax(reference(ids).logits[0].double(), -1)
        want = [-float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(continuation)]
        assert np.allclose(forced.nll, want, atol=1e-4), (forced.nll, want)
        assert len(forced.rows) == len(continuation)


def test_likelihood_and_kl(engines, tokenizer) -> None:
    a, b = (EvalPath(n, f"cpu:{n}", engine=e) for n, e in engines.items())
    prompts = ["My name is", "2 + 2 ="]
    result = evaluate(a, [b], prompts, 6, "embedded", True, CORPUS, lambda n: None, lambda m: None)
    assert result.scores["a"].mean_kl == 0.0 and result.scores["b"].mean_kl > 0
    assert result.scores["b"].mean_nll > result.scores["a"].mean_nll  # a's own greedy answers are likeliest to a
    assert result.scores["a"].tokens == sum(len(x.tokens) for x in result.answers["a"])
    assert result.scores["a"].perplexity > 1000  # random weights over a 49152-token vocabulary
    assert result.summary("b")["units"] == ["token"]


def _evaluation(tokenizer) -> Evaluation:
    answers = [Answer(t, tokenizer(t, add_special_tokens=False)["input_ids"]) for t in (" one <b>two", " three", " x")]
    reference = EvalPath("ref", "r", answers=[answers[0], answers[2]])
    candidate = EvalPath("cand", "c", answers=[answers[1], answers[2]])
    return evaluate(reference, [candidate], ["p1", "p2"], 8, "embedded", False, None, lambda n: None,
                    lambda m: None)


def test_report_files(tmp_path: Path, tokenizer) -> None:
    result = _evaluation(tokenizer)
    written = report.write(result, tmp_path)
    assert [p.name for p in written] == ["eval.json", "eval_summary.csv", "eval_prompts.csv", "eval.html"]
    page = (tmp_path / "eval.html").read_text()
    assert "<b>" not in page and "&lt;b&gt;" in page  # model text shown as text
    assert 'class="histogram"' in page and "1/2 answers exact" in page
    rows = (tmp_path / "eval_prompts.csv").read_text().splitlines()
    assert rows[1].startswith("cand,0,token,False,0,0,")
    assert "1/2 (50%)" in report.table(result)


def test_golden_round_trip(tmp_path: Path, tokenizer) -> None:
    file = tmp_path / "golden.json"
    golden.write(_evaluation(tokenizer), file)
    recorded = golden.read(file)
    assert recorded.prompts == ["p1", "p2"] and recorded.max_tokens == 8
    assert recorded.path.answers[0].text == " one <b>two" and recorded.path.answers[0].tokens
    (tmp_path / "bad.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(golden.GoldenError, match="not a qaic-console eval record"):
        golden.read(tmp_path / "bad.json")
    (tmp_path / "short.json").write_text(json.dumps({**json.loads(file.read_text()), "prompts": ["p1"]}))
    with pytest.raises(golden.GoldenError, match="2 answers for 1 prompts"):
        golden.read(tmp_path / "short.json")


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    result = cli("eval", "--reference", "cpu:int3", "--candidate", "cpu:fp32", "-q")
    assert result.exit_code == 2 and result.output.startswith("error: 'cpu:int3'") and result.output.count("\n") == 1
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = cli("eval", "--reference", f"m@127.0.0.1:{port}", "--candidate", "cpu:fp32", "-q")
    assert result.exit_code == 2 and result.output == f"error: cannot reach tritonserver at 127.0.0.1:{port} (HTTP): " \
        "connection refused\n"  # before any engine loads
    (tmp_path / "g.json").write_text("{}")
    result = cli("eval", "compare", str(tmp_path / "g.json"), "--candidate", "cpu:fp32", "-q")
    assert result.exit_code == 2 and "not a qaic-console eval record" in result.output


def test_continuations_go_as_the_continuation_input() -> None:
    from console.clients import ClientError, GenerationParams, ModelInfo, Tensor, interface_of

    declared = (Tensor("prompt", "BYTES"), Tensor("logprobs", "INT64", (1,), True),
                Tensor("continuation", "BYTES", (-1,), True))
    outputs = (Tensor("text_output", "BYTES"),)
    params = GenerationParams(logprobs=0, continuations=([9, 42], " Paris"))

    def model(*inputs: Tensor) -> ModelInfo:
        return ModelInfo("m", True, True, inputs=inputs, outputs=outputs)

    sent = {w.name: w for w in interface_of(model(*declared)).request(["a", "b"], params, True)}
    assert sent["continuation"].values == ("[9, 42]", '" Paris"') and sent["continuation"].many
    assert sent["logprobs"].values == (0,)
    with pytest.raises(ClientError, match="no continuation input"):
        interface_of(model(*declared[:2])).request(["a", "b"], params, True)
    with pytest.raises(ClientError, match="2 continuations for 1 prompts"):
        interface_of(model(*declared)).request(["a"], params, True)
    assert params.replace(max_tokens=3).continuations == params.continuations


def test_twin_paths_share_one_export_and_carry_their_mx_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seams: the export and the engines are faked; every twin path without a graph runs the one export."""
    from console.eval import paths

    exports, built = [], []
    monkeypatch.setattr(paths, "_export", lambda source, scratch, progress: exports.append(source) or "g.onnx")
    monkeypatch.setattr(paths, "in_process", lambda precision, source, progress, graph=None, mx=None, images=False:
                        built.append((precision, graph, mx)) or object())
    with paths.opened(["twin", "twin:mxfp6+mxint8kv", "cpu:bf16+mxfp6"], "embedded", lambda m: None) as opened:
        assert [p.name for p in opened] == ["twin", "twin-mxfp6+mxint8kv", "cpu-bf16+mxfp6"]
    assert exports == ["embedded"]
    assert built == [("fp32", "g.onnx", Mx()), ("fp32", "g.onnx", Mx(True, True)), ("bf16", None, Mx(True))]
