"""lm-evaluation-harness 0.4.13 against the front, as a user checks a served model's accuracy: ``--model
local-completions`` on the embedded fp32 sample behind a real tritonserver, and ``--model hf`` on the same weights (the
embedded model's Hugging Face folder), on a multiple-choice task and a ``generate_until`` task written here as JSON
lines (no hub).

lm-eval runs from its own venv (``scripts/setup-lm-eval.sh``: its pins fight the project's; pip's cache makes a second
build quick). Each choice's log-likelihood through the front is compared with the in-process CPU engine's (fp32, the
sample's dimensions) for the tokens lm-eval sent, and the accuracies with the ``hf`` model's, whose run is kept
between runs (``hf_scores``).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import computed_key, kept

from backend_model.models import prepare_embedded
from console.clients import GenerationParams, stream

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
FP32 = "smollm2_decoupled_fp32"
CTX_LEN = 512  # the sample's compile
TOLERANCE = 1e-4
QUESTIONS = [  # (question, choices, answer): lm-eval puts its target delimiter, a space, before each choice
    ("The capital of France is", ["Paris", "London", "Berlin", "Madrid"], 0),
    ("The capital of Italy is", ["Vienna", "Rome", "Lisbon", "Oslo"], 1),
    ("Water freezes at zero degrees", ["Fahrenheit", "Kelvin", "Celsius", "Rankine"], 2),
    ("The largest planet in the solar system is", ["Mars", "Venus", "Mercury", "Jupiter"], 3),
    ("A week has seven", ["days", "months", "years", "hours"], 0),
    ("The opposite of hot is", ["loud", "cold", "tall", "green"], 1),
    ("Two plus two equals", ["five", "three", "four", "six"], 2),
    ("The sun rises in the", ["north", "south", "west", "east"], 3),
    ("Cats like to drink", ["milk", "petrol", "ink", "glue"], 0),
    ("The color of the sky on a clear day is", ["red", "blue", "black", "brown"], 1),
]
GENERATE = ["Once upon a time", "The best way to learn is", "My favourite food is"]
MC_TASK = """task: qaic_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
"""
GEN_TASK = """task: qaic_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: ""
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 12
  do_sample: false
metric_list:
  - metric: exact_match
"""


@pytest.fixture(scope="module")
def lm_eval() -> Path:
    """The lm-eval venv's command (built once by scripts/setup-lm-eval.sh)."""
    done = subprocess.run([str(ROOT / "scripts" / "setup-lm-eval.sh")], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(done.stdout.strip().splitlines()[-1]) / "bin" / "lm_eval"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lm_eval_tasks")
    with open(folder / "mc.jsonl", "w") as out:
        for question, choices, answer in QUESTIONS:
            out.write(json.dumps({"question": question, "choices": choices, "answer": answer}) + "\n")
    with open(folder / "gen.jsonl", "w") as out:
        for prompt in GENERATE:
            out.write(json.dumps({"prompt": prompt}) + "\n")
    (folder / "qaic_mc.yaml").write_text(MC_TASK.format(data=folder / "mc.jsonl"))
    (folder / "qaic_gen.yaml").write_text(GEN_TASK.format(data=folder / "gen.jsonl"))
    return folder


def start(lm_eval: Path, tasks: Path, out: Path, model: str, model_args: str, names: str) -> subprocess.Popen:
    """One ``lm_eval run``, started (its output into ``out``)."""
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(out / "datasets"), "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": ""}
    out.mkdir(parents=True)
    return subprocess.Popen([str(lm_eval), "run", "--model", model, "--model_args", model_args, "--tasks", names,
                             "--include_path", str(tasks), "--output_path", str(out), "--log_samples", "--device",
                             "cpu", "--batch_size", "4"], stdout=subprocess.DEVNULL,
                            stderr=open(out / "stderr.txt", "w"), env=env)  # noqa: SIM115 - closed with the process


def finished(run: subprocess.Popen, out: Path, names: str) -> dict:
    """A started run's results and logged samples by task, once it ended."""
    assert run.wait(timeout=900) == 0, (out / "stderr.txt").read_text()[-3000:]
    return read(out, names)


def read(out: Path, names: str) -> dict:
    """An ended run's results and logged samples by task."""
    results = json.loads(max(out.rglob("results_*.json")).read_text())
    samples = {}
    for task in names.split(","):
        lines = max(out.rglob(f"samples_{task}_*.jsonl")).read_text().splitlines()
        samples[task] = sorted((json.loads(line) for line in lines), key=lambda s: s["doc_id"])
    return {"results": results["results"], "samples": samples}


