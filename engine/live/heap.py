"""The running controller's garbage collector: its long-lived heap frozen, so that the collector's
full passes do not walk it again and again (issue 24, the cost curve).

A controller following 10,000 logs holds millions of long-lived objects (a scanner, a stream and
a file state per log, the rulebook, the engine's trackers). CPython walks all of them in every
full collection, and its progress lines keep promoting new objects (tracker points, ledger
figures), so a full collection came every ~8 s and cost ~0.4 s: 1.5 s of the 30 s steady window
at 2,048 nodes / 10,000 logs (bench_cluster.py's "garbage collection" figures), each time holding
the loop. ``HeapFreezer`` freezes what survived a slow full collection (``gc.freeze``: moved to
the permanent generation, never walked again), so the next full collections walk only what was
made since. Frozen objects are still freed when their last reference goes (reference counting);
only cycles among them wait: every ``RELEASE_S`` the heap is unfrozen, collected once and frozen
again, so cyclic garbage waits at most that long. Nothing here changes what the controller reads,
decides or stores.

Only ``Controller.run`` uses it (tests that ``step()`` a controller by hand leave the collector
alone); ``stop()`` unfreezes, so a process that goes on after the controller (a test) collects
as before.
"""

from __future__ import annotations

import gc
import logging
import threading
from typing import Any

from engine.clock import SYSTEM, Clock

logger = logging.getLogger(__name__)

__all__ = ["HeapFreezer", "RELEASE_S", "SLOW_FULL_S"]

#: a full collection at least this long (seconds) means a heap worth freezing
SLOW_FULL_S = 0.02
#: the frozen heap is unfrozen, collected and frozen again this often (seconds): how long a
#: cycle of dead objects among the frozen ones waits to be freed
RELEASE_S = 600.0


class HeapFreezer:
    """Freeze the heap after a slow full collection; release it every ``release_s``."""

    def __init__(self, release_s: float = RELEASE_S, slow_s: float = SLOW_FULL_S, clock: Clock = SYSTEM):
        self.release_s, self.slow_s, self.clock = release_s, slow_s, clock
        self._started: float | None = None  # the clock's monotonic() at the start of a full collection
        self._slow = threading.Event()  # set by the collector's callback (any thread), read by tick()
        self._frozen_at: float | None = None
        self.stats = {"freezes": 0, "releases": 0}

    def __enter__(self) -> HeapFreezer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._frozen_at is not None:
            gc.unfreeze()
            self._frozen_at = None

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = self.clock.monotonic()
        elif self._started is not None and self.clock.monotonic() - self._started >= self.slow_s:
            self._slow.set()

    def tick(self, now: float) -> None:
        """Called by the loop between passes (``now``: its monotonic clock)."""
        if self._frozen_at is not None and now - self._frozen_at >= self.release_s:
            gc.unfreeze()  # the frozen objects are the oldest generation again: collected once
            gc.collect()
            gc.freeze()
            self._frozen_at = now
            self._slow.clear()
            self.stats["releases"] += 1
            return
        if self._slow.is_set():  # what that collection kept is long-lived: never walked again
            self._slow.clear()
            gc.freeze()
            self.stats["freezes"] += 1
            if self._frozen_at is None:
                self._frozen_at = now
                logger.debug("heap frozen: %d objects", gc.get_freeze_count())
