"""The stub's heap: no cyclic garbage collection while a model loads, and what it loaded frozen.

A Python backend stub is a process of its own for one model instance. Loading imports torch and
transformers and reads the weights: some 300,000 tracked objects, which the collector would scan
again and again while they are made, and once more (a full collection, about 170 ms) whenever
serving allocates enough to trigger one, and at exit. Frozen, they are never scanned again.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def loading() -> Iterator[None]:
    """Pause the cyclic collector for the block; then collect once (the load's garbage is freed, not kept) and
    freeze every object left, even when the block raised."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        if was_enabled:
            gc.enable()
