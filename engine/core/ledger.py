"""The job ledger: what the goodput report (docs/goodput.md) needs of a job attempt's life,
written to the store as the facts arrive, so that the report reads the store and never a log.

* Every ``job`` fact (a state change the scheduler poll saw) becomes a ``job_events`` row.
* From ``progress`` facts, per job attempt: its first progress (time and step), its highest step
  and when it was last seen, its last completed checkpoint (step and time) and the step time the
  job itself printed (the median of its recent values). These are written at the attempt's first
  progress, at each new checkpoint, at each state change of the attempt, and otherwise at most
  every ``every`` seconds: a few rows per attempt, not one per progress line.

A job log names its attempt by the scheduler's word, which comes with its next poll: the first
lines of a requeued attempt, printed before that poll, would be charged to the attempt before it.
So a progress fact stamped after a later attempt of its job began (waiting or running: its
scheduler state; not the old attempt's teardown, which Slurm already reports under the new
restart count) is that later attempt's. An attempt, once superseded, prints nothing more.

The incident's close writes the attempt's step and checkpoint too (``Decider.close``); the store
merges the two (``JobHistoryTables.note_progress``). Time is the facts' own, as everywhere in core.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from engine.facts import JOB_ACTIVE_STATES, Fact
from engine.store import Store

__all__ = ["JobLedger", "printed_step_time"]

#: a progress fact's own step time, in seconds per step (throughput per sample is not one)
_STEP_TIME = (("step_time", 1.0), ("step_time_ms", 1e-3), ("s_per_it", 1.0), ("iter_s", 1.0))


def printed_step_time(fact: Any) -> float | None:
    """Seconds per step as the job printed it (``it_per_s`` inverted); None if it printed none.
    ``fact``: a Fact, or a mapping of the same names (a touch's speed figures)."""
    for name, scale in _STEP_TIME:
        v = fact.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v) * scale
    v = fact.get("it_per_s")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
        return 1.0 / float(v)
    return None


#: states in which a requeued attempt has begun (the one before it is gone); COMPLETING is not:
#: Slurm reports the old attempt's teardown with the new restart count
_BEGUN = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "CONFIGURING", "RUNNING"})


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass
class _Seen:
    first_at: float
    first_step: int | None
    last_at: float
    step: int | None = None
    checkpoint: int | None = None
    checkpoint_at: float | None = None
    times: deque = field(default_factory=lambda: deque(maxlen=32))
    written_at: float = float("-inf")


class JobLedger:
    """Feeds ``job_events`` and the goodput columns of ``progress`` (engine.store.history)."""

    def __init__(self, store: Store, every: float = 300.0):
        self.store = store
        self.every = every
        self._seen: dict[tuple[str, int], _Seen] = {}
        #: per job, when each attempt was first seen begun (``_BEGUN``)
        self._begun: dict[str, dict[int, float]] = {}

    def job(self, fact: Fact) -> None:
        """A job state change: recorded, and the attempt's progress written with it."""
        job, state = fact.get("job"), fact.get("state")
        if job is None or state is None:
            return
        attempt = int(fact.get("attempt") or 0)
        if state in _BEGUN:
            self._begun.setdefault(str(job), {}).setdefault(attempt, fact.at)
        elif state not in JOB_ACTIVE_STATES:
            self._begun.pop(str(job), None)  # the job ended: nothing of it is kept
        nodes = fact.get("nodes") or ()
        self.store.add_job_event(
            str(job),
            attempt,
            str(state),
            fact.at,
            [str(n) for n in nodes] if isinstance(nodes, (tuple, list)) else (),
            str(fact.get("reason") or "") or None,
            fact.origin,
        )
        for key in [k for k in self._seen if k[0] == str(job) and (k[1] != attempt or state not in JOB_ACTIVE_STATES)]:
            self._write(key, self._seen.pop(key))  # the attempt ended, or a later one began
        seen = self._seen.get((str(job), attempt))
        if seen is not None:
            self._write((str(job), attempt), seen)

    def progress(self, fact: Fact) -> None:
        job = fact.get("job")
        if job is None:
            return
        self.point(
            str(job),
            int(fact.get("attempt") or 0),
            fact.at,
            _int(fact.get("step")),
            _int(fact.get("checkpoint")),
            printed_step_time(fact),
        )

    def touch(self, job: str, attempt: int, at: float, step: int | None, figures: Any) -> None:
        """A progress line that only touched the progress tracker (live, ``engine.core.linefacts``):
        its time, step and speed figures by name (no checkpoint: a line naming one is a fact)."""
        self.point(job, attempt, at, step, None, printed_step_time(figures))

    def point(
        self, job: str, attempt: int, at: float, step: int | None, checkpoint: int | None, st: float | None
    ) -> None:
        """One progress point (a fact's, or a touch's)."""
        later = [a for a, begun in self._begun.get(job, {}).items() if a > attempt and at >= begun]
        key = (job, max(later, default=attempt))
        seen = self._seen.get(key)
        due = seen is None
        if seen is None:
            seen = self._seen[key] = _Seen(first_at=at, first_step=step, last_at=at)
        if at > seen.last_at:
            seen.last_at = at
        if step is not None and (seen.step is None or step > seen.step):
            seen.step = step
        if checkpoint is not None and (seen.checkpoint is None or checkpoint > seen.checkpoint):
            seen.checkpoint, seen.checkpoint_at = checkpoint, at
            due = True
        if st is not None:
            seen.times.append(st)
        if due or at - seen.written_at >= self.every:
            self._write(key, seen)

    def _write(self, key: tuple[str, int], seen: _Seen) -> None:
        seen.written_at = seen.last_at
        self.store.note_progress(
            key[0],
            key[1],
            step=seen.step,
            last_at=seen.last_at,
            first_at=seen.first_at,
            first_step=seen.first_step,
            checkpoint=seen.checkpoint,
            checkpoint_at=seen.checkpoint_at,
            step_time=statistics.median(seen.times) if seen.times else None,
        )
