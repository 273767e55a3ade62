"""The controls table drives the CLI options, the form values and the wire inputs alike."""

from __future__ import annotations

import dataclasses

import click
import pytest
import tritonclient.http as httpclient
from click.testing import CliRunner

from console.clients import CONTROLS, ClientError, GenerationParams, ModelInfo, Tensor, interface_of
from console.clients import params as params_module
from console.core import controls

BUNDLED = ModelInfo("m", True, True, inputs=(
    Tensor("prompt", "BYTES"), Tensor("max_tokens", "INT32", (1,), True), Tensor("seed", "INT64", (1,), True),
    Tensor("stop", "BYTES", (-1,), True), Tensor("exclude_input_in_output", "BOOL", (1,), True),
), outputs=(Tensor("text_output", "BYTES"),))


@pytest.fixture()
def extra_control(monkeypatch: pytest.MonkeyPatch) -> params_module.Control:
    """A control added to the table (as a developer would add one row)."""
    added = params_module.Control("min_p", float, "FP32", "Min p", "Drop tokens below this probability.",
                                  minimum=0, maximum=1)
    table = (*params_module.CONTROLS, added)
    monkeypatch.setattr(params_module, "CONTROLS", table)
    monkeypatch.setattr(params_module, "BY_NAME", {c.name: c for c in table})
    monkeypatch.setattr(controls, "CONTROLS", table)
    import console.clients.interfaces as interfaces

    monkeypatch.setattr(interfaces, "CONTROLS", table)
    monkeypatch.setattr(interfaces, "BY_NAME", {c.name: c for c in table})
    return added


def test_one_rule_per_control_everywhere() -> None:
    assert GenerationParams(seed=0).seed == 0  # 0 is a value, not "unset"
    assert GenerationParams(max_tokens=0).max_tokens is None  # 0 asks for the model's default
    for bad, needle in (({"seed": -1}, "Seed must be an integer >= 0"), ({"top_p": 0}, "Top p must be"),
                        ({"top_k": 1.5}, "Top k must be an integer"), ({"temperature": float("nan")}, "Temperature"),
                        ({"repetition_penalty": 0}, "> 0"), ({"max_tokens": True}, "Max tokens")):
        with pytest.raises(ClientError, match=needle):
            GenerationParams(**bad)
        with pytest.raises(ClientError, match=needle):
            controls.params_from_form(bad)
    with pytest.raises(ClientError, match="Seed: 'x' is not a number"):
        controls.params_from_form({"seed": "x"})
    form = controls.params_from_form({"seed": "0", "top_p": " ", "max_tokens": "64", "stop": "a|b"})
    assert form.values == {"seed": 0, "max_tokens": 64, "stop": ("a", "b")}
    assert controls.params_from_form({"seed": 7.0, "temperature": None}).values == {"seed": 7}


def test_click_options_follow_the_table() -> None:
    @click.command()
    @controls.click_options()
    def cmd(**values: object) -> None:
        click.echo(repr(controls.params_from_options(values)))

    runner = CliRunner()
    result = runner.invoke(cmd, ["--seed", "0", "--stop", "x", "--stop", "y"])
    assert result.exit_code == 0
    assert result.output.strip() == "GenerationParams(max_tokens=128, seed=0, stop=('x', 'y'))"
    result = runner.invoke(cmd, ["--seed", "-3"])
    assert result.exit_code == 2 and "Seed must be an integer >= 0" in result.output
    help_text = runner.invoke(cmd, ["--help"]).output
    for control in CONTROLS:
        assert control.flag in help_text


def test_a_control_added_to_the_table_reaches_options_forms_and_the_wire(extra_control) -> None:
    @click.command()
    @controls.click_options()
    def cmd(**values: object) -> None:
        click.echo(repr(controls.params_from_options(values)))

    assert "--min-p" in CliRunner().invoke(cmd, ["--help"]).output
    assert "min_p=0.2" in CliRunner().invoke(cmd, ["--min-p", "0.2"]).output
    assert controls.params_from_form({"min_p": "0.5"}).min_p == 0.5
    with pytest.raises(ClientError, match="Min p must be"):
        controls.params_from_form({"min_p": "3"})
    declares = dataclasses.replace(BUNDLED, inputs=(*BUNDLED.inputs, Tensor("min_p", "FP32", (1,), True)))
    inputs = interface_of(declares).inputs(httpclient, ["a"], GenerationParams(min_p=0.5))
    assert [(i.name(), i.datatype()) for i in inputs] == [("prompt", "BYTES"), ("min_p", "FP32")]


def test_only_declared_inputs_are_sent_and_the_rest_is_named() -> None:
    params = GenerationParams(max_tokens=8, seed=1, top_k=5, stop=("\n",), exclude_input_in_output=True)
    interface = interface_of(BUNDLED)
    names = [i.name() for i in interface.inputs(httpclient, ["a", "b"], params)]
    assert names == ["prompt", "max_tokens", "seed", "stop", "exclude_input_in_output"]
    assert interface.ignored(params) == ["top_k"]
    bare = dataclasses.replace(BUNDLED, inputs=(Tensor("prompt", "BYTES"),))
    assert [i.name() for i in interface_of(bare).inputs(httpclient, ["a"], params)] == ["prompt"]
    body = interface_of(bare).generate_body(["a"], params, "42")
    assert body == {"prompt": "a"}
    assert interface.generate_body(["a"], params, "42") == {
        "prompt": "a", "max_tokens": 8, "seed": 1, "stop": ["\n"], "exclude_input_in_output": True}
