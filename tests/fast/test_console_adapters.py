"""LoRA adapters in the consoles, on the fake server: headless ``--model <adapter>`` asks the base model with the
adapter as ``lora_name``, the TUI's and the web page's model pickers list each model's adapters under it, a picked
adapter goes out as its model with ``lora_name``, and ``bench --adapters`` spreads its requests over adapters."""

from __future__ import annotations

import json
from pathlib import Path

from fake_server import FakeServer, bundled_info, with_adapters
from helpers import assert_one_line_error, cli

from console.clients import GenerationParams, ModelInfo
from console.core.controller import ModelRow, Snapshot
from console.core.request import Settings, prepare
from console.tui.widgets.controls import model_options
from console.web.views import model_choices


def served(fake_server: FakeServer) -> tuple[ModelInfo, ...]:
    infos = (with_adapters(bundled_info("smollm2_decoupled"), "alpha", "beta"), bundled_info("other"))
    fake_server.serve(*infos)
    return infos


def test_headless_asks_an_adapter_of_its_model(fake_server: FakeServer) -> None:
    served(fake_server)
    for model in ("beta", "smollm2_decoupled"):
        result = cli("--prompt", "My name is", "--url", fake_server.url, "--model", model, "--max-tokens", "4",
                     "--raw")
        assert result.exit_code == 0, result.output
    assert [(r.model, r.params.get("lora_name")) for r in fake_server.requests] == [
        ("smollm2_decoupled", "beta"), ("smollm2_decoupled", None)]


def test_an_adapter_no_model_serves_is_refused_naming_the_models(fake_server: FakeServer) -> None:
    served(fake_server)
    assert_one_line_error(cli("--prompt", "hi", "--url", fake_server.url, "--model", "gamma"), "gamma",
                          "smollm2_decoupled")
    assert not fake_server.requests


def snapshot(fake_server: FakeServer) -> Snapshot:
    rows = tuple(ModelRow(info.name, "READY", "", info) for info in served(fake_server))
    return Snapshot(phase="connected", message="", models=rows)


def test_the_pickers_list_each_models_adapters_under_it(fake_server: FakeServer) -> None:
    choices = snapshot(fake_server).choices
    assert list(choices) == ["smollm2_decoupled", "alpha", "beta", "other"]
    assert choices["beta"].name == "smollm2_decoupled" and choices["beta"].adapter == "beta"
    tui = model_options("stream", choices)
    assert [name for _, name in tui] == ["other", "smollm2_decoupled", "alpha", "beta"]
    assert tui[2][0].strip() == "alpha · LoRA adapter of smollm2_decoupled"
    web = model_choices(choices, "stream")
    assert [name for _, name in web] == ["other", "smollm2_decoupled", "alpha", "beta"]
    assert web[3][0] == "beta · LoRA adapter of smollm2_decoupled"


def test_a_picked_adapter_goes_out_as_its_model_with_lora_name(fake_server: FakeServer) -> None:
    from console.core.adapters import adapter_for

    info = snapshot(fake_server).choices["alpha"]
    call = prepare(adapter_for(fake_server.url), Settings("alpha", params=GenerationParams(max_tokens=2)), ["Hi"],
                   info=info).call
    list(call)
    (request,) = fake_server.requests
    assert (request.model, request.params.get("lora_name")) == ("smollm2_decoupled", "alpha")


def test_bench_spreads_its_requests_over_the_adapters_and_reports_each(fake_server: FakeServer,
                                                                       tmp_path: Path) -> None:
    served(fake_server)
    result = cli("bench", "--url", fake_server.url, "--adapters", "alpha,beta,smollm2_decoupled", "--requests", "6",
                 "--concurrency", "2", "--warmup", "0", "--output-tokens-mean", "4", "--input-tokens-mean", "8",
                 "--plots", "none", "-o", str(tmp_path), "--json", "-q")
    assert result.exit_code == 0, result.output
    [level] = json.loads(result.stdout)["levels"]
    assert {name: s["request_count"] for name, s in level["adapters"].items()} == {
        "alpha": 2, "beta": 2, "smollm2_decoupled": 2}
    sent = [(r.model, r.params.get("lora_name")) for r in fake_server.requests]
    assert sorted(sent, key=str) == sorted([("smollm2_decoupled", "alpha"), ("smollm2_decoupled", "beta"),
                                           ("smollm2_decoupled", None)] * 2, key=str)
    requests = (tmp_path / "bench_requests.csv").read_text()
    assert "adapter" in requests.splitlines()[0]


def test_the_tuis_picker_offers_the_adapters_and_a_send_asks_the_picked_one(fake_server: FakeServer,
                                                                            tmp_path: Path) -> None:
    from textual.widgets import Select
    from tui_pilot import run, say, stream_pane

    served(fake_server)

    async def go() -> None:
        async with stream_pane(fake_server.url, None, tmp_path, 8, chat=False) as (_, pilot, stream):
            assert {"alpha", "beta"} <= set(stream.infos) and stream.infos["beta"].adapter == "beta"
            stream.controls.query_one("#model", Select).value = "beta"  # offered: a value not offered is refused
            await say(pilot, stream, "My name is")
            assert stream.turns[0].replies[0].ok

    run(go)
    (request,) = fake_server.requests
    assert (request.model, request.params.get("lora_name")) == ("smollm2_decoupled", "beta")
