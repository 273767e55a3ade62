"""``qaic-console deploy k8s``: the manifests it writes for the embedded samples validate offline, the built-in kinds
against the Kubernetes API schemas (kubernetes-validate, strict: no unknown field) and the custom ones against their
CRDs' published OpenAPI schemas (tests/fixtures/crds, SOURCE.md) with jsonschema (and no field the API server would
prune), the endpoint picker's configuration against its Go types. Each pod is locked down as ``serve`` is
(tests/e2e/test_fleet.py runs one), sized from its models, and drains when stopped."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from backend_model.contract import compile_config
from console.cli import main
from console.fleet import pool, promql, rules, sizing
from console.fleet.manifests import DEVICE_RESOURCE, POOL_LABEL
from console.server.arguments import restricted_arguments, server_arguments
from console.server.guard import SECRET
from repo_gen import memory
from repo_gen.samples import write_samples
from repo_gen.writer import ModelSpec

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "crds"
KUBERNETES = "1.30.0"
CRD_FILES = {"ScaledObject": "keda.sh_scaledobjects.yaml", "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
             "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
             "InferencePool": "inference.networking.k8s.io_inferencepools.yaml"}


# The endpoint picker's EndpointPickerConfig has no published schema: it is Go types, decoded strictly (an unknown
# field is an error), in llm-d/llm-d-router at v0.9.0 (commit 5f4e762f341a): apix/config/v1alpha1/
# endpointpickerconfig_types.go, and the parameters of the plugins the manifests name (pkg/epp/framework/plugins/
# datalayer/source/metrics/datasource.go, datalayer/extractor/metrics/factories.go). Their fields, read (not copied):
def closed(*required: str, **properties: Any) -> dict[str, Any]:
    """An object of these fields only, as Go's strict decoder reads a struct."""
    return {"type": "object", "additionalProperties": False, "required": list(required), "properties": properties}


TEXT, REF = {"type": "string"}, closed("pluginRef", pluginRef={"type": "string"})
ENGINE = closed("name", name=TEXT, queuedRequestsSpec=TEXT, runningRequestsSpec=TEXT, kvUsageSpec=TEXT, loraSpec=TEXT,
                cacheInfoSpec=TEXT, cacheBlockSizeLabelName=TEXT, cacheNumBlocksLabelName=TEXT,
                cacheBlockSizeSpec=TEXT, cacheNumBlocksSpec=TEXT,
                customMetrics={"type": "array", "items": closed("attributeKey", "metricSpec", attributeKey=TEXT,
                                                                 metricSpec=TEXT)})
PARAMETERS = {"metrics-data-source": closed(scheme={"enum": ["http", "https"]}, path=TEXT,
                                            insecureSkipVerify={"type": "boolean"}),
              "core-metrics-extractor": closed(engineLabelKey=TEXT, defaultEngine=TEXT,
                                               engineConfigs={"type": "array", "items": ENGINE})}
PLUGIN_TYPES = [*PARAMETERS, "queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer",
                "lora-affinity-scorer", "max-score-picker"]  # the registered types the manifests use
PLUGIN = {"allOf": [closed("type", name=TEXT, type={"enum": PLUGIN_TYPES}, parameters={"type": "object"}),
                    *({"if": {"properties": {"type": {"const": kind}}}, "then": {"properties": {"parameters": schema}}}
                      for kind, schema in PARAMETERS.items())]}
PICKER_CONFIG = closed(
    "apiVersion", "kind", "plugins", "schedulingProfiles", apiVersion={"const": "llm-d.ai/v1alpha1"},
    kind={"const": "EndpointPickerConfig"}, featureGates={"type": "array", "items": TEXT},
    plugins={"type": "array", "items": PLUGIN},
    schedulingProfiles={"type": "array", "items": closed("name", "plugins", name=TEXT, plugins={
        "type": "array", "items": closed("pluginRef", pluginRef=TEXT, weight={"type": "number"})})},
    dataLayer=closed(injectDefaults={"type": "boolean"}, discovery=REF, sources={"type": "array", "items": closed(
        "pluginRef", pluginRef=TEXT, extractors={"type": "array", "items": REF})}),
    flowControl={"type": "object"}, requestHandler={"type": "object"}, saturationDetector=REF, parser=REF)


