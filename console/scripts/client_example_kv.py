"""The seed's ``client_example_kv.py``: ask a KV-cache model on a running tritonserver.

Streams over gRPC (stream-response) or asks once over HTTP (batch-response): the copies under
``assets/llm-models/tests/{stream,batch}-response/`` pick the mode; run directly, the mode follows
the folder this file sits in (``batch-response`` -> batch, anything else -> stream).
Defaults: model mistral_decoupled (stream) / mistral_7b (batch),
URL localhost:8001 / localhost:8000, network timeout 600 s.

    python client_example_kv.py --prompt "My name is|Maroon bells" [--url HOST:PORT] [--model_name NAME]
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from console.seed_clients import seed_command
except ImportError:  # a source checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from console.seed_clients import seed_command


def run(mode: str | None, kind: str) -> None:
    """Run the seed client for ``kind`` ("kv" or "causal"); ``mode`` "stream" or "batch" (default:
    from the script's folder)."""
    if mode is None:
        mode = "batch" if Path(sys.argv[0]).resolve().parent.name == "batch-response" else "stream"
    seed_command(mode, kind)(prog_name=Path(sys.argv[0]).name)


def main(mode: str | None = None) -> None:
    run(mode, "kv")


if __name__ == "__main__":
    main()
