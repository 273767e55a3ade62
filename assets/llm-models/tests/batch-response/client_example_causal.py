"""The seed's batch-response/client_example_causal.py: a thin wrapper over console.scripts.client_example_causal."""

import sys
from pathlib import Path

try:
    from console.scripts.client_example_causal import main
except ImportError:  # a source checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
    from console.scripts.client_example_causal import main

if __name__ == "__main__":
    main("batch")