def crd_schema(kind: str, api_version: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / CRD_FILES[kind]).read_text())
    assert crd["spec"]["names"]["kind"] == kind
    version = api_version.rsplit("/", 1)[1]
    return next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == version)


def fields(document: Any, schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, Any, dict[str, Any] | None]]:
    """Each value of ``document`` with its path and its schema (None where ``schema`` does not know the field)."""
    yield path, document, schema
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(document, dict) and "properties" in schema:
        for key, value in document.items():
            if key in schema["properties"]:
                yield from fields(value, schema["properties"][key], f"{path}.{key}")
            else:
                yield f"{path}.{key}", value, None
    elif isinstance(document, list) and "items" in schema:
        for i, value in enumerate(document):
            yield from fields(value, schema["items"], f"{path}[{i}]")


# The CRDs' CEL rules (x-kubernetes-validations, which jsonschema does not read), each as Python; a rule missing
# here fails the check, so a CRD updated with a new rule says so
CEL_RULES: dict[str, Callable[[Any], bool]] = {
    "self.kind != 'Service' || has(self.port)": lambda ref: ref.get("kind", "Service") != "Service" or "port" in ref,
    "self.all(p1, self.exists_one(p2, p1.number==p2.number))":
        lambda ports: len({p["number"] for p in ports}) == len(ports),
    "!has(self.minReplicaCount) || self.minReplicaCount <= (has(self.maxReplicaCount) ? self.maxReplicaCount : 100)":
        lambda spec: spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100)}


