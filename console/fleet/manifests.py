"""The Kubernetes objects of ``qaic-console deploy k8s``: a model repository served by tritonserver pods.

A Deployment (tritonserver and the OpenAI front side by side; ``qualcomm.com/qaic`` limits, Qualcomm's device
plugin's resource, from the models' device groups; CPU and memory from :mod:`.sizing`), a Service, a
NetworkPolicy, the Secret of the keys, the Prometheus side (a PodMonitor and a PrometheusRule for the Prometheus
Operator, or scrape annotations and a ConfigMap of the rules), a KEDA ScaledObject scaling on the backend's queue,
a PodDisruptionBudget, and the Gateway API Inference Extension's InferencePool of the fronts with its endpoint
picker's configuration (:mod:`.pool`). Plain dicts; :mod:`.deploy` writes them.

Each pod is as locked down as one ``serve``: tritonserver's administrative APIs answer only callers with the key
of the Secret (the arguments ``serve`` gives, :func:`console.server.arguments.restricted_arguments`, with the key
as ``$(VAR)``, which Kubernetes expands from the container's environment), the front asks clients for the API key
of the Secret unless told not to, the containers run as a user without privileges on a read-only root, and a
stop lets the streams in flight finish.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from console.clients import ModelInfo
from console.server.arguments import restricted_arguments
from console.server.keys import FRONT_KEY_ENV as KEY_ENV
from repo_gen.staging import model_names

from . import pool, promql, rules
from .sizing import HOST_ENGINES, ROUTING_DELAY, Model, Sizing, SizingError, model_spec, sizing

DEVICE_RESOURCE = "qualcomm.com/qaic"  # one per SoC, as Qualcomm's Kubernetes device plugin advertises them
IMAGE = "ghcr.io/quic/cloud_ai_triton_server:1.21.2.0"  # a placeholder: the image must hold this backend's needs
FRONT_IMAGE = "qaic-console:latest"  # a placeholder: an image with qaic-console installed
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002, "openai": 9000}
CLIENT_PORTS = ("http", "grpc", "openai")  # what the Service publishes; metrics only to the scraper's namespace
POOL_LABEL = "qaic-console/inference-pool"  # an InferencePool's selector matches it (docs/deployment.md)
MODELS_AT = "/models"
API_KEY, TRITON_KEY = "api-key", "triton-key"  # the Secret's keys: the front's clients', tritonserver's own
TRITON_KEY_ENV = "QAIC_CONSOLE_TRITON_KEY"
USER = 1000  # the containers' user and group: not root (the images' files must be readable by others)
WRITABLE = "/tmp"  # each container's one writable folder (an emptyDir), also its HOME (caches: ~/.cache)


class ManifestError(Exception):
    """The repository or the options cannot make manifests (one line)."""


@dataclass(frozen=True)
class Options:
    name: str
    namespace: str
    repository: Path
    image: str = IMAGE
    front_image: str = FRONT_IMAGE
    repository_from: str = "image"  # "image" or "pvc:CLAIM"
    replicas: int = 1
    max_replicas: int = 4
    waiting_per_pod: int = 4
    operator: bool = True
    prometheus: str = "http://prometheus-operated.monitoring.svc:9090"
    secret: str = ""  # the name of a Secret holding API_KEY and TRITON_KEY; "": deploy k8s writes one
    api_key: bool = True  # False: the front serves without a key (--no-api-key)
    scraper_namespace: str = "monitoring"  # the namespace whose pods may read the metrics port
    read_only_root: bool = True


def devices_per_instance(config: Any) -> list[int]:
    """SoCs each model instance opens: none for the CPU engines, else its device group's size (the
    ``device_groups`` parameter, as ``--device-groups`` writes it), or one SoC an instance without groups."""
    from backend_model.contract.devices import PARAMETER, DeviceError, parse_groups

    engine = config.parameters["engine"].string_value if "engine" in config.parameters else "auto"
    instances = sum(group.count or 1 for group in config.instance_group) or 1
    if engine in HOST_ENGINES:
        return [0] * instances
    text = config.parameters[PARAMETER].string_value if PARAMETER in config.parameters else ""
    try:
        groups = parse_groups(text)
    except DeviceError as exc:
        raise ManifestError(str(exc)) from None
    return [len(group) for group in groups] if groups else [1] * instances


def model_config(folder: Path) -> Any:
    """A model folder's ``config.pbtxt`` (Triton's ModelConfig)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    path = folder / "config.pbtxt"
    try:
        return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())
    except (OSError, text_format.ParseError) as exc:
        raise ManifestError(f"{path}: {' '.join(str(exc).split())}") from None


