"""The seed's stream-response client for causal models: streams over gRPC (decoupled models).

    python client_example_causal.py --prompt "My name is" [--url HOST:PORT] [--model_name NAME]

Defaults: the seed's starcoder sample and its network timeout; see ``--help`` and seed_client.py beside this file.
"""

import sys

from seed_client import main

if __name__ == "__main__":
    sys.exit(main("stream", "causal"))
