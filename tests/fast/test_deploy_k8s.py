"""``qaic-console deploy k8s``: the manifests it writes for the embedded samples validate offline, the built-in kinds
against the Kubernetes API schemas (kubernetes-validate, strict: no unknown field) and the custom ones against
their CRDs' published OpenAPI schemas (tests/fixtures/crds, SOURCE.md) with jsonschema (and no field the API
server would prune)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from console.cli import main
from console.fleet import promql, rules
from console.fleet.manifests import DEVICE_RESOURCE, POOL_LABEL
from repo_gen.samples import write_samples

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "crds"
KUBERNETES = "1.30.0"
CRD_FILES = {"ScaledObject": "keda.sh_scaledobjects.yaml", "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
             "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml"}


def crd_schema(kind: str, api_version: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / CRD_FILES[kind]).read_text())
    assert crd["spec"]["names"]["kind"] == kind
    version = api_version.rsplit("/", 1)[1]
    return next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == version)


def pruned(document: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """The fields of ``document`` that ``schema`` does not know (the API server would drop them silently)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(document, dict) and "properties" in schema:
        out = [f"{path}.{k}" for k in document if k not in schema["properties"]]
        return out + [p for k, v in document.items() if k in schema["properties"]
                      for p in pruned(v, schema["properties"][k], f"{path}.{k}")]
    if isinstance(document, list) and "items" in schema:
        return [p for i, v in enumerate(document) for p in pruned(v, schema["items"], f"{path}[{i}]")]
    return []


