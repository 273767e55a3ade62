"""Many SoCs in one server: qaic-util -q as it really prints, device groups (one model instance each), num_devices.

``qaic-util`` is a script put on PATH that prints a real published output (../shared/fixtures/qaic-util/): an
8-SoC SDK 1.5 server whose QIDs share two board serials (0, 3, 6, 7 on PN471-12-343016; 1, 2, 4, 5 on
PN471-11-343015) and a 1-SoC SDK 1.6 edge kit (8 NSPs, no board serial).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from backend_model import build
from backend_model.build import BackendSettings
from backend_model.contract import compile_config, devices
from backend_model.sessions.protocol import SessionError
from console.commands import doctor
from console.commands.repo import repo_group
from console.metrics.qaic import card_line
from repo_gen import memory
from repo_gen.inspection import device_review, list_models
from repo_gen.samples import SAMPLES
from repo_gen.writer import RepoError

FIXTURES = Path("/work/shared/fixtures/qaic-util")
SERVER = FIXTURES / "sdk-1.5-server-8x16nsp.txt"
EDGE = FIXTURES / "sdk-1.6-edge-kit-1x8nsp.txt"
BOARD_A, BOARD_B = "PN471-12-343016", "PN471-11-343015"
BIG_MACHINE = (1e15, 1e15)


def qaic_util(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> None:
    """A ``qaic-util`` on PATH (first) that prints ``text`` whatever it is asked."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    (folder / "out.txt").write_text(text)
    tool = folder / "qaic-util"
    tool.write_text(f"#!/bin/sh\ncat '{folder / 'out.txt'}'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{Path(sys.executable).parent}:/usr/bin:/bin")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    qaic_util(monkeypatch, tmp_path, SERVER.read_text())


def gen(tmp_path: Path, *args: str, num_devices: int = 2) -> tuple[int, str, str]:
    config = tmp_path / "cc.json"
    config.write_text(json.dumps({"num_devices": num_devices}))
    result = CliRunner().invoke(repo_group, ["gen", "--model_name", "smollm2_kv", "--compile_config_path",
                                             str(config), "-o", str(tmp_path / "out"), *args])
    return result.exit_code, result.stdout, result.stderr


# --------------------------------------------------------------------------- qaic-util -q


def test_the_8_soc_server_is_read_field_by_field() -> None:
    found = devices.parse(SERVER.read_text())
    assert [d.qid for d in found] == list(range(8))
    first = found[0]
    assert (first.status, first.pci_address, first.board_serial) == ("Ready", "0000:01:00.0", BOARD_A)
    assert (first.dram_total_mb, first.dram_free_mb, first.nsp_total, first.nsp_free, first.networks_active) == \
        (32692, 32692, 16, 16, 0)
    assert [d.board_serial for d in found] == [BOARD_A, BOARD_B, BOARD_B, BOARD_A, BOARD_B, BOARD_B, BOARD_A, BOARD_A]


def test_doctor_lists_the_8_socs_with_their_board_serials(server: None) -> None:
    text = doctor.format_rows(doctor.check_devices())  # qaic-console doctor's rows about the devices
    lines = text.splitlines()
    assert lines[0].split(None, 2)[2].startswith("ok       8 SoCs on 2 board serials"), text
    assert len(lines) == 9 and all(f"board {BOARD_A}" in line for line in (lines[1], lines[4], lines[7], lines[8]))
    assert "QID 1 " in lines[2] and f"board {BOARD_B}" in lines[2] and "NSPs 16/16 free" in lines[2]


def test_doctor_lists_the_edge_kit_as_one_soc_of_8_nsps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    qaic_util(monkeypatch, tmp_path, EDGE.read_text())
    lines = doctor.format_rows(doctor.check_devices()).splitlines()
    assert "1 SoC on 1 board serial" in lines[0] and len(lines) == 2
    assert "Ready 0002:01:00.0 no board serial · DRAM 8116/8116 MB free · NSPs 8/8 free" in lines[1]


def test_the_card_line_reads_dram_nsps_and_networks_and_labels_only_power(server: None) -> None:
    found, note = devices.query()
    line = card_line(found[:1], note)
    assert line.startswith("QID 0 Ready · NSPs 0% · DRAM 0% · 0 networks (") and "unverified" not in line
    busy = devices.parse("QID 0\n\tStatus:Ready\n\tNsp Total:16\n\tNsp Free:12\n\tPower:41 W\n")
    assert card_line(busy, "x").startswith("QID 0 Ready · NSPs 25% · 41 W (x; unverified:")


