"""What the goodput report (engine.ops.goodput) reads of the store, and one job attempt as the
store knows it: its scheduler states, its progress row, its incidents. Nothing here computes a
figure; docs/goodput.md says what each input is and who writes it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from engine.facts import JOB_ACTIVE_STATES, SOURCE_KINDS
from engine.store import IncidentRow, Store, StoreError

__all__ = [
    "FAILED",
    "RECORDED",
    "SACCT",
    "WAITING",
    "Attempt",
    "Inputs",
    "attempt_times",
    "is_requeue",
    "job_attempts",
    "load",
    "with_history",
]

#: states of an attempt waiting to run (after a requeue: Slurm's REQUEUED states, then PENDING)
WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
#: end states that are a failure even without an incident
FAILED = frozenset({"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"})
#: journaled actions that requeue the job (by name, or by the command they ran)
REQUEUE_ACTIONS = frozenset({"requeue", "hold"})
REQUEUE_ARGV = frozenset({"requeue", "requeuehold"})
#: where a job's scheduler states came from (each job's ``history``)
RECORDED = "recorded"  # the states the controller's polls saw (job_events)
SACCT = "sacct"  # the scheduler's accounting (Slurm's sacct), which takes precedence
#: sacct's records of a job id are that job's when the store first saw it within this of them
_SAME_JOB_SLACK_S = 300.0


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
    #: per job whose states are the scheduler's accounting: SACCT (the others: RECORDED)
    history: Mapping[str, str] = field(default_factory=dict)
    #: the accounting's record of each attempt of those jobs (``attempt_times``)
    accounted: Mapping[tuple[str, int], Mapping[str, Any]] = field(default_factory=dict)
    #: the scheduler's history: None when not asked; else where it came from and why not sacct
    history_asked: Mapping[str, Any] | None = None


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


def attempt_times(inputs: Inputs, job: str, a: Attempt) -> dict[str, Any]:
    """The attempt's submission, eligible, start and end times and where they came from: sacct's
    record where the job's history is the accounting's, else the recorded states."""
    rec = inputs.accounted.get((job, a.attempt))
    if rec is not None:
        return dict(rec) | {"from": SACCT}
    return {
        "from": RECORDED,
        "submit_at": a.waiting_at,
        "eligible_at": None,
        "start_at": a.running_at,
        "end_at": a.end[1],
    }


def with_history(inputs: Inputs, records: Sequence[Any] | None, note: str = "") -> Inputs:
    """The inputs with each job's states from the scheduler's accounting (``records``: the
    adapter's JobRecord list; None: the site has none, ``note`` says why), where it has the job.
    Its submission, eligible, start and end times take precedence over the recorded states; a job
    it does not have (or whose id it has only from another time) keeps them (docs/goodput.md)."""
    if records is None:
        return replace(inputs, history_asked={"from": RECORDED, "note": note})
    by_job: dict[str, list[Any]] = {}
    for r in records:
        by_job.setdefault(str(r.job_id), []).append(r)
    recorded: dict[str, list[dict[str, Any]]] = {}
    for e in inputs.events:
        recorded.setdefault(str(e["job"]), []).append(e)
    seen: dict[str, float] = {}
    for job, at in [(e["job"], e["at"]) for e in inputs.events] + [
        (j, p.get("first_at")) for (j, _), p in inputs.progress.items()
    ]:
        if at is not None:
            seen[str(job)] = min(at, seen.get(str(job), at))
    for r in inputs.incidents:
        seen[str(r.job)] = min(r.opened_at, seen.get(str(r.job), r.opened_at))
    events: list[dict[str, Any]] = []
    history: dict[str, str] = {}
    accounted: dict[tuple[str, int], dict[str, Any]] = {}
    others = []
    for job in sorted(set(recorded) | set(seen)):
        recs = sorted(by_job.get(job, []), key=lambda r: r.attempt)
        if recs and _same_job(recs, seen.get(job)):
            history[job] = SACCT
            for r in recs:
                events += _events(job, r)
                accounted[(job, r.attempt)] = {
                    "state": r.state,
                    "submit_at": r.submit_at,
                    "eligible_at": r.eligible_at,
                    "start_at": r.start_at,
                    "end_at": r.end_at,
                }
        else:
            if recs:
                others.append(job)
            events += recorded.get(job, [])
    events.sort(key=lambda e: e["at"])
    note = note or (
        f"sacct's records of job(s) {', '.join(others[:5])} are of another time: not used" if others else ""
    )
    return replace(
        inputs,
        events=events,
        history=history,
        accounted=accounted,
        history_asked={"from": SACCT if history else RECORDED, "note": note},
    )


def _same_job(recs: list[Any], seen: float | None) -> bool:
    """Whether the store saw the job while these records' job was in the scheduler."""
    if seen is None:
        return True
    starts = [r.submit_at for r in recs if r.submit_at is not None]
    end = recs[-1].end_at
    return bool(starts) and min(starts) - _SAME_JOB_SLACK_S <= seen <= (end or float("inf")) + _SAME_JOB_SLACK_S


def _events(job: str, r: Any) -> list[dict[str, Any]]:
    """One accounted attempt as the states the report reads: waiting from its submission (a
    requeued attempt's record is submitted when the requeue took effect; the hold before it is
    eligible again is the queue's), running, and its end."""
    base = {"job": job, "attempt": r.attempt, "reason": None, "origin": SACCT}
    out = []
    if r.submit_at is not None:
        out.append(base | {"state": "PENDING", "at": r.submit_at, "nodes": []})
    if r.start_at is not None:
        out.append(base | {"state": "RUNNING", "at": r.start_at, "nodes": list(r.nodes)})
    if r.end_at is not None and r.state not in JOB_ACTIVE_STATES | {"PENDING"}:
        out.append(base | {"state": r.state, "at": r.end_at, "nodes": list(r.nodes)})
    return out
