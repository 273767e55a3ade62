"""The controls' schema (``backend_model.contract.controls``) is the one list: the generated config's inputs, the
consoles' table, the CLI options, the form values and the wire inputs come from it, each value checked once by its row.

The row added to the schema and served by a real tritonserver is ``tests/e2e/test_control_schema.py``.
"""

from __future__ import annotations

import dataclasses
import re

import click
import pytest
import tritonclient.http as httpclient
from click.testing import CliRunner

from backend_model.contract import controls as schema
from console.clients import CONTROLS, ClientError, GenerationParams, ModelInfo, Tensor, interface_of
from console.clients import params as params_module
from console.commands import options
from console.core import controls
from repo_gen.writer import ModelSpec, declared_io, render_config

BUNDLED = ModelInfo("m", True, True, inputs=(
    Tensor("prompt", "BYTES"), Tensor("max_tokens", "INT64", (1,), True), Tensor("seed", "INT64", (1,), True),
    Tensor("stop", "BYTES", (-1,), True), Tensor("exclude_input_in_output", "BOOL", (1,), True),
    Tensor("status_key", "BYTES", (1,), True),
), outputs=(Tensor("text_output", "BYTES"),))


def test_one_rule_per_control_everywhere() -> None:
    assert GenerationParams(seed=0).seed == 0  # 0 is a value, not "unset"
    assert GenerationParams(max_tokens=0).max_tokens == 0  # 0 asks for as many as the context allows
    for bad, needle in (({"seed": -1}, "Seed must be an integer >= 0"), ({"top_p": 0}, "Top p must be"),
                        ({"top_k": 1.5}, "Top k must be an integer"), ({"temperature": float("nan")}, "Temperature"),
                        ({"repetition_penalty": 0}, "> 0"), ({"max_tokens": True}, "Max tokens"),
                        ({"max_tokens": 2**32 + 5}, "<= 2147483647, got 4294967301")):
        with pytest.raises(ClientError, match=needle):
            GenerationParams(**bad)
        with pytest.raises(ClientError, match=needle):
            controls.params_from_form(bad)
    with pytest.raises(ClientError, match="Seed: 'x' is not a number"):
        controls.params_from_form({"seed": "x"})
    form = controls.params_from_form({"seed": "0", "top_p": " ", "max_tokens": "64", "stop": "a|b"})
    assert form.values == {"seed": 0, "max_tokens": 64, "stop": ("a", "b")}
    assert controls.params_from_form({"seed": 7.0, "temperature": None}).values == {"seed": 7}
    with pytest.raises(ClientError, match="got 4294967301"):  # exact: never through a float
        controls.params_from_form({"max_tokens": "4294967301"})


def test_the_backend_and_the_consoles_share_each_rows_rule() -> None:
    """The same row refuses the same value on both sides; only the name it is called by differs."""
    from backend_model.contract.errors import BadRequest

    row = schema.BY_NAME["top_p"]
    with pytest.raises(BadRequest, match=r"^top_p must be a number > 0 and <= 1, got 1.5$"):
        row.check(1.5)
    with pytest.raises(ClientError, match=r"^Top p must be a number > 0 and <= 1, got 1.5$"):
        GenerationParams(top_p=1.5)
    assert params_module.BY_NAME["top_p"] is row


def test_click_options_follow_the_table_and_hand_over_checked_values() -> None:
    @click.command()
    @options.click_options()
    def cmd(**values: object) -> None:
        click.echo(repr(values["max_tokens"]))
        click.echo(repr(controls.params_from_options(values)))

    runner = CliRunner()
    result = runner.invoke(cmd, ["--seed", "0", "--stop", "x", "--stop", "y"])
    assert result.exit_code == 0
    assert result.output.splitlines() == ["128", "GenerationParams(max_tokens=128, seed=0, stop=('x', 'y'))"]
    assert runner.invoke(cmd, ["--max-tokens", "0"]).output.splitlines()[1] == "GenerationParams(max_tokens=0)"
    result = runner.invoke(cmd, ["--seed", "-3"])
    assert result.exit_code == 2 and "Seed must be an integer >= 0" in result.output
    help_text = runner.invoke(cmd, ["--help"]).output
    for control in CONTROLS:
        assert control.flag in help_text


def test_the_consoles_offer_the_schemas_offered_rows() -> None:
    assert tuple(c for c in schema.CONTROLS if c.offered) == CONTROLS
    assert "ignore_eos" not in params_module.BY_NAME  # genai-perf's; min tokens = max tokens does it here
    with pytest.raises(ClientError, match="unknown control 'ignore_eos'"):
        GenerationParams(ignore_eos=True)
    assert GenerationParams(logprobs=2).logprobs == 2 and "logprobs" not in {c.name for c in CONTROLS}  # asked only


