"""What the goodput report (engine.ops.goodput) reads of the store, and one job attempt as the
store knows it: its scheduler states, its progress row, its incidents. Nothing here computes a
figure; docs/goodput.md says what each input is and who writes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from engine.facts import JOB_ACTIVE_STATES, SOURCE_KINDS
from engine.store import IncidentRow, Store, StoreError

__all__ = ["FAILED", "WAITING", "Attempt", "Inputs", "is_requeue", "job_attempts", "load"]

#: states of an attempt waiting to run (after a requeue: Slurm's REQUEUED states, then PENDING)
WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
#: end states that are a failure even without an incident
FAILED = frozenset({"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"})
#: journaled actions that requeue the job (by name, or by the command they ran)
REQUEUE_ACTIONS = frozenset({"requeue", "hold"})
REQUEUE_ARGV = frozenset({"requeue", "requeuehold"})


@dataclass(frozen=True)
class Inputs:
    """What the report reads from the store."""

    incidents: list[IncidentRow]
    first_evidence: Mapping[int, float]
    actions: list[dict[str, Any]]
    events: list[dict[str, Any]]
    progress: Mapping[tuple[str, int], Mapping[str, Any]]
    #: when the last controller stopped watching (its lease ran out or was given up); None while
    #: one leads, or where none ever did (a replay's store): a running attempt counts to then
    watched_until: float | None = None


def load(store: Store, job: str | None = None) -> Inputs:
    incidents = [r for r in store.incidents() if r.job is not None and (job is None or r.job == job)]
    ids = {r.id for r in incidents}
    return Inputs(
        incidents=incidents,
        first_evidence={k: v for k, v in store.first_evidence(sorted(SOURCE_KINDS)).items() if k in ids},
        actions=[a for a in store.actions() if a["incident"] in ids],
        events=store.job_events(job),
        progress=store.progress_rows(job),
        watched_until=_watched_until(store),
    )


def _watched_until(store: Store) -> float | None:
    try:
        lease = store.lease()
    except StoreError:  # read-only, a database from before the lease
        return None
    return None if lease is None or lease.live else lease.expires


# -- small helpers ---------------------------------------------------------------------------
def is_requeue(action: Mapping[str, Any]) -> bool:
    argv = action.get("argv") or []
    return action["action"] in REQUEUE_ACTIONS or (len(argv) > 1 and argv[1] in REQUEUE_ARGV)


@dataclass
class Attempt:
    """What the store says of one job attempt."""

    attempt: int
    events: list[dict[str, Any]]
    progress: Mapping[str, Any]
    incidents: list[IncidentRow]

    def first(self, states: Iterable[str]) -> float | None:
        s = set(states)
        return next((e["at"] for e in self.events if e["state"] in s), None)

    @property
    def waiting_at(self) -> float | None:
        return self.first(WAITING)

    @property
    def running_at(self) -> float | None:
        return self.first({"RUNNING"})

    @property
    def end(self) -> tuple[str | None, float | None]:
        """Its last state when that is an end (not waiting, not running), and when."""
        if self.events and self.events[-1]["state"] not in JOB_ACTIVE_STATES | WAITING:
            return self.events[-1]["state"], self.events[-1]["at"]
        return None, None

    @property
    def state(self) -> str | None:
        return self.events[-1]["state"] if self.events else None

    def nodes(self) -> list[str]:
        for e in [e for e in self.events if e["state"] == "RUNNING"] + self.events:
            if e["nodes"]:
                return list(e["nodes"])
        return []


def job_attempts(
    job: str, events: list[dict[str, Any]], incidents: list[IncidentRow], progressed: set[int], inputs: Inputs
) -> list[Attempt]:
    """The job's attempts, from its events, progress rows and incidents (each already the job's)."""
    numbers = {e["attempt"] for e in events} | progressed
    numbers |= {int(r.attempt or 0) for r in incidents}
    return [
        Attempt(
            n,
            [e for e in events if e["attempt"] == n],
            inputs.progress.get((job, n), {}),
            sorted((r for r in incidents if int(r.attempt or 0) == n), key=lambda r: r.id),
        )
        for n in sorted(numbers)
    ]