def hf_scores(lm_eval: Path, tasks: Path, folder: Path) -> dict:
    """lm-eval's own ``hf`` model on the embedded weights, on the multiple-choice task: run once, beside the served
    run, and kept in the console's cache under a key of the weights, the task, the command and lm-eval's venv
    (``kept``), so a later run on the same ones reads what it scored."""
    venv = subprocess.run([str(lm_eval.parent / "python"), "-c", "import json, torch; from importlib.metadata import "
                           "version; print(json.dumps([torch.get_num_threads(), "
                           "[version(d) for d in ('lm-eval', 'torch', 'transformers', 'datasets')]]))"],
                          capture_output=True, text=True, check=True).stdout
    threads, versions = json.loads(venv)
    model_args = f"pretrained={folder},dtype=float32"
    key = computed_key(model_args, MC_TASK, json.dumps(QUESTIONS), inspect.getsource(start), json.dumps(versions),
                       threads=threads)  # the lm-eval process's threads, not this one's

    def make(out: Path) -> None:
        run = start(lm_eval, tasks, out / "hf", "hf", model_args, "qaic_mc")
        try:
            finished(run, out / "hf", "qaic_mc")
        finally:
            run.kill()

    return read(kept("lm-eval-hf", key, make) / "hf", "qaic_mc")


def loglikelihoods(samples: list[dict]) -> list[list[float]]:
    """Each document's choices' log-likelihoods, as lm-eval logged them."""
    return [[float(r[0][0]) for r in s["resps"]] for s in samples]


def engine_loglikelihoods(tokenizer, pairs: list[tuple[str, str]]) -> list[float]:
    """Each (context, continuation)'s log-likelihood by the in-process CPU engine, fp32, on the tokens lm-eval sends
    (its split: the context's trailing spaces go with the continuation, each part tokenised without special tokens)."""
    from console.eval.likelihood import score
    from console.eval.paths import in_process

    engine = in_process("fp32", "embedded", lambda message: None)
    contexts, continuations = [], []
    for context, continuation in pairs:
        spaces = len(context) - len(context.rstrip())
        context, continuation = context[:len(context) - spaces], context[len(context) - spaces:] + continuation
        whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
        head = tokenizer(context, add_special_tokens=False)["input_ids"]
        contexts.append(head)
        continuations.append(whole[len(head):])
    return [-sum(f.nll) for f in score(engine, contexts, continuations)]


@pytest.mark.timeout(1800)  # two lm_eval processes (torch, transformers, datasets) on a shared machine
def test_lm_eval_local_completions_scores_as_the_engine_and_agrees_with_its_hf_model(lm_eval, tasks, front,
                                                                                       embedded_server,
                                                                                       tmp_path) -> None:
    folder = prepare_embedded(progress=lambda message: None)
    run = start(lm_eval, tasks, tmp_path / "served", "local-completions",
                f"model={FP32},base_url={front.base_url}/completions,tokenizer_backend=huggingface,"
                f"tokenizer={folder},max_length={CTX_LEN},num_concurrent=1,max_retries=1", "qaic_mc,qaic_gen")
    try:
        hf = hf_scores(lm_eval, tasks, folder)  # while the served run waits on its own work
        served = finished(run, tmp_path / "served", "qaic_mc,qaic_gen")
    finally:
        run.kill()
    got, want = served["results"]["qaic_mc"], hf["results"]["qaic_mc"]
    print(f"lm-eval qaic_mc ({len(QUESTIONS)} questions): local-completions acc {got['acc,none']:.3f} acc_norm "
          f"{got['acc_norm,none']:.3f}; hf acc {want['acc,none']:.3f} acc_norm {want['acc_norm,none']:.3f}")
    assert (got["acc,none"], got["acc_norm,none"]) == (want["acc,none"], want["acc_norm,none"])
    assert got["acc,none"] > 0.25  # the model answers better than chance: the scores mean something

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    samples = served["samples"]["qaic_mc"]
    pairs = [(a["arg_0"], a["arg_1"]) for s in samples for a in s["arguments"].values()]  # (context, continuation)
    front_ll = [ll for doc in loglikelihoods(samples) for ll in doc]
    engine_ll = engine_loglikelihoods(tokenizer, pairs)
    hf_ll = [ll for doc in loglikelihoods(hf["samples"]["qaic_mc"]) for ll in doc]
    engine_delta = max(abs(a - b) for a, b in zip(front_ll, engine_ll))
    hf_delta = max(abs(a - b) for a, b in zip(front_ll, hf_ll))
    print(f"max |delta loglikelihood| over {len(front_ll)} choices: front vs in-process engine {engine_delta:.2e}, "
          f"front vs lm-eval hf {hf_delta:.2e}")
    assert len(front_ll) == len(engine_ll) == len(hf_ll) == 4 * len(QUESTIONS)
    assert engine_delta < TOLERANCE

    generated = [s["resps"][0][0] for s in served["samples"]["qaic_gen"]]
    want_text = [stream(embedded_server.grpc_url, FP32, [p], GenerationParams(max_tokens=12, stop=("\n",)))
                 .replies()[0].text for p in GENERATE]
    assert generated == want_text and any(generated)