def crd_problems(document: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The fields the API server would drop silently, and the CEL rules it would refuse ``document`` by."""
    out = []
    for path, value, known in fields(document, schema):
        if known is None:
            out.append(f"{path}: unknown")
        for rule in (known or {}).get("x-kubernetes-validations", ()):
            if not CEL_RULES[rule["rule"]](value):
                out.append(f"{path}: {rule['message']}")
    return out


def validate(document: dict[str, Any]) -> None:
    kind = document["kind"]
    if kind in CRD_FILES:
        schema = crd_schema(kind, document["apiVersion"])
        # OpenAPI's schema read as JSON Schema (not checked as one: its patterns are Go's, e.g. a (?i) mid-pattern)
        jsonschema.Draft7Validator(schema).validate(document)
        assert crd_problems(document, schema) == [], kind
    else:
        kubernetes_validate.validate(document, KUBERNETES, strict=True)


def picker_config(written: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The endpoint picker's configuration in the ConfigMap ``deploy k8s`` wrote, checked against its Go types."""
    config = yaml.safe_load(written["epp-config.yaml"]["data"][pool.CONFIG_FILE])
    jsonschema.Draft7Validator(PICKER_CONFIG).validate(config)
    return config  # type: ignore[no-any-return]


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
                     "--secret", "front-key")
    assert {d["kind"] for d in written.values()} == {"Deployment", "Service", "NetworkPolicy", "PodMonitor",
                                                     "PrometheusRule", "ScaledObject", "PodDisruptionBudget",
                                                     "InferencePool", "ConfigMap"}
    for document in written.values():
        validate(document)
    pod = written["deployment.yaml"]["spec"]["template"]
    triton, front = pod["spec"]["containers"]
    assert triton["resources"]["limits"][DEVICE_RESOURCE] == "2"  # 2 card instances; the CPU model takes none
    assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "models"
    assert front["command"][:2] == ["qaic-console", "openai"] and "--no-api-key" not in front["command"]
    assert front["command"][front["command"].index("--metrics-url") + 1] == "127.0.0.1:8002"  # its own pod's
    assert front["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "front-key"
    assert pod["metadata"]["labels"][POOL_LABEL] == "qaic-triton"
    assert written["deployment.yaml"]["spec"]["replicas"] == 2
    assert {p["name"] for p in written["service.yaml"]["spec"]["ports"]} == {"http", "grpc", "openai"}
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
    volumes = written["deployment.yaml"]["spec"]["template"]["spec"]["volumes"]
    assert [v for v in volumes if "emptyDir" not in v] == []  # the image holds the repository


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
    assert triton["resources"]["limits"][DEVICE_RESOURCE] == "4"
    config.write_text(text + 'parameters: { key: "device_groups" value: { string_value: "0,1;1,2" } }\n')
    refused = CliRunner().invoke(main, ["deploy", "k8s", str(repo), "-o", str(tmp_path / "bad")])
    assert refused.exit_code == 1 and "QID 1 is in groups 0 and 1" in refused.output
    assert not (tmp_path / "bad").exists()


def containers(written: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    return tuple(written["deployment.yaml"]["spec"]["template"]["spec"]["containers"])  # type: ignore[return-value]


def test_tritonserver_gets_the_restrictions_serve_gives_with_the_key_of_the_secret(repository: Path,
                                                                                   tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["deploy", "k8s", str(repository), "-o", str(tmp_path / "k8s")])
    assert result.exit_code == 0, result.output
    written = {p.name: yaml.safe_load(p.read_text()) for p in (tmp_path / "k8s").glob("*.yaml")}
    triton, front = containers(written)
    keys = written["secret.yaml"]["stringData"]
    assert written["secret.yaml"]["metadata"]["name"] == "qaic-triton-keys" and len(keys["triton-key"]) >= 40
    assert (tmp_path / "k8s" / "secret.yaml").stat().st_mode & 0o777 == 0o600
    assert not any(key in result.output for key in keys.values())
    assert "kubectl -n default get secret qaic-triton-keys -o jsonpath='{.data.api-key}' | base64 -d" in result.output
    restrictions = restricted_arguments("$(QAIC_CONSOLE_TRITON_KEY)")
    assert triton["command"][-len(restrictions):] == restrictions and "--allow-vertex-ai=false" in restrictions
    serve = server_arguments(Path("tritonserver"), repository, (), "127.0.0.1", (1, 2, 3), 0, None, ())
    assert all(a in serve for a in restricted_arguments(SECRET))  # serve's, from the same place
    assert {"name": "QAIC_CONSOLE_TRITON_KEY", "valueFrom": {"secretKeyRef": {"name": "qaic-triton-keys",
                                                                              "key": "triton-key"}}} in triton["env"]
    assert not any("TRITON_KEY" in str(e) for e in front["env"])  # the front needs no administrative API
    again = deploy(repository, tmp_path / "k8s")  # a new run keeps the keys the running pods hold
    assert again["secret.yaml"]["stringData"] == keys
    other = deploy(repository, tmp_path / "other")
    assert other["secret.yaml"]["stringData"]["triton-key"] != keys["triton-key"]


def test_the_front_needs_the_key_of_the_secret_unless_told_otherwise(repository: Path, tmp_path: Path) -> None:
    _, front = containers(deploy(repository, tmp_path / "k8s"))
    assert "--no-api-key" not in front["command"] and front["command"][front["command"].index("--host") + 1] == \
        "0.0.0.0"
    assert {"name": "QAIC_CONSOLE_API_KEY", "valueFrom": {"secretKeyRef": {"name": "qaic-triton-keys",
                                                                           "key": "api-key"}}} in front["env"]
    result = CliRunner().invoke(main, ["deploy", "k8s", str(repository), "-o", str(tmp_path / "open"),
                                       "--no-api-key"])
    assert result.exit_code == 0 and "warning: --no-api-key: the OpenAI front answers anyone" in result.output
    _, front = containers({p.name: yaml.safe_load(p.read_text()) for p in (tmp_path / "open").glob("*.yaml")})
    assert "--no-api-key" in front["command"] and not any("API_KEY" in str(e) for e in front["env"])


def test_the_metrics_port_is_published_to_the_scraper_only(repository: Path, tmp_path: Path) -> None:
    written = deploy(repository, tmp_path / "k8s", "--scraper-namespace", "observability")
    assert "metrics" not in {p["name"] for p in written["service.yaml"]["spec"]["ports"]}
    clients, scraper = written["networkpolicy.yaml"]["spec"]["ingress"]
    assert {p["port"] for p in clients["ports"]} == {"http", "grpc", "openai"} and "from" not in clients
    assert scraper["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert scraper["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "observability"}}}]