def test_the_generated_config_declares_every_row_as_the_schema_says() -> None:
    config = render_config(ModelSpec("m"))
    found = re.findall(r'name: "(\w+)" data_type: (TYPE_\w+) dims: \[ (-?1) \] optional: true', config)
    declared = {name: (kind, int(dims)) for name, kind, dims in found}
    for control in schema.CONTROLS:
        kind = "TYPE_STRING" if control.datatype == "BYTES" else f"TYPE_{control.datatype}"
        assert declared.pop(control.name) == (kind, control.dims[0]), control.name
    assert set(declared) == {"prompt", "text_input", "id", "exclude_input_in_output", "stream", "sampling_parameters",
                             "status_of", "status_key", "continuation", "messages", "images"}  # the interface's own
    inputs, _ = declared_io(config)
    assert inputs[:3] == ["prompt", "text_input", "id"] and len(inputs) == len(set(inputs))


def test_a_row_must_travel_as_its_type() -> None:
    with pytest.raises(ValueError, match="travels as"):
        schema.Control("bad", int, "FP32", "Bad", "A mistyped row.")


@pytest.fixture()
def extra_control(monkeypatch: pytest.MonkeyPatch) -> schema.Control:
    """A row the consoles offer, added in this process (the served one is the e2e test's)."""
    added = schema.Control("min_p", float, "FP32", "Min p", "Drop tokens below this probability.",
                           minimum=0, maximum=1, vllm=False)
    table = (*params_module.CONTROLS, added)
    monkeypatch.setattr(params_module, "CONTROLS", table)
    monkeypatch.setattr(params_module, "BY_NAME", {c.name: c for c in table})
    monkeypatch.setattr(controls, "CONTROLS", table)
    import console.clients.interfaces as interfaces

    monkeypatch.setattr(interfaces, "CONTROLS", table)
    monkeypatch.setattr(interfaces, "BY_NAME", {c.name: c for c in table})
    return added


def test_a_row_reaches_options_forms_and_the_wire(extra_control) -> None:
    @click.command()
    @options.click_options()
    def cmd(**values: object) -> None:
        click.echo(repr(controls.params_from_options(values)))

    assert "--min-p" in CliRunner().invoke(cmd, ["--help"]).output
    assert "min_p=0.2" in CliRunner().invoke(cmd, ["--min-p", "0.2"]).output
    assert controls.params_from_form({"min_p": "0.5"}).min_p == 0.5
    with pytest.raises(ClientError, match="Min p must be"):
        controls.params_from_form({"min_p": "3"})
    declares = dataclasses.replace(BUNDLED, inputs=(*BUNDLED.inputs, Tensor("min_p", "FP32", (1,), True)))
    inputs = interface_of(declares).inputs(httpclient, ["a"], GenerationParams(min_p=0.5))
    assert [(i.name(), i.datatype()) for i in inputs] == [("prompt", "BYTES"), ("min_p", "FP32"),
                                                          ("exclude_input_in_output", "BOOL")]
    vllm = ModelInfo("v", True, True, inputs=(Tensor("text_input", "BYTES"), Tensor("sampling_parameters", "BYTES")),
                     outputs=(Tensor("text_output", "BYTES"),))
    assert interface_of(vllm).ignored(GenerationParams(min_p=0.5, seed=1)) == ["min_p"]  # not one of vLLM's


def test_only_declared_inputs_are_sent_and_the_rest_is_named() -> None:
    params = GenerationParams(max_tokens=8, seed=1, top_k=5, stop=("\n",), status_key="k")
    interface = interface_of(BUNDLED)
    names = [i.name() for i in interface.inputs(httpclient, ["a", "b"], params)]
    assert names == ["prompt", "max_tokens", "seed", "stop", "exclude_input_in_output", "status_key"]
    assert interface.ignored(params) == ["top_k"]
    bare = dataclasses.replace(BUNDLED, inputs=(Tensor("prompt", "BYTES"),))
    assert [i.name() for i in interface_of(bare).inputs(httpclient, ["a"], params)] == ["prompt"]
    body = interface_of(bare).generate_body(["a"], params, "42")
    assert body == {"prompt": "a"}
    assert interface.generate_body(["a"], params.replace(status_key=None), "42") == {
        "prompt": "a", "max_tokens": 8, "seed": 1, "stop": ["\n"], "exclude_input_in_output": True}
    assert "status_key='...'" in repr(params) and "'k'" not in repr(params)  # the key is never shown


def test_the_interface_page_tells_each_rows_type() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "interface.md").read_text()
    section = page.split("# The model's Triton interface")[1].split("\n## ")[0]
    rows = {line.split("|")[1]: line.split("|")[2] for line in section.splitlines() if line.startswith("| `")}
    for control in schema.CONTROLS:
        (cell,) = [kind for names, kind in rows.items() if f"`{control.name}`" in names]
        assert ("STRING" if control.datatype == "BYTES" else control.datatype) in cell, control.name