# --------------------------------------------------------------------------- device groups


@pytest.mark.parametrize(("text", "needle"), [("0,1;1,2", "QID 1 is in groups 0 and 1"), ("0,0", "twice in group"),
                                              ("0,a;2", "'0,a' is not a comma-separated list")])
def test_bad_groups_are_refused(text: str, needle: str) -> None:
    with pytest.raises(devices.DeviceError, match=needle):
        devices.parse_groups(text)


def test_two_groups_of_two_write_two_instances_and_warn_naming_both_board_serials(server: None,
                                                                                   tmp_path: Path) -> None:
    code, out, err = gen(tmp_path, "--device-groups", "0,1;2,3")
    assert code == 0, err
    assert "instances 2 on device groups 0,1;2,3" in out
    config = (tmp_path / "out" / "smollm2_kv" / "config.pbtxt").read_text()
    assert "instance_group [ { count: 2 kind: KIND_CPU } ]" in config
    assert 'key: "device_groups" value: { string_value: "0,1;2,3" }' in config
    assert f"warning: device group 0 (0,1) spans board serials {BOARD_B} and {BOARD_A}" in err
    code, _, err = gen(tmp_path, "--device-groups", "0,3;6,7", "--force")
    assert code == 0 and "warning" not in err, err  # each group on one board


def test_a_group_of_3_for_num_devices_2_is_refused_at_generate_and_at_load(server: None, tmp_path: Path) -> None:
    code, _, err = gen(tmp_path, "--device-groups", "0,3,6")
    assert code == 2 and err.startswith("error: --device-groups: device group 0 (0,3,6) has 3 SoCs but the model "
                                        "runs on num_devices 2 (compile_config.json num_devices)"), err
    assert not (tmp_path / "out").exists()
    assert gen(tmp_path, "--device-groups", "0,3")[0] == 0
    folder = tmp_path / "out" / "smollm2_kv"
    with pytest.raises(SessionError, match=r"device group 0 \(0,3,6\) has 3 SoCs but the model runs on num_devices"
                                           r" 2"):
        BackendSettings.from_model_dir(folder, {"device_groups": "0,3,6"}, "smollm2_kv_0_0")


def test_each_instance_takes_its_group_from_its_name(tmp_path: Path) -> None:
    (tmp_path / "compile_config.json").write_text('{"num_devices": 2}')
    params = {"device_groups": "0,1;2,3"}
    first = BackendSettings.from_model_dir(tmp_path, params, "smollm2_kv_0_0")
    second = BackendSettings.from_model_dir(tmp_path, params, "smollm2_kv_0_1")
    assert (first.device_ids, first.instance, second.device_ids, second.instance) == ([0, 1], 0, [2, 3], 1)
    with pytest.raises(SessionError, match="instance m_0_2 is number 2 but device_groups 0,1;2,3 has 2"):
        BackendSettings.from_model_dir(tmp_path, params, "m_0_2")
    assert BackendSettings.from_model_dir(tmp_path, {"device_ids": "4,5"}, "m_0_1").device_ids == [4, 5]


def test_a_qpcs_own_partition_config_sets_its_num_devices(server: None, tmp_path: Path) -> None:
    """QEfficient's compile writes mdp_ts_<N>.json beside specializations.json; its devices are the QPC's count."""
    qpc = tmp_path / "qpc-abc" / "qpc"
    qpc.mkdir(parents=True)
    (qpc / "programqpc.bin").write_bytes(b"\0")
    (qpc.parent / "specializations.json").write_text('{"specializations": [{"batch_size": "1", "seq_len": "32", '
                                                     '"ctx_len": "128"}]}')
    (qpc.parent / "mdp_ts_4.json").write_text(json.dumps({"connections": [{"devices": [0, 1, 2, 3], "type": "p2p"}],
                                                          "partitions": [{"name": "Partition0", "devices": [
                                                              {"deviceId": d, "numCores": 16} for d in range(4)]}]}))
    assert devices.compiled_devices(str(tmp_path / "qpc-abc"), compile_config.validate({})) == \
        (4, f"the QPC {tmp_path / 'qpc-abc'} was compiled for 4")
    result = CliRunner().invoke(repo_group, ["gen", "--model_name", "q", "--aic_binary_dir", str(tmp_path / "qpc-abc"),
                                             "--hf_model_name", "embedded", "--device-groups", "0,3", "-o",
                                             str(tmp_path / "out")])
    assert result.exit_code == 2 and "has 2 SoCs but the model runs on num_devices 4 (the QPC" in result.stderr


