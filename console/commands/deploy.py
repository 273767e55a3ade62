"""``qaic-console deploy k8s``: write the Kubernetes manifests of a model repository into a folder (no cluster is
touched)."""

from __future__ import annotations

import os
from pathlib import Path

import click
import yaml

from console.fleet.manifests import (
    API_KEY,
    FRONT_IMAGE,
    IMAGE,
    TRITON_KEY,
    ManifestError,
    Options,
    manifests,
    pod_sizing,
    secret_name,
)
from console.infra.terminal import CONTEXT_SETTINGS, fail


class Manifest(yaml.SafeDumper):
    """YAML as a reader wants it: a text of several lines (a ConfigMap's file) as a block, line for line."""


def _text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


Manifest.add_representer(str, _text)


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
@click.option("--secret", default="",
              help=f"A Secret you made, holding the front's API key ({API_KEY}) and tritonserver's key to its "
                   f"administrative APIs ({TRITON_KEY}); without it secret.yaml is written with new keys (kept when "
                   "it is there already).")
@click.option("--no-api-key", is_flag=True,
              help="The front serves anyone who can reach it, without a key (tritonserver's APIs stay locked).")
@click.option("--scraper-namespace", default="monitoring", show_default=True,
              help="The namespace of the Prometheus that scrapes the pods: the only one whose pods may reach the "
                   "metrics port (NetworkPolicy).")
@click.option("--writable-root", is_flag=True,
              help="Leave the containers' root file systems writable (for images that write outside /tmp).")
def k8s(repository: Path, output_dir: Path, name: str, namespace: str, image: str, front_image: str,
        repository_from: str, replicas: int, max_replicas: int, waiting_per_pod: int, operator: bool,
        prometheus_url: str, secret: str, no_api_key: bool, scraper_namespace: str, writable_root: bool) -> None:
    """Write Kubernetes manifests for REPOSITORY into --output-dir: a Deployment (tritonserver with qualcomm.com/qaic
    limits from the models' device groups, its administrative APIs locked by a key, and the OpenAI front beside it,
    asking clients for a key; CPU and memory from the models), a Service, a NetworkPolicy, the Secret of the keys,
    a PodMonitor (or scrape annotations), the Prometheus rules, a KEDA ScaledObject on the requests waiting per pod,
    a PodDisruptionBudget. Apply them with kubectl apply -f DIR."""
    options = Options(name, namespace, repository, image, front_image, repository_from, replicas, max_replicas,
                      waiting_per_pod, operator, prometheus_url, secret, not no_api_key, scraper_namespace,
                      not writable_root)
    try:
        pod = pod_sizing(options)
        objects = manifests(options, kept_keys(output_dir / "secret.yaml", secret_name(options)), pod)
    except ManifestError as exc:
        fail(str(exc))
    output_dir.mkdir(parents=True, exist_ok=True)
    for file, document in objects.items():
        text = yaml.dump(document, Dumper=Manifest, sort_keys=False, width=120)
        write(output_dir / file, text, document["kind"] == "Secret")
        click.echo(f"wrote {output_dir / file} ({document['kind']})")
    click.echo(f"sizing: {pod[1]}")
    if no_api_key:
        click.echo("warning: --no-api-key: the OpenAI front answers anyone who can reach port 9000, without a key")
    else:
        click.echo(f"the front's API key, once applied: kubectl -n {namespace} get secret {secret_name(options)} "
                   f"-o jsonpath='{{.data.{API_KEY}}}' | base64 -d")
    if image == IMAGE or front_image == FRONT_IMAGE:
        click.echo("note: --image and --front-image are placeholders until set: the tritonserver image with this "
                   "backend's packages, and one with qaic-console installed")


def kept_keys(path: Path, name: str) -> dict[str, str] | None:
    """The keys of the Secret ``name`` that an earlier run wrote at ``path`` (a new run keeps them: the pods already
    running and their clients hold them), or None."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(document, dict) or document.get("kind") != "Secret" or \
            (document.get("metadata") or {}).get("name") != name:
        return None
    keys = document.get("stringData") or {}
    return keys if isinstance(keys, dict) and {API_KEY, TRITON_KEY} <= set(keys) else None


def write(path: Path, text: str, private: bool) -> None:
    """``text`` into ``path``; ``private`` (keys): readable by this user only, also when the file was there."""
    if not private:
        path.write_text(text)
        return
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
