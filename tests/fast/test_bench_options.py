"""The bench's options are one frozen value with the command's own defaults, its controls as request params."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from console.bench.options import BenchOptions
from console.clients import CONTROLS
from console.commands import bench as cli


def test_every_option_of_the_command_is_a_field_with_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[BenchOptions] = []
    monkeypatch.setattr(cli, "_run", lambda options: asked.append(options) or 0)
    assert CliRunner().invoke(cli.bench_group, []).exit_code == 0
    controls = {c.name for c in CONTROLS} - {"seed"}  # the bench's --seed seeds its prompts too: an option of its own
    options = {p.name for p in cli.bench_group.params} - controls
    assert options == {f.name for f in dataclasses.fields(BenchOptions)} - {"params"}
    assert dataclasses.replace(asked[0], params=BenchOptions().params) == BenchOptions()  # the command's defaults
    with pytest.raises(dataclasses.FrozenInstanceError):
        asked[0].mode = "batch"  # type: ignore[misc]


def test_the_controls_given_become_params() -> None:
    options = BenchOptions.from_command({"url": ["127.0.0.1:8001"], "temperature": 0.5, "top_k": 4, "mode": "batch"})
    assert (options.url, options.mode, options.params.temperature, options.params.values["top_k"]) == (
        ("127.0.0.1:8001",), "batch", 0.5, 4)
