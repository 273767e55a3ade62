"""One adapter per kind of server; front ends ask an adapter and never branch on a kind.

``adapter_for("127.0.0.1:8000")`` is a tritonserver, ``adapter_for("http://127.0.0.1:8080/v1")`` an
OpenAI-compatible server (a URL ending with ``/v1``, or ``api="openai"``). Adding a kind is one module here
and one entry in :data:`KINDS`.
"""

from __future__ import annotations

from console.clients import BadRequest
from console.metrics.scrape import metrics_endpoint
from console.server.health import ServerHandle

from .base import HERE, NONE, SERVER, Adapter, Framed, States
from .openai import OpenAIAdapter
from .triton import TritonAdapter

KINDS: dict[str, type[Adapter]] = {TritonAdapter.kind: TritonAdapter, OpenAIAdapter.kind: OpenAIAdapter}
DEFAULT_KIND = TritonAdapter.kind  # what a console starts, and what a URL is unless another kind claims it
DEFAULT = KINDS[DEFAULT_KIND]
APIS = ("auto", *KINDS)
# What every command's --url takes (the rule each adapter applies, said once)
URL_HELP = ("host:port of a running tritonserver (its HTTP or its gRPC endpoint: the other one is its neighbour port), "
            "or the base URL of an OpenAI-compatible server (http://host:port/v1)")
# Which model a send that names none goes to (each adapter's default_model)
MODEL_DEFAULT_HELP = ("smollm2_decoupled for stream, smollm2_kv otherwise, when the server serves them, else the first "
                      "model it serves that answers the mode; an OpenAI-compatible server's first model")


def api_help(flag: str = "--url") -> str:
    """The ``--api`` option's help: the kinds, and which one each URL rule picks under ``auto``."""
    rules = "; ".join(kind.rule for kind in KINDS.values() if kind.rule)
    return f"What {flag} is: auto ({rules}; else {DEFAULT.kind}), or {', '.join(KINDS)}."


def kind_of(url: str, api: str = "auto") -> type[Adapter]:
    """The adapter class ``api`` names, or (``auto``) the one whose URL rule claims ``url``."""
    if api not in APIS:
        raise BadRequest(f"api must be one of {', '.join(APIS)}, got {api!r}")
    if api != "auto":
        return KINDS[api]
    return next((kind for kind in KINDS.values() if kind.claims(url)), DEFAULT)


def adapter_for(url: str, api: str = "auto", grpc_url: str | None = None, metrics_url: str | None = None) -> Adapter:
    """The server ``url`` names (``grpc_url``: its gRPC endpoint, for kinds that have one; ``metrics_url``: its
    Prometheus metrics page, ``host:port`` or a URL, when the adapter's guess is wrong)."""
    if not url.strip() and not (grpc_url or "").strip():
        raise BadRequest("empty server URL")
    adapter = kind_of(url, api).at(url, grpc_url)
    if metrics_url and metrics_url.strip():
        adapter.metrics_url = metrics_endpoint(metrics_url)
    return adapter


def started_here(handle: ServerHandle) -> Adapter:
    """The adapter of a tritonserver this console started (its ports are known)."""
    return TritonAdapter.of(handle)


__all__ = ["APIS", "DEFAULT", "HERE", "KINDS", "NONE", "SERVER", "Adapter", "Framed", "States", "adapter_for",
           "api_help", "kind_of", "started_here"]