def test_every_container_is_sized_from_the_models_and_runs_without_privileges(repository: Path,
                                                                             tmp_path: Path) -> None:
    """The fixture: two card instances (their weights in the card's memory) and one int4 CPU instance."""
    written = deploy(repository, tmp_path / "k8s")
    pod = written["deployment.yaml"]["spec"]["template"]["spec"]
    triton, front = pod["containers"]
    compiled = compile_config.load(repository / "smollm2_decoupled" / "compile_config.json")
    cpu_model = memory.estimate(ModelSpec("m", engine="cpu", hf_model_name="embedded", precision="int4",
                                          compile=compiled), None)
    assert cpu_model is not None
    expected = sizing.SERVER_MEMORY + 3 * sizing.STUB_MEMORY + cpu_model.total * sizing.HEADROOM
    assert triton["resources"]["requests"]["memory"] == f"{-(-expected // 2**20):.0f}Mi"
    assert triton["resources"]["requests"]["cpu"] == str(1 + 2 + sizing.AUTO_THREADS)
    for container in (triton, front):
        resources = container["resources"]
        assert resources["requests"] == resources["limits"] and {"cpu", "memory"} <= set(resources["requests"])
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                                "readOnlyRootFilesystem": True}
        assert {"name": f"{container['name']}-tmp", "mountPath": "/tmp"} in container["volumeMounts"]
        assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": sizing.ROUTING_DELAY}}
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    writable = deploy(repository, tmp_path / "writable", "--writable-root")
    assert not containers(writable)[0]["securityContext"]["readOnlyRootFilesystem"]


def test_the_grace_period_covers_the_longest_stream_the_models_allow(repository: Path, tmp_path: Path) -> None:
    """KV-cache models stream up to 600 s (the consoles' and the front's timeout); a causal one up to 6000 s."""
    for models, drain in ((("smollm2_kv",), 600), (("smollm2_kv", "smollm2_causal_decoupled"), 6000)):
        repo = tmp_path / f"repo{drain}"
        write_samples(models, repo)
        written = deploy(repo, tmp_path / f"k8s{drain}")
        pod = written["deployment.yaml"]["spec"]["template"]["spec"]
        triton, front = pod["containers"]
        assert f"--exit-timeout-secs={drain}" in triton["command"]
        assert front["command"][front["command"].index("--drain") + 1] == str(drain)
        assert pod["terminationGracePeriodSeconds"] == sizing.ROUTING_DELAY + drain + sizing.UNLOAD_MARGIN