@pytest.mark.parametrize(("edit", "needle"), [
    (("Status:Ready", "Status:Error", 1), "QID 0 is Error, not Ready"),
    (("Nsp Free:16", "Nsp Free:4", 1), "QID 0 has 4 of 16 NSPs free (0 networks active)"),
])
def test_a_soc_that_is_not_ready_or_busy_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     edit: tuple[str, str, int], needle: str) -> None:
    qaic_util(monkeypatch, tmp_path, SERVER.read_text().replace(*edit))
    code, _, err = gen(tmp_path, "--device-groups", "0,3")
    assert code == 2 and needle in err, err
    assert "QID 9 does not exist (qaic-util lists QIDs 0, 1, 2, 3, 4, 5, 6, 7)" in gen(tmp_path, "--device-groups",
                                                                                       "6,9")[2]


def test_without_qaic_util_the_groups_are_said_unchecked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
    code, _, err = gen(tmp_path, "--device-groups", "0,1;2,3")
    assert code == 0 and "note: device groups 0,1;2,3 not checked against the SoCs (no card: qaic-util not found" \
        in err, err


def test_a_soc_in_two_models_groups_is_refused_before_serving(server: None, tmp_path: Path) -> None:
    assert gen(tmp_path, "--device-groups", "0,3;6,7")[0] == 0
    config = tmp_path / "cc.json"
    result = CliRunner().invoke(repo_group, ["gen", "--model_name", "other", "--hf_model_name", "embedded",
                                             "--compile_config_path", str(config), "--device-groups", "1,2;7,5",
                                             "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    with pytest.raises(devices.DeviceError, match="QID 7 is in device groups of both other and smollm2_kv"):
        device_review(list_models(tmp_path / "out"), devices.query())
    listed = list_models(tmp_path / "out")
    assert [(m.name, m.instances, m.device_groups, m.valid) for m in listed] == \
        [("other", 2, "1,2;7,5", True), ("smollm2_kv", 2, "0,3;6,7", True)]


# --------------------------------------------------------------------------- num_devices


def test_num_devices_reaches_qefficients_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recording stand-in of QEfficient's QEFFAutoModelForCausalLM (QEfficient is not installable here)."""
    calls: list[tuple[str, dict]] = []

    class Recorder:
        @classmethod
        def from_pretrained(cls, name: str, **kwargs: object) -> Recorder:
            calls.append(("from_pretrained", {"name": name, **kwargs}))
            return cls()

        def compile(self, **kwargs: object) -> str:
            calls.append(("compile", kwargs))
            return "/qpcs/qpc"

    monkeypatch.setitem(sys.modules, "QEfficient", types.SimpleNamespace(QEFFAutoModelForCausalLM=Recorder))
    settings = BackendSettings(hf_model_name="org/model", compile=compile_config.validate({"num_devices": 2}))
    assert build._compile_qpc(settings, lambda _: None) == "/qpcs/qpc"
    assert calls[1][0] == "compile" and calls[1][1]["num_devices"] == 2 and calls[1][1]["ctx_len"] == 128


def test_the_estimate_is_per_soc_and_a_refusal_names_the_smallest_num_devices() -> None:
    spec = dataclasses.replace(SAMPLES["smollm2_kv"], engine="qaic",
                               compile={"ctx_len": 131072, "full_batch_size": 16, "num_devices": 2})
    one = memory.estimate(spec, None, 1)
    two = memory.estimate(spec, None)
    assert two is not None and one is not None and two.socs == 2 and two.weights == one.weights / 2
    assert two.kv_cache == one.kv_cache * 2 / 3  # 3 KV heads: 2 on one SoC of 2
    assert "on each of 2 SoCs of a Cloud AI 100 card" in str(two) and "3 KV heads do not split 2 ways" in str(two)
    with pytest.raises(RepoError, match=r"more than the 32 GB of a Cloud AI 100 device: set num_devices 3 \(the "
                                        r"smallest that fits, of the 8 SoCs"):
        memory.check(spec, print, None, BIG_MACHINE, socs=(8, "the 8 SoCs qaic-util lists here"))
    with pytest.raises(RepoError, match="it fits on no SoC count up to the 2 SoCs"):
        memory.check(spec, print, None, BIG_MACHINE, socs=(2, "the 2 SoCs qaic-util lists here"))
    memory.check(dataclasses.replace(spec, compile={**spec.compile, "num_devices": 4}), print, None, BIG_MACHINE)


def test_the_socs_to_try_come_from_qaic_util(server: None) -> None:
    assert memory.machine_socs() == (8, "the 8 SoCs qaic-util lists here")


def test_the_tui_form_writes_one_instance_per_group(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from textual.widgets import Input
    from tui_pilot import SIZE, run, until

    from console.tui.app import QaicConsoleApp
    from console.tui.widgets.generator_form import GeneratorForm

    qaic_util(monkeypatch, tmp_path, SERVER.read_text())
    (tmp_path / "cc.json").write_text('{"num_devices": 2}')

    async def go() -> None:
        app = QaicConsoleApp()
        async with app.run_test(size=SIZE) as pilot:
            form = app.query_one(GeneratorForm)
            form.repository = lambda: tmp_path / "repo"
            for selector, text in (("#gen-name", "pair"), ("#gen-hf", "embedded"),
                                   ("#gen-compile", str(tmp_path / "cc.json")), ("#gen-groups", "0,3;6,7")):
                form.query_one(selector, Input).value = text
            assert form.request()["device_groups"] == "0,3;6,7"
            form.query_one("#generate").press()
            await until(pilot, lambda: any(t.startswith(("wrote", "error")) or "error" in s for s, t in app.notices),
                        120, "the generator")
            assert any(t.startswith(f"wrote {tmp_path / 'repo' / 'pair'}") for _, t in app.notices), app.notices

    run(go)
    assert "count: 2" in (tmp_path / "repo" / "pair" / "config.pbtxt").read_text()


def test_serve_refuses_a_soc_in_two_models_before_starting(server: None, tmp_path: Path) -> None:
    from console.cli import main as console_main

    assert gen(tmp_path, "--device-groups", "0,3;6,7")[0] == 0
    result = CliRunner().invoke(repo_group, ["gen", "--model_name", "other", "--hf_model_name", "embedded",
                                             "--compile_config_path", str(tmp_path / "cc.json"), "--device-groups",
                                             "1,2;4,3", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0 and "(4,3) spans board serials" in result.stderr, result.stderr
    served = CliRunner().invoke(console_main, ["serve", "--model-repository", str(tmp_path / "out")])
    assert served.exit_code != 0 and "device groups: QID 3 is in device groups of both other and smollm2_kv" in \
        served.output and "tritonserver" not in served.output.split("device groups:")[0], served.output


def test_the_tables_show_each_instance_with_its_socs() -> None:
    from console.clients import ModelInfo
    from console.core.controller import ModelRow, Snapshot
    from console.tui.widgets.server_rows import model_row
    from console.web.views import model_table

    info = ModelInfo("m", True, True, parameters={"device_groups": "0,1;2,3"})
    assert info.instances == "instance 0: QIDs 0,1 · instance 1: QIDs 2,3"
    assert ModelInfo("m", True, True).instances == ""
    row = ModelRow("m", "READY", "", info)
    assert model_row(row)[-1] == "instance 0: QIDs 0,1 · instance 1: QIDs 2,3"
    assert model_table(Snapshot("ready", "", models=(row,)))["reason"].tolist() == [info.instances]


def test_a_levels_tokens_are_split_by_instance_from_the_metrics() -> None:
    from console.metrics import Scrape, Window

    def page(zero: int, one: int) -> Scrape:
        return Scrape.parse("# TYPE qaic_generation_tokens_total counter\n"
                            f'qaic_generation_tokens_total{{model="m",version="1",instance="0"}} {zero}\n'
                            f'qaic_generation_tokens_total{{model="m",version="1",instance="1"}} {one}\n')

    window = Window(page(10, 4), page(74, 68), "m")
    assert window.instances("qaic_generation_tokens") == {"0": 64.0, "1": 64.0}
    assert window.counter("qaic_generation_tokens") == 128.0  # the model's total, over its instances
