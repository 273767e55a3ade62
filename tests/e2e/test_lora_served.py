"""LoRA adapters through a real tritonserver: a repository the generator writes with two adapters serves the base,
A and B mixed in the same batches, and 64 requests from 16 clients (base, A, B interleaved) each get the greedy
answer of their merged model (``merge_and_unload()``) alone at fp32; an unknown adapter is a 400 naming the
served ones; the backend's metrics count the requests per adapter."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import SERVER_START, wait_until
from lora_adapters import PROMPT, base_model, merged_answers
from triton_wire import generate

pytestmark = [pytest.mark.server]
MODEL = "smollm2_lora"
PROMPTS = (PROMPT, "Say one word:", "The answer is")
NAMES = ("", "A", "B")  # the base, then the adapters
TOKENS = 8
CLIENTS, REQUESTS = 16, 64


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory: pytest.TempPathFactory, lora_folders: dict[str, Path]):
    from console.server import TritonServer
    from repo_gen.spec import generate as write

    repo = tmp_path_factory.mktemp("lora_repo")
    compiled = repo.parent / "lora_compile.json"
    compiled.write_text(json.dumps({"prefill_seq_len": 16, "ctx_len": 64, "full_batch_size": 8}))
    write(MODEL, repo, hf_model_name="embedded", engine="cpu", compile_config_path=compiled,
          lora_adapters=[f"{name}={folder}" for name, folder in lora_folders.items()])
    server = TritonServer(repo)
    server.start(timeout=SERVER_START)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def expected(lora_folders: dict[str, Path]) -> dict[tuple[str, str], str]:
    """Each (adapter, prompt)'s greedy answer by its merged model alone, as text."""
    tokenizer = base_model()[1]
    return {(name, prompt): tokenizer.decode(tokens, skip_special_tokens=True) for name in NAMES
            for prompt, tokens in zip(PROMPTS, merged_answers(lora_folders.get(name), list(PROMPTS), TOKENS))}


def ask(server, prompt: str, name: str, request_id: str) -> str:
    body = {"text_input": prompt, "max_tokens": TOKENS, "exclude_input_in_output": True, "id": request_id}
    if name:
        body["lora_name"] = name
    return generate(server, MODEL, body)["text_output"]


def test_mixed_requests_each_get_their_merged_models_answer(lora_server, expected):
    jobs = [(PROMPTS[i % len(PROMPTS)], NAMES[(i // len(PROMPTS) + i) % len(NAMES)], f"r{i}") for i in range(REQUESTS)]
    with ThreadPoolExecutor(CLIENTS) as pool:
        got = list(pool.map(lambda job: ask(lora_server, *job), jobs))
    assert {name for _, name, _ in jobs} == set(NAMES)
    wrong = [(name, prompt, text) for (prompt, name, _), text in zip(jobs, got) if text != expected[(name, prompt)]]
    assert not wrong, wrong
    assert len({expected[(name, PROMPT)] for name in NAMES}) == 3  # base, A and B answer differently
    counts = {name: sum(1 for _, n, _ in jobs if n == name) for name in ("A", "B")}
    url = lora_server.handle.metrics_url  # published as the sequences end: the last ones may be a moment behind
    wait_until(lambda: lora_counts(url) == counts, 30.0, f"qaic_lora_requests_total {counts}",
               lambda: f"the page says {lora_counts(url)}")


def lora_counts(url: str) -> dict[str, int]:
    """``qaic_lora_requests_total`` by adapter, as the server's metrics page says."""
    page = urllib.request.urlopen(url, timeout=30).read().decode()
    found = {}
    for line in page.splitlines():
        match = re.match(r'qaic_lora_requests_total\{.*lora_name="([^"]+)".*\} (\S+)$', line)
        if match:
            found[match.group(1)] = int(float(match.group(2)))
    return found


def test_an_unknown_adapter_is_a_400_naming_the_served_ones(lora_server):
    with pytest.raises(urllib.error.HTTPError) as error:
        ask(lora_server, PROMPT, "C", "bad")
    assert error.value.code == 400
    assert "unknown adapter 'C'; this model serves: A, B" in error.value.read().decode()


@pytest.fixture(scope="module")
def lora_front(lora_server):
    """The OpenAI-compatible front before ``lora_server`` (loopback, no key)."""
    from console.front import front_server
    from console.server import free_port

    server = front_server(lora_server.grpc_url, "127.0.0.1", free_port(), None, (), lora_server.handle.metrics_url)
    server.start()
    yield server
    server.stop()


def test_the_front_and_headless_ask_each_adapter_by_its_name(lora_front, lora_server, expected):
    """The ``openai`` SDK with model="<adapter>" and headless ``--model <adapter>`` get the merged model's answer."""
    import httpx
    import openai
    from helpers import cli, json_lines
    from prometheus_client.parser import text_string_to_metric_families

    cards = httpx.get(f"{lora_front.base_url}/models", timeout=30).json()["data"]
    assert [(c["id"], c["parent"]) for c in cards] == [(MODEL, None), ("A", MODEL), ("B", MODEL)]
    sdk = openai.OpenAI(base_url=lora_front.base_url, api_key="none", max_retries=0)
    for name in NAMES:
        answer = sdk.completions.create(model=name or MODEL, prompt=PROMPT, max_tokens=TOKENS)
        assert (answer.model, answer.choices[0].text) == (name or MODEL, expected[(name, PROMPT)])
    result = cli("--prompt", PROMPT, "--http-url", lora_server.http_url, "--grpc-url", lora_server.grpc_url, "--model",
                 "B", "--max-tokens", str(TOKENS), "--raw", "--json", "-q")
    assert result.exit_code == 0, result.output
    assert json_lines(result)[0]["text"] == expected[("B", PROMPT)]
    page = httpx.get(lora_front.base_url.removesuffix("/v1") + "/metrics", timeout=30).text
    [gauge] = [s for f in text_string_to_metric_families(page) for s in f.samples
               if s.name == "vllm:lora_requests_info"]
    assert gauge.labels == {"max_lora": "2", "running_lora_adapters": "A,B", "waiting_lora_adapters": ""}


def test_eval_compares_an_adapter_with_another_path(lora_front, lora_server, tmp_path):
    """The adapter straight from Triton against itself through the front (the same answers) and the other adapter."""
    from helpers import cli

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    triton = f"{lora_server.http_url},{lora_server.grpc_url}"  # both: the adapters are found over HTTP
    reference, through_front, other = f"A@{triton}", f"A@{lora_front.base_url}", f"B@{triton}"
    result = cli("eval", "--reference", reference, "--candidate", through_front, "--candidate", other, "--prompts",
                 str(prompts), "--max-tokens", str(TOKENS), "--no-likelihood", "-o", str(tmp_path / "eval"), "-q")
    assert result.exit_code == 0, result.output
    rows = {row["path"]: row for row in json.loads((tmp_path / "eval" / "eval.json").read_text())["summary"]}
    assert rows[through_front]["exact"] == len(PROMPTS) and rows[other]["exact"] < len(PROMPTS)
