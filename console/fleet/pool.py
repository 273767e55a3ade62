"""The Gateway API Inference Extension's side of ``qaic-console deploy k8s``: an ``InferencePool`` of the pods'
OpenAI fronts, and the configuration of its endpoint picker (llm-d's EPP, the extension's reference picker).

The picker reads each pod's figures off the port it routes to (the front's ``/metrics``) by the names its
``core-metrics-extractor`` maps for the pod's engine, which the pod's ``llm-d.ai/engine-type`` label names: the
front publishes vLLM's names (:mod:`console.metrics.names`), mapped here for the engine ``qaic-console`` (queue,
running, KV-cache use, and the LoRA adapters where the models serve some: ``lora-affinity-scorer`` then sends a
request for an adapter to the pods that hold it). The picker itself is installed beside it (llm-d's
``inferencepool`` chart, given this configuration: docs/deployment.md).
"""

from __future__ import annotations

from typing import Any

from console.metrics.names import LORA_INFO, VLLM_NAMES

API_VERSION = "inference.networking.k8s.io/v1"
CONFIG_VERSION = "llm-d.ai/v1alpha1"  # EndpointPickerConfig's (its older inference.networking.x-k8s.io is deprecated)
ENGINE_LABEL = "llm-d.ai/engine-type"
ENGINE = "qaic-console"
PICKER_PORT = 9002  # the picker's ext-proc gRPC port, as llm-d's chart serves it
CONFIG_FILE = "epp-config.yaml"  # the ConfigMap's key: the file the picker's --config-file reads
SCORERS = {"queue-scorer": 2, "kv-cache-utilization-scorer": 2, "prefix-cache-scorer": 3}  # the picker's defaults
LORA_SCORER = "lora-affinity-scorer"


def engine_config(adapters: bool) -> dict[str, Any]:
    """The metric names of this engine as the ``core-metrics-extractor`` reads them (LoRA only with ``adapters``:
    a page without the gauge would be an error at every scrape)."""
    return {"name": ENGINE, "queuedRequestsSpec": VLLM_NAMES["qaic_num_requests_waiting"],
            "runningRequestsSpec": VLLM_NAMES["qaic_num_requests_running"],
            "kvUsageSpec": VLLM_NAMES["qaic_kv_cache_usage_perc"], "loraSpec": LORA_INFO if adapters else "",
            "cacheInfoSpec": ""}


def picker_config(adapters: bool) -> dict[str, Any]:
    """The endpoint picker's ``EndpointPickerConfig``: the front's metrics page read for the engine ``qaic-console``,
    and the default scorers (LoRA affinity too with ``adapters``), the best score picked."""
    scorers = {**SCORERS, **({LORA_SCORER: 1} if adapters else {})}
    extractor = {"engineLabelKey": ENGINE_LABEL, "defaultEngine": ENGINE, "engineConfigs": [engine_config(adapters)]}
    return {"apiVersion": CONFIG_VERSION, "kind": "EndpointPickerConfig",
            "plugins": [{"type": "metrics-data-source", "parameters": {"scheme": "http", "path": "/metrics"}},
                        {"type": "core-metrics-extractor", "parameters": extractor},
                        *({"type": name} for name in scorers), {"type": "max-score-picker"}],
            "dataLayer": {"sources": [{"pluginRef": "metrics-data-source",
                                       "extractors": [{"pluginRef": "core-metrics-extractor"}]}]},
            "schedulingProfiles": [{"name": "default", "plugins": [
                *({"pluginRef": name, "weight": weight} for name, weight in scorers.items()),
                {"pluginRef": "max-score-picker"}]}]}


def picker_name(name: str) -> str:
    """The picker's Service (llm-d's charts name it so for the release ``name``)."""
    return f"{name}-epp"


def inference_pool(meta: dict[str, Any], selector: dict[str, str], port: int) -> dict[str, Any]:
    """The pool of the pods ``selector`` matches, each an endpoint at ``port`` (its front), picked by the picker."""
    return {"apiVersion": API_VERSION, "kind": "InferencePool", "metadata": meta,
            "spec": {"selector": {"matchLabels": selector}, "targetPorts": [{"number": port}],
                     "endpointPickerRef": {"name": picker_name(meta["name"]), "kind": "Service",
                                           "port": {"number": PICKER_PORT}, "failureMode": "FailClose"}}}