def test_a_host_model_that_cannot_be_estimated_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_samples(("smollm2_kv",), repo)
    config = repo / "smollm2_kv" / "config.pbtxt"
    config.write_text(config.read_text().replace('key: "engine" value: { string_value: "auto" }',
                                                 'key: "engine" value: { string_value: "cpu" }')
                      .replace('key: "hf_model_name" value: { string_value: "embedded" }',
                               'key: "hf_model_name" value: { string_value: "nobody/not-here" }'))
    result = CliRunner().invoke(main, ["deploy", "k8s", str(repo), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1 and "smollm2_kv: its memory cannot be estimated" in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_an_embedding_model_is_sized_by_its_weights(tmp_path: Path) -> None:
    """The embedded MiniLM beside a chat sample: its compile config is read by its own schema, its memory is its
    fp32 weights on the CPU (all-MiniLM-L6-v2's safetensors: 90.9 MB), no KV cache."""
    from console.fleet.manifests import repository_models

    repo = tmp_path / "repo"
    write_samples(("smollm2_kv", "minilm_embedding"), repo)
    model, socs = repository_models(repo)["minilm_embedding"]
    found = memory.estimate(model.spec, None)
    assert found is not None and 85e6 < found.weights < 95e6 and found.kv_cache == 0 and socs == 1
    assert deploy(repo, tmp_path / "k8s")["deployment.yaml"]["kind"] == "Deployment"


def with_adapters(repository: Path, tmp_path: Path) -> Path:
    """A copy of ``repository`` whose first model serves two adapters."""
    import shutil

    repo = tmp_path / "lora-repo"
    shutil.copytree(repository, repo)
    config = repo / "smollm2_kv" / "config.pbtxt"
    adapters = json.dumps(json.dumps({"alpha": "adapters/alpha", "beta": "adapters/beta"}))
    parameter = f'parameters: {{ key: "lora_adapters" value: {{ string_value: {adapters} }} }}\n'
    config.write_text(config.read_text() + parameter)
    return repo


def test_an_inference_pool_routes_to_the_fronts_through_a_picker_reading_their_metrics(repository: Path,
                                                                                      tmp_path: Path) -> None:
    written = deploy(repository, tmp_path / "k8s")
    pool_, config = written["inferencepool.yaml"], written["epp-config.yaml"]
    template = written["deployment.yaml"]["spec"]["template"]
    labels, front = template["metadata"]["labels"], containers(written)[1]
    assert pool_["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert [p["number"] for p in pool_["spec"]["targetPorts"]] == [p["containerPort"] for p in front["ports"]]
    assert pool_["spec"]["endpointPickerRef"]["name"] == "qaic-triton-epp"
    assert config["metadata"]["name"] == "qaic-triton-epp-config"
    picker = picker_config(written)
    assert picker["kind"] == "EndpointPickerConfig" and picker["apiVersion"] == "llm-d.ai/v1alpha1"
    extractor = next(p["parameters"] for p in picker["plugins"] if p["type"] == "core-metrics-extractor")
    [engine] = extractor["engineConfigs"]
    assert labels[extractor["engineLabelKey"]] == engine["name"] == "qaic-console"
    assert engine["loraSpec"] == "" and "lora-affinity-scorer" not in str(picker)  # no adapter served
    referenced = {p["pluginRef"] for profile in picker["schedulingProfiles"] for p in profile["plugins"]}
    sources = {s["pluginRef"] for s in picker["dataLayer"]["sources"]}
    assert referenced | sources <= {p["type"] for p in picker["plugins"]}


def test_with_adapters_the_picker_reads_the_lora_gauge_and_scores_affinity(repository: Path, tmp_path: Path) -> None:
    written = deploy(with_adapters(repository, tmp_path), tmp_path / "k8s")
    validate(written["inferencepool.yaml"])
    picker = picker_config(written)
    [engine] = next(p for p in picker["plugins"] if p["type"] == "core-metrics-extractor")["parameters"][
        "engineConfigs"]
    assert engine["loraSpec"] == "vllm:lora_requests_info"
    assert {"pluginRef": "lora-affinity-scorer", "weight": 1} in picker["schedulingProfiles"][0]["plugins"]


def test_the_pool_check_catches_what_the_crd_refuses(repository: Path, tmp_path: Path) -> None:
    written = deploy(repository, tmp_path / "k8s")
    pool_ = written["inferencepool.yaml"]
    spec, ref = pool_["spec"], pool_["spec"]["endpointPickerRef"]
    with pytest.raises(jsonschema.ValidationError):
        validate({**pool_, "spec": {**spec, "targetPorts": []}})
    with pytest.raises(jsonschema.ValidationError):
        validate({**pool_, "spec": {**spec, "endpointPickerRef": {"name": "x", "failureMode": "Open"}}})
    for wrong, said in (({**spec, "selectors": {}}, ".spec.selectors: unknown"),
                        ({**spec, "endpointPickerRef": {k: v for k, v in ref.items() if k != "port"}},
                         "port is required when kind is 'Service'"),
                        ({**spec, "targetPorts": spec["targetPorts"] * 2}, "port number must be unique")):
        with pytest.raises(AssertionError, match=said):
            validate({**pool_, "spec": wrong})


def test_the_picker_check_catches_what_its_strict_decoder_refuses(repository: Path, tmp_path: Path) -> None:
    written = deploy(repository, tmp_path / "k8s")
    config = picker_config(written)
    extractor = next(p for p in config["plugins"] if p["type"] == "core-metrics-extractor")
    engine = extractor["parameters"]["engineConfigs"][0]
    for wrong in ({**config, "schedulingProfile": []}, {**config, "plugins": [{"type": "queue-scorers"}]},
                  {**config, "plugins": [{**extractor, "parameters": {"engineConfigs": [{**engine, "loRASpec": ""}]}}]},
                  {**config, "plugins": [{"type": "metrics-data-source", "parameters": {"port": 8000}}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft7Validator(PICKER_CONFIG).validate(wrong)
