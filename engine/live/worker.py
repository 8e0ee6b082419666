"""Scheduler polling off the controller's loop.

A thread of the live service (it was ``scheduler_adapters.worker``): it knows only the adapter
protocol's calls, no scheduler of its own.

``squeue``/``sinfo`` take seconds when slurmctld is away (and a hung one may never answer); the
controller's loop reads logs and detects failures, so it must never wait for them. A
``PollWorker`` polls on its own thread and hands over the latest snapshot; a call that does not
return within ``timeout`` marks the scheduler unavailable (the stuck call is left to finish on
its own; no second one is started meanwhile).

Usage::

    worker = PollWorker(adapter, interval=5.0, timeout=10.0)
    worker.start()
    snap = worker.take()          # None when nothing new; else Snapshot(jobs, nodes, at, started)
    worker.available, worker.error
    worker.ask({"n2"})            # which jobs hold n2? asked at once, on the worker's thread
    worker.answers()              # [Answer(nodes, jobs, started)], each handed over once

An ``ask`` is for a node whose fault arrived before any poll showed a job there: the loop must
not wait for the next poll (seconds) nor for the query (it may hang), so the worker is woken and
asks ``jobs_on`` (an adapter without it: ``jobs()``, filtered) between its polls.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Iterable

from engine.clock import SYSTEM, Clock
from engine.facts import JOB_ACTIVE_STATES

__all__ = ["Answer", "PollWorker", "Snapshot", "jobs_on"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    jobs: list[Any]
    nodes: list[Any]
    at: float  # wall time the poll finished
    started: float | None = None  # wall time the poll began: what it says was true from then on


@dataclass(frozen=True)
class Answer:
    """The scheduler's answer to "which job attempts hold these nodes?"."""

    nodes: frozenset[str]
    jobs: list[Any]  # the job attempts that hold any of them
    started: float  # wall time the question was put


def jobs_on(adapter: Any, nodes: Iterable[str]) -> list[Any]:
    """``adapter.jobs_on(nodes)``; an adapter without it is answered from its ``jobs()``."""
    wanted = set(nodes)
    ask = getattr(adapter, "jobs_on", None)
    found = ask(sorted(wanted)) if ask is not None else adapter.jobs()
    return [j for j in found if j.state in JOB_ACTIVE_STATES and wanted & set(j.nodes)]


class PollWorker:
    def __init__(self, adapter, interval: float = 5.0, timeout: float = 10.0, *, clock: Clock = SYSTEM):
        self.adapter = adapter
        self.clock = clock
        self.interval = interval
        self.timeout = timeout
        self.available = True
        self.error: str | None = None
        self.down_since: float | None = None
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and ask(): the loop's wait ends at once
        self._asked: set[str] = set()
        self._now = False  # poll_now(): poll without waiting for the interval
        self._not_before = float("-inf")  # wall time a snapshot must have been asked at or after
        self._answers: list[Answer] = []
        self._thread: threading.Thread | None = None
        self._call_started: float | None = None  # monotonic time the current call began

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="scheduler-poll", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def ask(self, nodes: Iterable[str]) -> None:
        """Which job attempts hold these nodes? Answered on the worker's thread (``answers``)."""
        with self._lock:
            self._asked.update(nodes)
        self._wake.set()

    def poll_now(self) -> None:
        """Poll at once; the snapshot not taken yet is dropped (only an answer asked from now is
        handed over)."""
        with self._lock:
            self._snapshot = None
            self._now = True
            self._not_before = self.clock.wall()  # a call under way when asked is not handed over
        self._wake.set()

    def answers(self) -> list[Answer]:
        """The answers not handed over yet, oldest first."""
        with self._lock:
            got, self._answers = self._answers, []
        return got

    def answer_once(self) -> None:
        """Answer what was asked, on the calling thread (the loop calls it; tests may too). A
        question the scheduler does not answer is dropped: the next poll answers it for all nodes."""
        with self._lock:
            nodes, self._asked = frozenset(self._asked), set()
        if not nodes:
            return
        started = self.clock.wall()
        self._call_started = self.clock.monotonic()
        try:
            jobs = jobs_on(self.adapter, nodes)
        except Exception as exc:  # whether the scheduler answers is the polls' to say
            logger.warning("which jobs hold %s: the scheduler did not say (%s)", ",".join(sorted(nodes)), exc)
            return
        finally:
            self._call_started = None
        with self._lock:
            self._answers.append(Answer(nodes, jobs, started))

    def take(self) -> Snapshot | None:
        """The newest snapshot not taken yet; also notices a call that overran its timeout."""
        started = self._call_started
        if started is not None and self.clock.monotonic() - started > self.timeout and self.available:
            self._mark_down(f"the scheduler did not answer within {self.timeout:g} s")
        with self._lock:
            snap, self._snapshot = self._snapshot, None
        return snap

    def poll_once(self) -> None:
        """One poll, on the calling thread (the loop calls it; tests may too)."""
        started = self.clock.wall()
        self._call_started = self.clock.monotonic()
        try:
            jobs = self.adapter.jobs()
            nodes = self.adapter.nodes()
        except Exception as exc:
            self._mark_down(str(exc) or type(exc).__name__)
            return
        finally:
            self._call_started = None
        with self._lock:
            if started >= self._not_before:
                self._snapshot = Snapshot(jobs, nodes, self.clock.wall(), started)
        if not self.available:
            logger.warning(
                "scheduler answers again after %.0f s", self.clock.wall() - (self.down_since or self.clock.wall())
            )
        self.available, self.error, self.down_since = True, None, None

    def _mark_down(self, why: str) -> None:
        if self.available:
            logger.error("scheduler unavailable: %s; actions wait until it answers", why)
            self.down_since = self.clock.wall()
        self.available, self.error = False, why

    def _loop(self) -> None:
        due = self.clock.monotonic()
        while not self._stop.is_set():
            self._wake.clear()
            self.answer_once()  # a node's fault waits for this: before the poll
            with self._lock:
                now, self._now = self._now, False
            if now or self.clock.monotonic() >= due:
                began = self.clock.monotonic()
                self.poll_once()
                due = began + max(0.05, self.interval)
            self.clock.wait(self._wake, max(0.0, due - self.clock.monotonic()))
