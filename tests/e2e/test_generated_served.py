"""What the generator writes beside the samples, served by one tritonserver for the module (and the OpenAI-compatible
front before it): LoRA adapters of the embedded model, and a compile config's card features on the twin of its graph.

LoRA: a model the generator writes with two adapters serves the base, A and B mixed in the same batches, and 64
requests from 16 clients (base, A, B interleaved) each get the greedy answer of their merged model
(``merge_and_unload()``) alone at fp32; an unknown adapter is a 400 naming the served ones; the backend's metrics count
the requests per adapter; the front, headless, eval and the web page's picker ask each adapter by its name. A second
model of the embedded base has its adapters changed through the front while it serves (vLLM's runtime LoRA routes,
the module's last test, as it changes them).

The card's features: one model samples on the card and attends compute-context lengths, the other samples on the host
(as the card does) at the fixed length; a seeded request gives the same tokens on both, and greedy answers are exact.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import SERVER_START, computed_key, front_before, kept, wait_until
from lora_adapters import PROMPT, base_model, merged_answers
from triton_wire import generate
from twin_data import CTX_LEN, events, generate_model, texts

from backend_model.contract import compile_config, specializations
from console.clients import GenerationParams
from console.clients import generate as client_generate

pytestmark = [pytest.mark.server]
MODEL = "smollm2_lora"
RUNTIME = "smollm2_lora_runtime"  # streams; serves C (A's weights) at first, D (B's, put in its folder) is loaded
LONG = 40  # tokens of the answer that runs while its adapter is unloaded
RELOAD = 600  # s a reload of a model (its base loads again) may take here
PROMPTS = (PROMPT, "Say one word:", "The answer is")
NAMES = ("", "A", "B")  # the base, then the adapters
TOKENS = 8
CLIENTS, REQUESTS = 16, 64
LORA_COMPILE = {"prefill_seq_len": 16, "ctx_len": 64, "full_batch_size": 8}

CARD_PROMPTS = ["My name is", "Maroon bells are mountains in Colorado, and"]
REGULAR = {"prefill_seq_len": 8, "ctx_len": CTX_LEN, "batch_size": 2}  # the shared regular graph's compile
CCL = {"comp_ctx_lengths_prefill": [16, 40], "comp_ctx_lengths_decode": [32, CTX_LEN]}
SAMPLER = {"include_sampler": True, "max_top_k_ids": 64}
SAMPLED = GenerationParams(max_tokens=24, temperature=0.9, top_k=50, top_p=0.95, repetition_penalty=1.2, seed=5)
GREEDY = GenerationParams(max_tokens=40)  # past the first decode length


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, lora_folders: dict[str, Path], graphs) -> Path:
    """Four models: ``smollm2_lora`` (the embedded model with adapters A and B, engine cpu), ``smollm2_lora_runtime``
    (adapter C, and D in its folder to load), and two of the shared regular graph on the twin: ``card``
    (include_sampler and CCL) and ``host`` (neither)."""
    from repo_gen.spec import generate as write

    root = tmp_path_factory.mktemp("generated_features")
    (root / "lora_compile.json").write_text(json.dumps(LORA_COMPILE))
    compiled = root / "lora_compile.json"
    write(MODEL, root / "repo", hf_model_name="embedded", engine="cpu", compile_config_path=compiled,
          lora_adapters=[f"{name}={folder}" for name, folder in lora_folders.items()])
    write(RUNTIME, root / "repo", hf_model_name="embedded", engine="cpu", compile_config_path=compiled,
          decoupled=True, lora_adapters=[f"C={lora_folders['A']}"])
    shutil.copytree(lora_folders["B"], root / "repo" / RUNTIME / "adapters" / "D")  # as an operator puts one there
    graph = graphs["regular"] / "model.onnx"
    compiled = root / "ccl"  # the graph beside the specializations a compile with the CCL lists writes
    compiled.mkdir()
    os.link(graph, compiled / "model.onnx")
    specializations.write(compiled, specializations.of_config(compile_config.validate({**REGULAR, **CCL})))
    generate_model(root / "repo", "card", {**REGULAR, **CCL, **SAMPLER, "onnx_path": str(compiled / "model.onnx")},
                   "--engine", "onnx")
    generate_model(root / "repo", "host", {**REGULAR, "max_top_k_ids": 64, "onnx_path": str(graph)}, "--engine", "onnx")
    return root / "repo"


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator:
    """The tritonserver serving the three models."""
    from console.server import TritonServer

    with TritonServer(repo).start(timeout=SERVER_START) as started:
        yield started


@pytest.fixture(scope="module")
def front(server) -> Iterator:
    """The OpenAI-compatible front (in this process, on a free loopback port, no key) before ``server``, with vLLM's
    runtime LoRA routes (its switch) and the server's repository key."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "true")
        with front_before(server, triton_key=lambda: server.handle.key) as started:
            yield started


