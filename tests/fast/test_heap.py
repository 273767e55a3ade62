"""The stub's heap while a model loads (``backend_model.triton.heap``): no collection, then all of it frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from backend_model.triton import heap


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each test starts with the collector on and nothing frozen, and leaves the worker so."""
    gc.unfreeze()
    gc.enable()
    yield
    gc.unfreeze()
    gc.enable()


def test_nothing_is_collected_while_loading_and_what_loaded_is_frozen() -> None:
    with heap.loading():
        assert not gc.isenabled()
        loaded = [[i] for i in range(1000)]  # tracked objects, as a model's imports and weights make
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(loaded)
    scanned = {id(o) for o in gc.get_objects()}  # the generations a collection scans: not the frozen objects
    assert not any(id(x) in scanned for x in loaded)


def test_the_loads_garbage_is_freed_not_frozen() -> None:
    class Node:
        pass

    with heap.loading():
        cycle = Node()
        cycle.self = cycle  # garbage only the cyclic collector frees, as a load leaves
        gone = weakref.ref(cycle)
        del cycle
        assert gone() is not None  # no collection inside the block
    assert gone() is None


def test_a_load_that_fails_still_turns_the_collector_back_on() -> None:
    with pytest.raises(RuntimeError, match="no weights"), heap.loading():
        raise RuntimeError("no weights")
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_a_collector_turned_off_before_stays_off() -> None:
    gc.disable()
    with heap.loading():
        pass
    assert not gc.isenabled()
