"""tritonserver's command line, as the console starts it.

Models load in explicit model-control mode (every visible folder, or the ones asked for), so that one can be
reloaded while the server runs; that API and the other administrative ones (:data:`RESTRICTED`) answer only
requests carrying the console's key, which the guard puts in place of :data:`~.guard.SECRET`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from repo_gen.staging import model_names

from .guard import SECRET
from .health import KEY_HEADER

EXIT_TIMEOUT = 3  # s tritonserver waits for in-flight requests when stopping (Triton's default: 30)
RESTRICTED = "model-repository,shared-memory,logging,trace"  # model loads (code), shm registration, log/trace settings


def restricted_arguments(key: str) -> list[str]:
    """The administrative APIs (:data:`RESTRICTED`) for callers bringing ``key`` in :data:`~.health.KEY_HEADER` (gRPC:
    ``triton-grpc-protocol-`` before it) only, and no Vertex AI endpoint: what every tritonserver of ``serve`` and of
    ``deploy k8s`` is given."""
    restricted = f"{RESTRICTED}:{KEY_HEADER}={key}"
    return [
        f"--http-restricted-api={restricted}",
        f"--grpc-restricted-protocol={restricted}",
        "--allow-vertex-ai=false",  # on by default where AIP_MODE=PREDICTION: an endpoint on 0.0.0.0, unrestricted
    ]


def server_arguments(binary: Path, repository: Path, models: Sequence[str], host: str,
                     ports: tuple[int | None, int | None, int | None], log_verbose: int, backend_dir: Path | None,
                     extra_args: Sequence[str]) -> list[str]:
    """The argument list: ``models`` (empty: all) from ``repository`` on ``host`` and the HTTP, gRPC and metrics
    ``ports``; ``extra_args`` last (given by hand, they win)."""
    http_port, grpc_port, metrics_port = ports
    args = [
        str(binary),
        f"--model-repository={repository}",
        "--model-control-mode=explicit",
        *(f"--load-model={m}" for m in (models or model_names(repository))),  # hidden folders: never
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        f"--log-verbose={log_verbose}",
        f"--http-address={host}",
        f"--grpc-address={host}",
        f"--metrics-address={host}",
        *restricted_arguments(SECRET),
    ]
    if not any(a.startswith("--exit-timeout-secs") for a in extra_args):
        args.append(f"--exit-timeout-secs={EXIT_TIMEOUT}")  # a hung request (dead stub) must not hold a stop
    if not any(a.startswith("--exit-on-error") for a in extra_args):
        args.append("--exit-on-error=false")  # a model that cannot load must not take the others down
    if backend_dir is not None:
        args.append(f"--backend-directory={backend_dir}")
    return [*args, *extra_args]
