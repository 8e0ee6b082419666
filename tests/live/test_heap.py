"""engine.live.heap: the controller's long-lived heap is frozen after a slow full collection,
released (unfrozen, collected, frozen again) every RELEASE_S so that dead cycles among frozen
objects are freed, and unfrozen when the controller stops."""

from __future__ import annotations

import gc
import weakref

from engine.live.heap import HeapFreezer


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_a_slow_full_collection_freezes_a_release_frees_dead_cycles_and_stop_unfreezes():
    assert gc.get_freeze_count() == 0
    heap = HeapFreezer(release_s=600.0, slow_s=0.0)  # every full collection counts as slow
    try:
        with heap:
            heap.tick(0.0)
            assert gc.get_freeze_count() == 0  # nothing collected yet: nothing frozen
            cycle = _Node()
            gone = weakref.ref(cycle)
            gc.collect()  # a full collection: what survives it is frozen at the next tick
            heap.tick(1.0)
            assert gc.get_freeze_count() > 0 and heap.stats["freezes"] == 1
            del cycle
            gc.collect()
            assert gone() is not None  # frozen: the collector does not walk it
            heap.tick(300.0)
            assert heap.stats["releases"] == 0
            heap.tick(601.0)  # released: collected once, frozen again
            assert heap.stats["releases"] == 1 and gone() is None and gc.get_freeze_count() > 0
        assert gc.get_freeze_count() == 0 and heap._on_gc not in gc.callbacks
    finally:
        gc.unfreeze()


def test_quick_collections_freeze_nothing():
    heap = HeapFreezer(slow_s=60.0)
    with heap:
        gc.collect()
        heap.tick(1.0)
        assert gc.get_freeze_count() == 0 and heap.stats["freezes"] == 0