def read_model(folder: Path) -> tuple[Model, int]:
    """A model folder as the pod's sizing reads it, and the SoCs its instances take (each instance group's count
    times its device group's size)."""
    from backend_model.contract import compile_config, embedding_config

    config = model_config(folder)
    parameters = {k: v.string_value for k, v in config.parameters.items()}
    compiled = folder / "compile_config.json"
    try:
        compile_ = embedding_config.of_model(compiled, parameters.get("task", ""))
    except (OSError, compile_config.CompileConfigError) as exc:
        raise ManifestError(f"{compiled}: {' '.join(str(exc).split())}") from None
    socs = devices_per_instance(config)
    return Model(model_spec(folder.name, parameters, compile_), len(socs)), sum(socs)


def repository_models(repository: Path) -> dict[str, tuple[Model, int]]:
    """Every model of the repository, and the SoCs it takes."""
    if not repository.is_dir():
        raise ManifestError(f"no model repository at {repository}")
    names = model_names(repository)
    if not names:
        raise ManifestError(f"{repository} holds no model folder")
    return {name: read_model(repository / name) for name in names}


def serves_adapters(repository: Path) -> bool:
    """Some model of the repository serves LoRA adapters (its ``lora_adapters`` parameter names one)."""
    for name in model_names(repository):
        parameters = {k: v.string_value for k, v in model_config(repository / name).parameters.items()}
        if ModelInfo(name, False, None, parameters=parameters).adapters:
            return True
    return False


def fresh_keys() -> dict[str, str]:
    """New random keys for the Secret (letters, digits, '-' and '_': safe in tritonserver's arguments)."""
    return {API_KEY: secrets.token_urlsafe(32), TRITON_KEY: secrets.token_urlsafe(32)}


def secret_name(o: Options) -> str:
    return o.secret or f"{o.name}-keys"


def _labels(o: Options) -> dict[str, str]:
    return {"app.kubernetes.io/name": o.name, "app.kubernetes.io/component": "tritonserver"}


def _meta(o: Options, suffix: str = "", **extra: Any) -> dict[str, Any]:
    return {"name": o.name + suffix, "namespace": o.namespace, "labels": _labels(o), **extra}


def _probe(path: str, port: str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period, "failureThreshold": failures}