@pytest.fixture(scope="module")
def expected(lora_folders: dict[str, Path]) -> dict[tuple[str, str], str]:
    """Each (adapter, prompt)'s greedy answer by its merged model alone, as text; kept in the console's cache under a
    key of the adapters' folder (named by what trained them), the prompts and the code (``kept``)."""
    key = computed_key(lora_folders["A"].parent.name, json.dumps(PROMPTS), str(TOKENS),
                       inspect.getsource(merged_answers))

    def make(out: Path) -> None:
        tokenizer = base_model()[1]
        rows = [(name, prompt, tokenizer.decode(tokens, skip_special_tokens=True)) for name in NAMES
                for prompt, tokens in zip(PROMPTS, merged_answers(lora_folders.get(name), list(PROMPTS), TOKENS))]
        (out / "answers.json").write_text(json.dumps(rows))

    rows = json.loads((kept("lora-reference", key, make) / "answers.json").read_text())
    return {(name, prompt): text for name, prompt, text in rows}


def ask(server, prompt: str, name: str, request_id: str) -> str:
    body = {"text_input": prompt, "max_tokens": TOKENS, "exclude_input_in_output": True, "id": request_id}
    if name:
        body["lora_name"] = name
    return generate(server, MODEL, body)["text_output"]


def test_mixed_requests_each_get_their_merged_models_answer(server, expected):
    jobs = [(PROMPTS[i % len(PROMPTS)], NAMES[(i // len(PROMPTS) + i) % len(NAMES)], f"r{i}") for i in range(REQUESTS)]
    with ThreadPoolExecutor(CLIENTS) as pool:
        got = list(pool.map(lambda job: ask(server, *job), jobs))
    assert {name for _, name, _ in jobs} == set(NAMES)
    wrong = [(name, prompt, text) for (prompt, name, _), text in zip(jobs, got) if text != expected[(name, prompt)]]
    assert not wrong, wrong
    assert len({expected[(name, PROMPT)] for name in NAMES}) == 3  # base, A and B answer differently
    counts = {name: sum(1 for _, n, _ in jobs if n == name) for name in ("A", "B")}
    url = server.handle.metrics_url  # published as the sequences end: the last ones may be a moment behind
    wait_until(lambda: lora_counts(url) == counts, 30.0, f"qaic_lora_requests_total {counts}",
               lambda: f"the page says {lora_counts(url)}")


def lora_counts(url: str) -> dict[str, int]:
    """``qaic_lora_requests_total`` of MODEL by adapter, as the server's metrics page says."""
    page = urllib.request.urlopen(url, timeout=30).read().decode()
    found = {}
    for line in page.splitlines():
        match = re.match(r'qaic_lora_requests_total\{.*lora_name="([^"]+)".*\} (\S+)$', line)
        if match and f'model="{MODEL}"' in line:
            found[match.group(1)] = int(float(match.group(2)))
    return found


def test_an_unknown_adapter_is_a_400_naming_the_served_ones(server):
    with pytest.raises(urllib.error.HTTPError) as error:
        ask(server, PROMPT, "C", "bad")
    assert error.value.code == 400
    assert "unknown adapter 'C'; this model serves: A, B" in error.value.read().decode()


def test_the_front_and_headless_ask_each_adapter_by_its_name(front, server, expected):
    """The ``openai`` SDK with model="<adapter>" and headless ``--model <adapter>`` get the merged model's answer."""
    import httpx
    import openai
    from helpers import cli, json_lines
    from prometheus_client.parser import text_string_to_metric_families

    cards = httpx.get(f"{front.base_url}/models", timeout=30).json()["data"]
    served = [("card", None), ("host", None), (MODEL, None), ("A", MODEL), ("B", MODEL), (RUNTIME, None),
              ("C", RUNTIME)]  # the card features' and the runtime model's beside
    assert [(c["id"], c["parent"]) for c in cards] == served
    sdk = openai.OpenAI(base_url=front.base_url, api_key="none", max_retries=0)
    for name in NAMES:
        answer = sdk.completions.create(model=name or MODEL, prompt=PROMPT, max_tokens=TOKENS)
        assert (answer.model, answer.choices[0].text) == (name or MODEL, expected[(name, PROMPT)])
    result = cli("--prompt", PROMPT, "--http-url", server.http_url, "--grpc-url", server.grpc_url, "--model",
                 "B", "--max-tokens", str(TOKENS), "--raw", "--json", "-q")
    assert result.exit_code == 0, result.output
    assert json_lines(result)[0]["text"] == expected[("B", PROMPT)]
    page = httpx.get(front.base_url.removesuffix("/v1") + "/metrics", timeout=30).text
    [gauge] = [s for f in text_string_to_metric_families(page) for s in f.samples
               if s.name == "vllm:lora_requests_info"]
    assert gauge.labels == {"max_lora": "3", "running_lora_adapters": "A,B,C", "waiting_lora_adapters": ""}


def test_eval_compares_an_adapter_with_another_path(front, server, tmp_path):
    """The adapter straight from Triton against itself through the front (the same answers) and the other adapter."""
    from helpers import cli

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    triton = f"{server.http_url},{server.grpc_url}"  # both: the adapters are found over HTTP
    reference, through_front, other = f"A@{triton}", f"A@{front.base_url}", f"B@{triton}"
    result = cli("eval", "--reference", reference, "--candidate", through_front, "--candidate", other, "--prompts",
                 str(prompts), "--max-tokens", str(TOKENS), "--no-likelihood", "-o", str(tmp_path / "eval"), "-q")
    assert result.exit_code == 0, result.output
    rows = {row["path"]: row for row in json.loads((tmp_path / "eval" / "eval.json").read_text())["summary"]}
    assert rows[through_front]["exact"] == len(PROMPTS) and rows[other]["exact"] < len(PROMPTS)


def answers(server, model: str, params: GenerationParams) -> list[str]:
    return [texts(events(client_generate(server.http_url, model, [prompt], params)))[0] for prompt in CARD_PROMPTS]


def test_a_seeded_request_gives_the_same_tokens_sampled_on_the_card_and_on_the_host(server):
    on_card = answers(server, "card", SAMPLED)
    assert on_card == answers(server, "host", SAMPLED)
    assert on_card != answers(server, "host", GenerationParams(max_tokens=24))  # sampled, not greedy
    log = "\n".join(server.log_tail(2000))
    assert "sampler=card max_top_k_ids=64 comp_ctx_lengths={1: [32, 64], 8: [16, 40]}" in log
    assert "sampler=host max_top_k_ids=64 graph=" in log


def test_compute_context_lengths_serve_the_fixed_length_greedy_answers(server):
    assert answers(server, "card", GREEDY) == answers(server, "host", GREEDY)


def test_the_tuis_picker_asks_the_base_and_each_adapter_for_its_merged_models_answer(server, expected, tmp_path):
    """The TUI's Batch pane (the model answers once): the base, then A, then B picked in its model list, each answer
    its merged model's."""
    from textual.widgets import Select
    from tui_pilot import run, say, stream_pane, until

    async def go() -> None:
        async with stream_pane(server.http_url, server.grpc_url, tmp_path, TOKENS, chat=False, mode="batch") as (
                _, pilot, pane):
            for picked in (name or MODEL for name in NAMES):
                pane.controls.query_one("#model", Select).value = picked
                await until(pilot, lambda m=picked: pane.controls.settings().model == m, 30, "the model picked")
                await say(pilot, pane, PROMPT)
            assert [turn.text(0) for turn in pane.turns] == [expected[(name, PROMPT)] for name in NAMES]

    run(go)


def test_the_web_pages_picker_lists_the_adapters_under_their_base(server, expected):
    """The web page's model picker lists each adapter under its base model, and a picked adapter answers as its
    merged model."""
    from web_page import WAIT_MS, LogWatch, open_page

    from console.core.controller import ServerController
    from console.web.handlers import WebConsole

    log = LogWatch()
    controller = ServerController(on_log=log.add)
    controller.connect(server.http_url, server.grpc_url)
    try:
        with open_page(WebConsole(controller), log, ready="connected") as web:
            web.mode("batch")  # the model answers once
            web.page.locator("#qc-model input").click()
            web.page.get_by_role("option", name=f"B · LoRA adapter of {MODEL}").wait_for(timeout=WAIT_MS)
            labels = [option.inner_text().strip() for option in web.page.get_by_role("option").all()]
            start = labels.index(f"A · LoRA adapter of {MODEL}") - 1
            assert labels[start].endswith(MODEL) and labels[start + 2] == f"B · LoRA adapter of {MODEL}", labels
            web.page.get_by_role("option", name=f"B · LoRA adapter of {MODEL}").click()  # the list is open
            web.page.wait_for_function("() => document.querySelector('#qc-model input').value.startsWith('B')",
                                       timeout=WAIT_MS)
            web.page.locator("#qc-chat-template input").uncheck()  # the prompt as it is, as the merged model got it
            web.fill("max-tokens", str(TOKENS))
            web.send(PROMPT)
            answer = expected[("B", PROMPT)].strip()  # a bubble does not start with a space
            assert web.answers()[-1].startswith(f"{answer}\n\n— length · {TOKENS} tokens")
    finally:
        controller.stop()


# the last: it changes the runtime model's adapters
def test_adapters_are_loaded_and_unloaded_while_the_model_serves(front, lora_folders, expected):
    """Through the front: D is loaded while C is served and answers as its merged model; a folder outside the model's
    is refused and D still answers; C is unloaded while a long answer of C streams, which ends whole, and C is then
    a 404 naming what is served."""
    import httpx
    import openai

    tokenizer = base_model()[1]
    long_answer = tokenizer.decode(merged_answers(lora_folders["A"], [PROMPT], LONG)[0], skip_special_tokens=True)
    base = front.base_url
    sdk = openai.OpenAI(base_url=base, api_key="none", max_retries=0)

    def answer_of_d() -> str:
        return sdk.completions.create(model="D", prompt=PROMPT, max_tokens=TOKENS).choices[0].text

    def change(route: str, **body: str) -> httpx.Response:
        return httpx.post(f"{base}/{route}", json=body, timeout=RELOAD)

    loaded = change("load_lora_adapter", lora_name="D", lora_path="adapters/D", base_model_name=RUNTIME)
    assert (loaded.status_code, loaded.text) == (200, "Success: LoRA adapter 'D' added successfully.")
    assert answer_of_d() == expected[("B", PROMPT)]
    refused = change("load_lora_adapter", lora_name="E", lora_path=str(lora_folders["A"]), base_model_name=RUNTIME)
    assert refused.status_code == 400 and "is not inside the model's folder" in refused.json()["error"]["message"]
    assert answer_of_d() == expected[("B", PROMPT)]

    chunks = iter(sdk.completions.create(model="C", prompt=PROMPT, max_tokens=LONG, stream=True))
    text = next(chunks).choices[0].text  # C's answer has begun
    with ThreadPoolExecutor(1) as pool:
        unloading = pool.submit(change, "unload_lora_adapter", lora_name="C")
        text += "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
        unloaded = unloading.result()
    assert text == long_answer
    assert (unloaded.status_code, unloaded.text) == (200, "Success: LoRA adapter 'C' removed successfully.")
    gone = httpx.post(f"{base}/completions", json={"model": "C", "prompt": PROMPT, "max_tokens": 2}, timeout=60)
    served = f"(served: card, host, {MODEL}, A, B, {RUNTIME}, D)"
    assert gone.status_code == 404 and served in gone.json()["error"]["message"]
