"""The Kubernetes objects of ``qaic-console deploy k8s``: a model repository served by tritonserver pods.

A Deployment (tritonserver and the OpenAI front side by side; ``qualcomm.com/qaic`` limits, Qualcomm's device
plugin's resource, from the models' device groups), a Service, the Prometheus side (a PodMonitor and a
PrometheusRule for the Prometheus Operator, or scrape annotations and a ConfigMap of the rules), a KEDA
ScaledObject scaling on the backend's queue, and a PodDisruptionBudget. Plain dicts; :mod:`.deploy` writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repo_gen.staging import model_names

from . import promql, rules

DEVICE_RESOURCE = "qualcomm.com/qaic"  # one per SoC, as Qualcomm's Kubernetes device plugin advertises them
IMAGE = "ghcr.io/quic/cloud_ai_triton_server:1.21.2.0"  # a placeholder: the image must hold this backend's needs
FRONT_IMAGE = "qaic-console:latest"  # a placeholder: an image with qaic-console installed
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002, "openai": 9000}
POOL_LABEL = "qaic-console/inference-pool"  # an InferencePool's selector matches it (docs/deployment.md)
MODELS_AT = "/models"
API_KEY_ENV = "QAIC_CONSOLE_API_KEY"
CPU_ENGINES = ("cpu", "onnx")  # the backend's engines that run on the host (backend_model/parameters.py ENGINES)


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
    api_key_secret: str = ""  # a Secret's name (key api-key) for the front's key; "" -> the front has none


def devices_per_instance(config: Any) -> list[int]:
    """SoCs each model instance opens: none for the CPU engines, else its device group's size (the
    ``device_groups`` parameter, as ``--device-groups`` writes it), or one SoC an instance without groups."""
    from backend_model.devices import PARAMETER, DeviceError, parse_groups

    engine = config.parameters["engine"].string_value if "engine" in config.parameters else "auto"
    instances = sum(group.count or 1 for group in config.instance_group) or 1
    if engine in CPU_ENGINES:
        return [0] * instances
    text = config.parameters[PARAMETER].string_value if PARAMETER in config.parameters else ""
    try:
        groups = parse_groups(text)
    except DeviceError as exc:
        raise ManifestError(str(exc)) from None
    return [len(group) for group in groups] if groups else [1] * instances


def model_devices(folder: Path) -> int:
    """The SoCs a model folder's instances take: each instance group's count times its device group's size."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    path = folder / "config.pbtxt"
    try:
        config = text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())
    except (OSError, text_format.ParseError) as exc:
        raise ManifestError(f"{path}: {' '.join(str(exc).split())}") from None
    return sum(devices_per_instance(config))


def repository_devices(repository: Path) -> dict[str, int]:
    """Every model of the repository and the SoCs it takes."""
    if not repository.is_dir():
        raise ManifestError(f"no model repository at {repository}")
    names = model_names(repository)
    if not names:
        raise ManifestError(f"{repository} holds no model folder")
    return {name: model_devices(repository / name) for name in names}


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


def _tritonserver(o: Options, devices: int, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "tritonserver", "image": o.image,
        "command": ["tritonserver", f"--model-repository={MODELS_AT}", f"--http-port={PORTS['http']}",
                    f"--grpc-port={PORTS['grpc']}", f"--metrics-port={PORTS['metrics']}"],
        "ports": [{"name": n, "containerPort": PORTS[n]} for n in ("http", "grpc", "metrics")],
        "readinessProbe": _probe("/v2/health/ready", "http", 5, 3),
        "livenessProbe": _probe("/v2/health/live", "http", 10, 3),
        "startupProbe": _probe("/v2/health/live", "http", 10, 60),  # loading programs onto the cards takes time
        "resources": {"limits": {DEVICE_RESOURCE: str(devices)}, "requests": {DEVICE_RESOURCE: str(devices)}}
        if devices else {},
        "volumeMounts": mounts,
    }


def _front(o: Options) -> dict[str, Any]:
    command = ["qaic-console", "openai", "--url", f"127.0.0.1:{PORTS['http']}", "--grpc-url",
               f"127.0.0.1:{PORTS['grpc']}", "--metrics-url", f"127.0.0.1:{PORTS['metrics']}", "--host", "0.0.0.0",
               "--port", str(PORTS["openai"])]
    env = []
    if o.api_key_secret:
        env = [{"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": o.api_key_secret, "key": "api-key"}}}]
    else:
        command.append("--no-api-key")
    return {"name": "openai", "image": o.front_image, "command": command, "env": env,
            "ports": [{"name": "openai", "containerPort": PORTS["openai"]}],
            "readinessProbe": _probe("/health", "openai", 5, 3)}


def deployment(o: Options, devices: int) -> dict[str, Any]:
    volumes, mounts = _volume(o)
    pod_labels = {**_labels(o), POOL_LABEL: o.name}
    annotations = {} if o.operator else {"prometheus.io/scrape": "true", "prometheus.io/port": str(PORTS["metrics"]),
                                         "prometheus.io/path": "/metrics"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(o),
            "spec": {"replicas": o.replicas, "selector": {"matchLabels": _labels(o)},
                     "template": {"metadata": {"labels": pod_labels, "annotations": annotations},
                                  "spec": {"containers": [_tritonserver(o, devices, mounts), _front(o)],
                                           "volumes": volumes}}}}


def service(o: Options) -> dict[str, Any]:
    ports = [{"name": n, "port": p, "targetPort": n, **({"appProtocol": "kubernetes.io/h2c"} if n == "grpc" else {})}
             for n, p in PORTS.items()]
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(o),
            "spec": {"selector": _labels(o), "ports": ports}}


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


def manifests(o: Options) -> dict[str, dict[str, Any]]:
    """File name -> object, every one the options ask for."""
    if o.replicas < 1:
        raise ManifestError("--replicas must be at least 1")
    devices = sum(repository_devices(o.repository).values())
    out = {"deployment.yaml": deployment(o, devices), "service.yaml": service(o)}
    if o.operator:
        out["podmonitor.yaml"] = pod_monitor(o)
    out["rules.yaml"] = rules_object(o)
    out["scaledobject.yaml"] = scaled_object(o)
    out["poddisruptionbudget.yaml"] = disruption_budget(o)
    return out