def validate(document: dict[str, Any]) -> None:
    kind = document["kind"]
    if kind in CRD_FILES:
        schema = crd_schema(kind, document["apiVersion"])
        # OpenAPI's schema read as JSON Schema (not checked as one: its patterns are Go's, e.g. a (?i) mid-pattern)
        jsonschema.Draft7Validator(schema).validate(document)
        assert pruned(document, schema) == [], kind
    else:
        kubernetes_validate.validate(document, KUBERNETES, strict=True)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two stream/batch samples, one engine set to the card with two instances (two SoCs)."""
    repo = tmp_path_factory.mktemp("repo")
    write_samples(("smollm2_kv", "smollm2_decoupled"), repo)
    config = repo / "smollm2_kv" / "config.pbtxt"
    text = config.read_text().replace("{ count: 1 kind: KIND_CPU }", "{ count: 2 kind: KIND_CPU }")
    config.write_text(text.replace('key: "engine" value: { string_value: "auto" }',
                                   'key: "engine" value: { string_value: "qaic" }'))
    decoupled = repo / "smollm2_decoupled" / "config.pbtxt"
    decoupled.write_text(decoupled.read_text().replace('key: "engine" value: { string_value: "auto" }',
                                                       'key: "engine" value: { string_value: "cpu" }'))
    return repo


def deploy(repository: Path, out: Path, *options: str) -> dict[str, dict[str, Any]]:
    result = CliRunner().invoke(main, ["deploy", "k8s", str(repository), "-o", str(out), *options])
    assert result.exit_code == 0, result.output
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(out.glob("*.yaml"))}


def test_the_manifests_validate_and_say_what_the_cluster_needs(repository: Path, tmp_path: Path) -> None:
    written = deploy(repository, tmp_path / "k8s", "--replicas", "2", "--repository-from", "pvc:models",
                     "--api-key-secret", "front-key")
    assert {d["kind"] for d in written.values()} == {"Deployment", "Service", "PodMonitor", "PrometheusRule",
                                                     "ScaledObject", "PodDisruptionBudget"}
    for document in written.values():
        validate(document)
    pod = written["deployment.yaml"]["spec"]["template"]
    triton, front = pod["spec"]["containers"]
    assert triton["resources"]["limits"] == {DEVICE_RESOURCE: "2"}  # 2 card instances; the CPU model takes none
    assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "models"
    assert front["command"][:2] == ["qaic-console", "openai"] and "--no-api-key" not in front["command"]
    assert front["command"][front["command"].index("--metrics-url") + 1] == "127.0.0.1:8002"  # its own pod's
    assert front["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "front-key"
    assert pod["metadata"]["labels"][POOL_LABEL] == "qaic-triton"
    assert written["deployment.yaml"]["spec"]["replicas"] == 2
    assert {p["name"] for p in written["service.yaml"]["spec"]["ports"]} == {"http", "grpc", "metrics", "openai"}
    assert written["rules.yaml"]["spec"] == rules.rules()
    trigger = written["scaledobject.yaml"]["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus" and "qaic_num_requests_waiting" in trigger["metadata"]["query"]
    assert written["scaledobject.yaml"]["spec"]["minReplicaCount"] == 2


def test_without_the_operator_pods_carry_scrape_annotations_and_the_rules_a_configmap(repository: Path,
                                                                                      tmp_path: Path) -> None:
    written = deploy(repository, tmp_path / "plain", "--no-operator")
    assert "podmonitor.yaml" not in written
    for document in written.values():
        validate(document)
    annotations = written["deployment.yaml"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "8002"
    assert written["rules.yaml"]["data"]["qaic-console-rules.yaml"] == rules.RULES_FILE.read_text()
    assert "volumes" not in written["deployment.yaml"]["spec"]["template"]["spec"] or \
        written["deployment.yaml"]["spec"]["template"]["spec"]["volumes"] == []  # the image holds the repository
    assert "--no-api-key" in written["deployment.yaml"]["spec"]["template"]["spec"]["containers"][1]["command"]


def test_the_checks_catch_what_a_cluster_would_refuse_or_drop(repository: Path, tmp_path: Path) -> None:
    written = deploy(repository, tmp_path / "k8s")
    scaled = written["scaledobject.yaml"]
    with pytest.raises(jsonschema.ValidationError):
        validate({**scaled, "spec": {k: v for k, v in scaled["spec"].items() if k != "triggers"}})
    with pytest.raises(AssertionError):
        validate({**scaled, "spec": {**scaled["spec"], "pollingIntervall": 30}})
    with pytest.raises(kubernetes_validate.ValidationError):
        validate({**written["poddisruptionbudget.yaml"], "spek": {}})


def test_bad_options_are_refused_before_anything_is_written(repository: Path, tmp_path: Path) -> None:
    for options, said in ((["--repository-from", "nfs:x"], "--repository-from must be pvc:NAME or image"),
                          (["--replicas", "0"], "--replicas")):
        result = CliRunner().invoke(main, ["deploy", "k8s", str(repository), "-o", str(tmp_path / "out"), *options])
        assert result.exit_code != 0 and said in result.output, result.output
    missing = CliRunner().invoke(main, ["deploy", "k8s", str(tmp_path / "nothing"), "-o", str(tmp_path / "out")])
    assert missing.exit_code == 1 and "no model repository at" in missing.output
    assert not (tmp_path / "out").exists()


def test_the_autoscaler_asks_for_the_waiting_requests_of_this_deployments_pods() -> None:
    from console.fleet.manifests import Options, waiting_query

    query = waiting_query(Options("llm", "serving", Path(".")))
    assert query == 'sum (qaic_num_requests_waiting{namespace="serving", pod=~"llm-.*"})'
    assert query == promql.expr("waiting", (), 'namespace="serving", pod=~"llm-.*"')


def test_a_model_of_device_groups_asks_for_every_soc_of_its_groups(tmp_path: Path) -> None:
    """Two instances tensor-sliced over two SoCs each (``--device-groups "0,1;2,3"``): four ``qualcomm.com/qaic``."""
    repo = tmp_path / "repo"
    write_samples(("smollm2_kv",), repo)
    config = repo / "smollm2_kv" / "config.pbtxt"
    text = config.read_text().replace("{ count: 1 kind: KIND_CPU }", "{ count: 2 kind: KIND_CPU }")
    text = text.replace('key: "engine" value: { string_value: "auto" }',
                        'key: "engine" value: { string_value: "qaic" }')
    config.write_text(text + 'parameters: { key: "device_groups" value: { string_value: "0,1;2,3" } }\n')
    written = deploy(repo, tmp_path / "k8s")
    triton = written["deployment.yaml"]["spec"]["template"]["spec"]["containers"][0]
    assert triton["resources"]["limits"] == {DEVICE_RESOURCE: "4"}
    config.write_text(text + 'parameters: { key: "device_groups" value: { string_value: "0,1;1,2" } }\n')
    refused = CliRunner().invoke(main, ["deploy", "k8s", str(repo), "-o", str(tmp_path / "bad")])
    assert refused.exit_code == 1 and "QID 1 is in groups 0 and 1" in refused.output
    assert not (tmp_path / "bad").exists()