def _volume(o: Options) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) of the repository: a PersistentVolumeClaim, or none (the image holds it)."""
    if o.repository_from == "image":
        return [], []
    kind, _, claim = o.repository_from.partition(":")
    if kind != "pvc" or not claim:
        raise ManifestError(f"--repository-from must be pvc:NAME or image, got {o.repository_from!r}")
    return ([{"name": "models", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
            [{"name": "models", "mountPath": MODELS_AT, "readOnly": True}])


def _secret_env(o: Options, name: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name(o), "key": key}}}


def _locked(o: Options, container: dict[str, Any], env: list[dict[str, Any]],
            mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """``container`` without privileges, its root read-only (unless told otherwise) but for :data:`WRITABLE` (its
    HOME), and a preStop that waits while the Service stops routing to the pod (SIGTERM follows: it drains)."""
    name = container["name"]
    return {**container, "env": [*env, {"name": "HOME", "value": WRITABLE}],
            "volumeMounts": [*mounts, {"name": f"{name}-tmp", "mountPath": WRITABLE}],
            "lifecycle": {"preStop": {"sleep": {"seconds": ROUTING_DELAY}}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                "readOnlyRootFilesystem": o.read_only_root}}


def _tritonserver(o: Options, devices: int, size: Sizing, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    resources = size.server_resources()
    for amounts in resources.values():
        amounts.update({DEVICE_RESOURCE: str(devices)} if devices else {})
    return _locked(o, {
        "name": "tritonserver", "image": o.image,
        "command": ["tritonserver", f"--model-repository={MODELS_AT}", f"--http-port={PORTS['http']}",
                    f"--grpc-port={PORTS['grpc']}", f"--metrics-port={PORTS['metrics']}",
                    f"--exit-timeout-secs={size.drain}", *restricted_arguments(f"$({TRITON_KEY_ENV})")],
        "ports": [{"name": n, "containerPort": PORTS[n]} for n in ("http", "grpc", "metrics")],
        "readinessProbe": _probe("/v2/health/ready", "http", 5, 3),
        "livenessProbe": _probe("/v2/health/live", "http", 10, 3),
        "startupProbe": _probe("/v2/health/live", "http", 10, 60),  # loading programs onto the cards takes time
        "resources": resources,
    }, [_secret_env(o, TRITON_KEY_ENV, TRITON_KEY)], mounts)


def _front(o: Options, size: Sizing) -> dict[str, Any]:
    command = ["qaic-console", "openai", "--url", f"127.0.0.1:{PORTS['http']}", "--grpc-url",
               f"127.0.0.1:{PORTS['grpc']}", "--metrics-url", f"127.0.0.1:{PORTS['metrics']}", "--host", "0.0.0.0",
               "--port", str(PORTS["openai"]), "--drain", str(size.drain)]
    command += [] if o.api_key else ["--no-api-key"]
    env = [_secret_env(o, KEY_ENV, API_KEY)] if o.api_key else []
    return _locked(o, {"name": "openai", "image": o.front_image, "command": command,
                       "ports": [{"name": "openai", "containerPort": PORTS["openai"]}],
                       "readinessProbe": _probe("/health", "openai", 5, 3),
                       "resources": size.front_resources()}, env, [])


def deployment(o: Options, devices: int, size: Sizing) -> dict[str, Any]:
    volumes, mounts = _volume(o)
    pod_labels = {**_labels(o), POOL_LABEL: o.name, pool.ENGINE_LABEL: pool.ENGINE}
    annotations = {} if o.operator else {"prometheus.io/scrape": "true", "prometheus.io/port": str(PORTS["metrics"]),
                                         "prometheus.io/path": "/metrics"}
    containers = [_tritonserver(o, devices, size, mounts), _front(o, size)]
    volumes += [{"name": f"{c['name']}-tmp", "emptyDir": {}} for c in containers]
    security = {"runAsNonRoot": True, "runAsUser": USER, "runAsGroup": USER, "fsGroup": USER,
                "seccompProfile": {"type": "RuntimeDefault"}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(o),
            "spec": {"replicas": o.replicas, "selector": {"matchLabels": _labels(o)},
                     "template": {"metadata": {"labels": pod_labels, "annotations": annotations},
                                  "spec": {"containers": containers, "volumes": volumes, "securityContext": security,
                                           "terminationGracePeriodSeconds": size.grace_period}}}}


def service(o: Options) -> dict[str, Any]:
    ports = [{"name": n, "port": PORTS[n], "targetPort": n,
              **({"appProtocol": "kubernetes.io/h2c"} if n == "grpc" else {})} for n in CLIENT_PORTS]
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(o),
            "spec": {"selector": _labels(o), "ports": ports}}


def network_policy(o: Options) -> dict[str, Any]:
    """Clients may reach the pods' client ports; the metrics port only pods of the scraper's namespace."""
    scraper = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": o.scraper_namespace}}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(o),
            "spec": {"podSelector": {"matchLabels": _labels(o)}, "policyTypes": ["Ingress"],
                     "ingress": [{"ports": [{"port": n, "protocol": "TCP"} for n in CLIENT_PORTS]},
                                 {"from": [scraper], "ports": [{"port": "metrics", "protocol": "TCP"}]}]}}


def secret(o: Options, keys: Mapping[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {**_meta(o), "name": secret_name(o)}, "type": "Opaque",
            "stringData": dict(keys)}


def pod_monitor(o: Options) -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": _meta(o),
            "spec": {"selector": {"matchLabels": _labels(o)},
                     "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"}]}}


def rules_object(o: Options) -> dict[str, Any]:
    """The shipped rules: a PrometheusRule (the Operator loads it), or a ConfigMap a Prometheus mounts."""
    if o.operator:
        return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": _meta(o, "-rules"),
                "spec": rules.rules()}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(o, "-rules"),
            "data": {"qaic-console-rules.yaml": rules.rules_text()}}


def waiting_query(o: Options) -> str:
    """The requests waiting for a slot over this Deployment's pods (KEDA divides by the replicas)."""
    selector = f'namespace="{o.namespace}", pod=~"{o.name}-.*"'
    return promql.expr("waiting", (), selector)


