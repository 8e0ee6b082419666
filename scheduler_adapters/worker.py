"""Scheduler polling off the controller's loop.

``squeue``/``sinfo`` take seconds when slurmctld is away (and a hung one may never answer); the
controller's loop reads logs and detects failures, so it must never wait for them. A
``PollWorker`` polls on its own thread and hands over the latest snapshot; a call that does not
return within ``timeout`` marks the scheduler unavailable (the stuck call is left to finish on
its own; no second one is started meanwhile).

Usage::

    worker = PollWorker(adapter, interval=5.0, timeout=10.0)
    worker.start()
    snap = worker.take()          # None when nothing new; else Snapshot(jobs, nodes, at)
    worker.available, worker.error
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["PollWorker", "Snapshot"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    jobs: list[Any]
    nodes: list[Any]
    at: float  # wall time the poll finished


class PollWorker:
    def __init__(self, adapter, interval: float = 5.0, timeout: float = 10.0):
        self.adapter = adapter
        self.interval = interval
        self.timeout = timeout
        self.available = True
        self.error: str | None = None
        self.down_since: float | None = None
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._call_started: float | None = None  # monotonic time the current call began

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="scheduler-poll", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def take(self) -> Snapshot | None:
        """The newest snapshot not taken yet; also notices a call that overran its timeout."""
        started = self._call_started
        if started is not None and time.monotonic() - started > self.timeout and self.available:
            self._mark_down(f"the scheduler did not answer within {self.timeout:g} s")
        with self._lock:
            snap, self._snapshot = self._snapshot, None
        return snap

    def poll_once(self) -> None:
        """One poll, on the calling thread (the loop calls it; tests may too)."""
        self._call_started = time.monotonic()
        try:
            jobs = self.adapter.jobs()
            nodes = self.adapter.nodes()
        except Exception as exc:
            self._mark_down(str(exc) or type(exc).__name__)
            return
        finally:
            self._call_started = None
        with self._lock:
            self._snapshot = Snapshot(jobs, nodes, time.time())
        if not self.available:
            logger.warning("scheduler answers again after %.0f s", time.time() - (self.down_since or time.time()))
        self.available, self.error, self.down_since = True, None, None

    def _mark_down(self, why: str) -> None:
        if self.available:
            logger.error("scheduler unavailable: %s; actions wait until it answers", why)
            self.down_since = time.time()
        self.available, self.error = False, why

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.poll_once()
            self._stop.wait(max(0.05, self.interval - (time.monotonic() - began)))
