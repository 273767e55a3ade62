"""The seed's ``client_example_causal.py``: ask a causal model on a running tritonserver.

Streams over gRPC (stream-response) or asks once over HTTP (batch-response): the copies under
``assets/llm-models/tests/{stream,batch}-response/`` pick the mode; run directly, the mode follows
the folder this file sits in (``batch-response`` -> batch, anything else -> stream).
Defaults: model starcoder_decoupled (stream) / starcoder_15b (batch),
URL localhost:8001 / localhost:8000, network timeout 6000 s.

    python client_example_causal.py --prompt "My name is|Maroon bells" [--url HOST:PORT] [--model_name NAME]
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from console.scripts.client_example_kv import run
except ImportError:  # a source checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from console.scripts.client_example_kv import run


def main(mode: str | None = None) -> None:
    """Run the client; ``mode`` is "stream" or "batch" (default: from the script's folder)."""
    run(mode, "causal")


if __name__ == "__main__":
    main()