def scaled_object(o: Options) -> dict[str, Any]:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": _meta(o),
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": o.name},
                     "minReplicaCount": o.replicas, "maxReplicaCount": max(o.max_replicas, o.replicas),
                     "cooldownPeriod": 300,
                     "triggers": [{"type": "prometheus", "name": "requests-waiting",
                                   "metadata": {"serverAddress": o.prometheus, "query": waiting_query(o),
                                                "threshold": str(o.waiting_per_pod)}}]}}


def disruption_budget(o: Options) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(o),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _labels(o)}}}


def inference_pool(o: Options) -> dict[str, Any]:
    """The pods' fronts as one InferencePool of the Gateway API Inference Extension."""
    return pool.inference_pool(_meta(o), {POOL_LABEL: o.name}, PORTS["openai"])


def picker_config(o: Options, adapters: bool) -> dict[str, Any]:
    """The endpoint picker's configuration, as a ConfigMap its Deployment may mount."""
    text = yaml.safe_dump(pool.picker_config(adapters), sort_keys=False, width=120)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(o, "-epp-config"),
            "data": {pool.CONFIG_FILE: text}}


def pod_sizing(o: Options) -> tuple[int, Sizing]:
    """(SoCs, sizing) of one pod serving the repository's models."""
    models = repository_models(o.repository).values()
    try:
        return sum(socs for _, socs in models), sizing(model for model, _ in models)
    except SizingError as exc:
        raise ManifestError(str(exc)) from None


def manifests(o: Options, keys: Mapping[str, str] | None = None,
              pod: tuple[int, Sizing] | None = None) -> dict[str, dict[str, Any]]:
    """File name -> object, every one the options ask for; the Secret (unless ``o.secret`` names one) holds
    ``keys``, else :func:`fresh_keys`; ``pod``: :func:`pod_sizing`'s, when read already."""
    if o.replicas < 1:
        raise ManifestError("--replicas must be at least 1")
    devices, size = pod or pod_sizing(o)
    out = {"deployment.yaml": deployment(o, devices, size), "service.yaml": service(o),
           "networkpolicy.yaml": network_policy(o)}
    if not o.secret:
        out["secret.yaml"] = secret(o, keys or fresh_keys())
    if o.operator:
        out["podmonitor.yaml"] = pod_monitor(o)
    out["rules.yaml"] = rules_object(o)
    out["scaledobject.yaml"] = scaled_object(o)
    out["poddisruptionbudget.yaml"] = disruption_budget(o)
    out["inferencepool.yaml"] = inference_pool(o)
    out["epp-config.yaml"] = picker_config(o, serves_adapters(o.repository))
    return out
