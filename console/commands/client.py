"""``qaic-console client stream|batch|generate``: the seed's sample clients, run from the packaged scripts.

There is one implementation of a seed client: ``seed_client.py`` of the release artifacts
(:func:`repo_gen.artifacts.seed_client_dir`), the standalone script that
``client_example_{kv,causal}.py`` run in Qualcomm's layout. These commands load it and pass their
arguments through (``--causal`` picks the causal defaults), so flags, defaults and output are the
scripts' own.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from types import ModuleType

import click

from repo_gen.artifacts import seed_client_dir

MODES = ("stream", "batch", "generate")
HELP = {
    "stream": "Stream a reply from a decoupled model over gRPC (the seed's stream-response client).",
    "batch": "Ask a batch model over HTTP, one response at the end (the seed's batch-response client).",
    "generate": "POST /v2/models/<model>/generate over HTTP (the seed's curl example).",
}


@lru_cache(maxsize=1)
def seed_client() -> ModuleType:
    """The packaged ``seed_client.py``, loaded as a module."""
    path = seed_client_dir("stream") / "seed_client.py"
    spec = importlib.util.spec_from_file_location("qaic_seed_client", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the seed client {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seed_command(mode: str) -> click.Command:
    """The click command running the seed client in ``mode``; its arguments go to the script."""

    @click.command(name=mode, help=f"{HELP[mode]} Takes the script's flags (--help lists them).",
                   context_settings={"ignore_unknown_options": True, "help_option_names": []},
                   add_help_option=False)
    @click.option("--causal", is_flag=True, help="Causal model defaults (starcoder samples, 6000 s timeout).")
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(causal: bool, args: tuple[str, ...]) -> None:
        kind = "causal" if causal else "kv"
        sys.exit(seed_client().main(mode, kind, list(args), prog=f"qaic-console client {mode}"))

    return command


@click.group(name="client", context_settings={"help_option_names": ["-h", "--help"]})
def client() -> None:
    """The seed's sample clients against a running tritonserver (stream, batch, generate)."""


for _mode in MODES:
    client.add_command(seed_command(_mode))
