"""The Prometheus rules that ship and the Grafana board: both current with console/fleet/promql.py, and the rules
checked and unit-tested by Prometheus's own ``promtool`` on series written here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from console.fleet import rules

INTERVAL = "15s"
A, B = "127.0.0.1:18002", "127.0.0.1:28002"  # two servers' targets (Prometheus's instance label)


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not found: Debian's prometheus package has it (scripts/setup.sh --test installs it)")
    return found


def series(metric: str, instance: str, values: str, **labels: str) -> dict[str, str]:
    names = {"model": "m", "version": "1", "job": "qaic", "instance": instance, **labels}
    return {"series": metric + "{" + ",".join(f'{k}="{v}"' for k, v in names.items()) + "}", "values": values}


def alert(instance: str, summary: str, description: str) -> dict:
    return {"exp_labels": {"severity": "warning", "model": "m", "instance": instance},
            "exp_annotations": {"summary": f"m on {instance}{summary}", "description": description}}


def described(name: str) -> str:
    return next(r["annotations"]["description"] for r in rules.alerts() if r["alert"] == name)


def test_the_shipped_rules_and_board_are_written_from_the_promql_module() -> None:
    assert rules.RULES_FILE.read_text() == rules.rules_text(), "run: python -m console.fleet.rules"
    assert rules.BOARD_FILE.read_text() == rules.board_text(), "run: python -m console.fleet.rules"


def test_promtool_checks_the_rules_and_their_unit_tests_pass(tmp_path: Path) -> None:
    checked = subprocess.run([promtool(), "check", "rules", str(rules.RULES_FILE)], capture_output=True, text=True,
                             timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    inputs = [series(metric, instance, values) for metric, instance, values in (
        # tokens: A makes 1/s, B 2/s; A's decode counter starts again from zero at 5m (its backend restarted)
        ("qaic_generation_tokens_total", A, "0+15x40"), ("qaic_generation_tokens_total", B, "0+30x40"),
        ("qaic_decode_step_seconds_count", A, "0+10x19 0+10x20"), ("qaic_decode_step_seconds_count", B, "0+10x40"),
        # A's 8 slots all busy from the start; B uses 3 of 8
        ("qaic_num_requests_running", A, "8x40"), ("qaic_num_requests_running", B, "3x40"),
        ("qaic_slots", A, "8x40"), ("qaic_slots", B, "8x40"),
        # B fails a request a minute from 5m on; A never
        ("nv_inference_request_failure", A, "0x40"), ("nv_inference_request_failure", B, "0x19 1+0.25x20"),
        ("qaic_request_failure_total", A, "0x40"), ("qaic_request_failure_total", B, "0x40"),
    )]
    minute = rules.recorded
    tests = {"rule_files": [str(rules.RULES_FILE)], "evaluation_interval": "15s", "tests": [{
        "interval": INTERVAL,
        "input_series": inputs,
        "promql_expr_test": [
            {"expr": minute("model", "tokens_per_s"), "eval_time": "4m",
             "exp_samples": [{"labels": f'{minute("model", "tokens_per_s")}{{model="m"}}', "value": 3}]},
            {"expr": minute("model_pod", "tokens_per_s"), "eval_time": "4m",
             "exp_samples": [{"labels": f'{minute("model_pod", "tokens_per_s")}{{model="m",instance="{i}"}}',
                              "value": v} for i, v in ((A, 1), (B, 2))]},
            {"expr": minute("model", "running"), "eval_time": "4m",
             "exp_samples": [{"labels": f'{minute("model", "running")}{{model="m"}}', "value": 11}]},
        ],
        "alert_rule_test": [
            {"alertname": "QaicSlotsSaturated", "eval_time": "4m", "exp_alerts": []},  # not yet 5 minutes
            {"alertname": "QaicSlotsSaturated", "eval_time": "6m", "exp_alerts": [
                alert(A, ": every slot busy for 5m", described("QaicSlotsSaturated"))]},
            {"alertname": "QaicModelFailingRequests", "eval_time": "4m", "exp_alerts": []},
            {"alertname": "QaicModelFailingRequests", "eval_time": "7m", "exp_alerts": [
                alert(B, " is failing requests", described("QaicModelFailingRequests"))]},
            {"alertname": "QaicBackendRestarted", "eval_time": "4m", "exp_alerts": []},
            {"alertname": "QaicBackendRestarted", "eval_time": "6m", "exp_alerts": [
                alert(A, ": the backend restarted", described("QaicBackendRestarted"))]},
        ],
    }]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    tested = subprocess.run([promtool(), "test", "rules", str(tmp_path / "tests.yaml")], capture_output=True,
                            text=True, timeout=120, check=False)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
