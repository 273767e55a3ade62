"""``qaic-console deploy k8s``: write the Kubernetes manifests of a model repository into a folder (no cluster is
touched)."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from console.fleet.manifests import FRONT_IMAGE, IMAGE, ManifestError, Options, manifests
from console.infra.terminal import CONTEXT_SETTINGS, fail


@click.group("deploy", context_settings=CONTEXT_SETTINGS)
def deploy_group() -> None:
    """Write what a cluster needs to serve a model repository (files only)."""


@deploy_group.command("k8s", context_settings=CONTEXT_SETTINGS)
@click.argument("repository", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output-dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder the manifests are written into (made if missing; files of the same names replaced).")
@click.option("--name", default="qaic-triton", show_default=True, help="Name of the Deployment and its objects.")
@click.option("--namespace", default="default", show_default=True)
@click.option("--image", default=IMAGE, show_default=True,
              help="The tritonserver image. The default is Qualcomm's Triton image name, a placeholder: set the "
                   "image you built with this backend's Python packages (and the repository, with "
                   "--repository-from image).")
@click.option("--front-image", default=FRONT_IMAGE, show_default=True,
              help="Image of the OpenAI-compatible front (qaic-console openai), a placeholder: one with qaic-console "
                   "installed.")
@click.option("--repository-from", default="image", show_default=True,
              help="Where the pods find the repository (at /models): pvc:NAME (a PersistentVolumeClaim holding it) "
                   "or image (the --image holds it).")
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True,
              help="Pods (the autoscaler's minimum).")
@click.option("--max-replicas", type=click.IntRange(min=1), default=4, show_default=True,
              help="The autoscaler's maximum.")
@click.option("--waiting-per-pod", type=click.IntRange(min=1), default=4, show_default=True,
              help="Requests waiting for a slot per pod (qaic_num_requests_waiting) the autoscaler aims at.")
@click.option("--operator/--no-operator", default=True, show_default=True,
              help="A PodMonitor and a PrometheusRule for the Prometheus Operator, or scrape annotations and a "
                   "ConfigMap of the rules for a plain Prometheus.")
@click.option("--prometheus-url", default="http://prometheus-operated.monitoring.svc:9090", show_default=True,
              help="The Prometheus the autoscaler (KEDA) asks.")
@click.option("--api-key-secret", default="",
              help="A Secret (key api-key) holding the front's API key; without it the front serves without a key.")
def k8s(repository: Path, output_dir: Path, name: str, namespace: str, image: str, front_image: str,
        repository_from: str, replicas: int, max_replicas: int, waiting_per_pod: int, operator: bool,
        prometheus_url: str, api_key_secret: str) -> None:
    """Write Kubernetes manifests for REPOSITORY into --output-dir: a Deployment (tritonserver with qualcomm.com/qaic
    limits from the models' device groups and the OpenAI front beside it), a Service, a PodMonitor (or scrape
    annotations), the Prometheus rules, a KEDA ScaledObject on the requests waiting per pod, a PodDisruptionBudget.
    Apply them with kubectl apply -f DIR."""
    options = Options(name, namespace, repository, image, front_image, repository_from, replicas, max_replicas,
                      waiting_per_pod, operator, prometheus_url, api_key_secret)
    try:
        objects = manifests(options)
    except ManifestError as exc:
        fail(str(exc))
    output_dir.mkdir(parents=True, exist_ok=True)
    for file, document in objects.items():
        (output_dir / file).write_text(yaml.safe_dump(document, sort_keys=False, width=120))
        click.echo(f"wrote {output_dir / file} ({document['kind']})")
    if image == IMAGE or front_image == FRONT_IMAGE:
        click.echo("note: --image and --front-image are placeholders until set: the tritonserver image with this "
                   "backend's packages, and one with qaic-console installed")
