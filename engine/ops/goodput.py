"""The measured goodput report (``recover goodput``; every figure is defined in docs/goodput.md):
per job attempt and for the cluster, the effective training time ratio (ETTR) and the GPU-hours
each failure cost, split into detection, decision and action, restart, queue and the work lost
since the last checkpoint; by fault class, by node (the lemon list) and by day.

Its inputs are the store's only (``load``, in engine.ops.goodput_inputs): incidents and their first evidence, the actions
journal, the job states the controller saw (``job_events``) and the progress facts of each job
attempt (``progress``), as ``engine.core.ledger`` recorded them. Nothing is re-read from a log.
Where an input is missing the figure is still given, from what the store has, and says so: its
``estimate`` is the reason, None when it is measured.

``measure`` is pure: it takes what ``load`` read and the time it is now. Each failure is a chain
of instants, each at least the one before::

    failed ─ detected ─ requeued ─ pending ─ running ─ resumed (the next attempt's first progress)
      detection  decision  restart    queue    restart

and the work lost is the interval before ``failed`` that the last checkpoint does not cover.
Every figure is an interval clipped to the report's window (``since``, ``until``).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from engine.facts import JOB_ACTIVE_STATES
from engine.ops.goodput_compare import OVERHEAD_CAUSES, compare_job, site_failure_rate
from engine.ops.goodput_inputs import (
    FAILED,
    RECORDED,
    WAITING,
    Attempt,
    Inputs,
    attempt_times,
    is_requeue,
    job_attempts,
    load,
    with_history,
)
from engine.store import IncidentRow, Store

__all__ = ["CAUSES", "DEFAULT_GPUS_PER_NODE", "Inputs", "load", "measure", "report_from_store"]

#: the causes of lost GPU-hours, in the order of a failure's chain
CAUSES = ("work_lost", "detection", "decision", "restart", "queue")
#: GPUs per node when neither --gpus-per-node nor the settings say (docs/goodput.md)
DEFAULT_GPUS_PER_NODE = 8
#: an incident was opened live when its engine clock was the wall clock (engine.ops.report's rule)
LIVE_SKEW_S = 60.0


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d") if math.isfinite(t) else "?"


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if math.isfinite(t) else "?"


def _gh(seconds: float, gpus: int) -> float:
    return seconds * gpus / 3600.0


def _max(*xs: float | None) -> float:
    return max(x for x in xs if x is not None)


class _Figures:
    """One row's figures: seconds and GPU-hours per cause, each with why it is an estimate."""

    def __init__(self) -> None:
        self.s: dict[str, float] = dict.fromkeys(CAUSES, 0.0)
        self.gh: dict[str, float] = dict.fromkeys(CAUSES, 0.0)
        self.why: dict[str, list[str]] = {c: [] for c in CAUSES}

    def add(self, cause: str, seconds: float, gpus: int, why: str | None = None) -> None:
        self.s[cause] += seconds
        self.gh[cause] += _gh(seconds, gpus)
        if why and why not in self.why[cause]:
            self.why[cause].append(why)

    def merge(self, other: "_Figures") -> None:
        for c in CAUSES:
            self.s[c] += other.s[c]
            self.gh[c] += other.gh[c]
            self.why[c] += [w for w in other.why[c] if w not in self.why[c]]

    def total(self) -> float:
        return sum(self.gh.values())

    def gpu_hours(self) -> dict[str, float]:
        return {**{c: self.gh[c] for c in CAUSES}, "total": self.total()}

    def detail(self) -> dict[str, Any]:
        return {
            c: {"seconds": self.s[c], "gpu_hours": self.gh[c], "estimate": "; ".join(self.why[c]) or None}
            for c in CAUSES
        }


class _Job:
    """One job's attempts, failures and figures (see ``measure``)."""

    def __init__(self, job: str, attempts: list[Attempt], inputs: Inputs, k: int, lo: float, hi: float, now: float):
        self.job, self.attempts, self.inputs, self.k = job, attempts, inputs, k
        self.lo, self.hi, self.now = lo, hi, now
        self.estimates: list[str] = []
        self.failures: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []
        self.figures = _Figures()

    def note(self, why: str, into: list[str] | None = None) -> str:
        for where in (self.estimates, into):
            if where is not None and why not in where:
                where.append(why)
        return why

    def gpus(self, a: Attempt, notes: list[str]) -> tuple[list[str], int]:
        nodes = a.nodes()
        if not nodes:
            for other in self.attempts:  # the job's allocation as another attempt had it
                nodes = other.nodes()
                if nodes:
                    self.note(f"attempt {a.attempt}: no allocation recorded; attempt {other.attempt}'s nodes", notes)
                    break
        if not nodes:
            named = sorted({n for r in a.incidents for n in r.nodes})
            nodes = named
            self.note(
                f"attempt {a.attempt}: no allocation recorded; "
                + (f"the {len(named)} node(s) its incident names" if named else "taken as 1 node"),
                notes,
            )
        return nodes, max(1, len(nodes)) * self.k

    def failed(self, i: int, notes: list[str]) -> bool:
        """Whether attempt i failed (docs/goodput.md, "A failure's chain")."""
        a = self.attempts[i]
        later = i + 1 < len(self.attempts)
        state, _ = a.end
        if later or state in FAILED:
            return True
        if not a.incidents:
            return False
        if not a.events:  # no scheduler history: the incident is taken as the attempt's end
            self.note(f"attempt {a.attempt}: no scheduler history; its incident taken as its end", notes)
            return True
        return state is not None and state != "COMPLETED"

    def incident_time(self, r: IncidentRow, notes: list[str]) -> tuple[float, str | None]:
        """When Recover opened the incident (wall clock), and why that is an estimate if it is."""
        if abs(r.detected_wall - r.opened_at) <= LIVE_SKEW_S:
            return r.detected_wall, None
        why = f"incident {r.id} was not opened live (replayed, or on another clock): detected at its opening evidence's time"
        return r.opened_at, self.note(why, notes)

    def requeued_at(self, a: Attempt) -> float | None:
        ids = {r.id for r in a.incidents}
        times = [
            x["issued_at"]
            for x in self.inputs.actions
            if x["incident"] in ids and x["mode"] == "act" and is_requeue(x) and x.get("issued_at") is not None
        ]
        return min(times) if times else None

    def run(self) -> None:
        start: float | None = None
        end = min(self.hi, self.now)
        watched = self.inputs.watched_until
        why_end = "" if watched is None or watched >= end else " (when the last controller stopped watching)"
        end = end if watched is None else min(end, watched)
        first = self.attempts[0]
        submit = first.events[0]["at"] if first.events else None
        if submit is None:
            submit = first.progress.get("first_at")
            self.note(
                "no scheduler history: the job's wall time starts at its first progress"
                if submit is not None
                else "no scheduler history and no progress: no wall time is known"
            )
        elif first.events[0]["state"] not in WAITING:
            self.note(
                f"no PENDING state recorded: the job's wall time starts at its first state ({first.events[0]['state']})"
            )
        job_end = submit
        for i, a in enumerate(self.attempts):
            notes: list[str] = []
            nodes, gpus = self.gpus(a, notes)
            p = a.progress.get("first_at")
            if p is None and a.running_at is not None:
                p = a.running_at
                self.note(f"attempt {a.attempt}: no progress recorded; productive from when it ran", notes)
            if start is None:
                start = submit if submit is not None else (p if p is not None else a.first(WAITING | {"RUNNING"}))
            failed = self.failed(i, notes)
            state, ended_at = a.end
            if failed:
                f = self.failure(i, gpus, p, notes)
                r, nxt = f["failed_at"], f["_next_start"]
            else:
                if ended_at is not None:
                    r = ended_at
                elif a.state in JOB_ACTIVE_STATES | WAITING:
                    r = end
                    self.note(
                        f"attempt {a.attempt}: {a.state} at its last recorded state; counted as running to {_stamp(r)}"
                        + why_end,
                        notes,
                    )
                else:
                    r = _max(a.progress.get("last_at"), p, start, 0.0)
                    if not a.events:
                        self.note(f"attempt {a.attempt}: no scheduler history; it ends at its last progress", notes)
                nxt = r
            if start is None:
                start = r
            run_from = max(p, start) if p is not None else r
            lost = self.failures[-1]["_lost"] if failed else (r, r)
            productive = max(
                0.0, _overlap(run_from, r, self.lo, self.hi) - _overlap(lost[0], lost[1], self.lo, self.hi)
            )
            stop = max(nxt, r, start)
            wall = _overlap(start, stop, self.lo, self.hi)
            self.rows.append(
                {
                    "attempt": a.attempt,
                    "state": state or a.state,
                    "failed": failed,
                    "nodes": nodes,
                    "gpus": gpus,
                    "start_at": start,
                    "end_at": stop,
                    "wall_s": wall,
                    "productive_s": productive,
                    "ettr": productive / wall if wall > 0 else None,
                    "estimates": notes,
                    "scheduler": attempt_times(self.inputs, self.job, a),
                    # for the model beside it (engine.ops.goodput_compare); not printed
                    "_running_s": _overlap(run_from, r, self.lo, self.hi),
                    "_progress": a.progress,
                }
            )
            job_end = stop
            start = stop
        self.submit, self.end_at = submit if submit is not None else self.rows[0]["start_at"], job_end

    def failure(self, i: int, gpus: int, p: float | None, notes: list[str]) -> dict[str, Any]:
        """The failure of attempt i: its chain of instants, and what each step of it cost."""
        a = self.attempts[i]
        nxt = self.attempts[i + 1] if i + 1 < len(self.attempts) else None
        prog = a.progress
        first = self.inputs.first_evidence
        inc = min(a.incidents, key=lambda r: (first.get(r.id, r.opened_at), r.id), default=None)
        evidence = first.get(inc.id, inc.opened_at) if inc is not None else None
        # failed: the last progress it printed; else its first evidence; else its end state
        failed_at = next((t for t in (prog.get("last_at"), evidence, a.end[1]) if t is not None), None)
        if failed_at is None:
            failed_at = _max(a.running_at, a.first(WAITING), p, 0.0)
            self.note(f"attempt {a.attempt}: nothing tells when it failed; taken at {_stamp(failed_at)}", notes)
        fig = _Figures()
        clip = self.lo, self.hi

        # detection: to the incident Recover opened
        if inc is not None:
            opened, why = self.incident_time(inc, notes)
            detected = max(failed_at, opened)
        else:
            detected = failed_at
            why = self.note(f"attempt {a.attempt}: no incident: Recover did not detect this failure", notes)
        fig.add("detection", _overlap(failed_at, detected, *clip), gpus, why)

        # decision and action: to the requeue Recover started, else the scheduler's next attempt
        requeued, why = self.requeued_at(a), None
        if requeued is None and nxt is not None and nxt.events:
            requeued = nxt.events[0]["at"]
            why = self.note(
                f"attempt {a.attempt}: no requeue started in the journal; the next attempt's first state", notes
            )
        elif requeued is None and nxt is not None:
            why = self.note(
                f"attempt {a.attempt}: no requeue and no scheduler history: decision, queue and start-up counted as restart",
                notes,
            )
        if requeued is not None:
            issued = max(detected, requeued)
        else:  # nothing requeued it: to the attempt's end, if the scheduler saw one after the incident
            issued = max(detected, a.end[1] if nxt is None and a.end[1] is not None else detected)
        fig.add("decision", _overlap(detected, issued, *clip), gpus, why)

        # restart: the requeue's teardown (to the next attempt waiting) and its start-up (from
        # running to its first progress); queue: waiting to running
        why_restart, why_queue = (why if requeued is None else None), None
        waiting = running = resumed = issued
        if nxt is not None:
            waiting = max(issued, nxt.waiting_at) if nxt.waiting_at is not None else issued
            running = nxt.running_at if nxt.running_at is not None else waiting
            if nxt.running_at is None and nxt.events:
                why_restart = self.note(
                    f"attempt {nxt.attempt}: no RUNNING state recorded: its queue time counted as restart", notes
                )
            running = max(waiting, running)
            resumed = nxt.progress.get("first_at")
            if resumed is None:
                resumed = running
                why_restart = self.note(f"attempt {nxt.attempt}: no progress recorded: resumed when it ran", notes)
            resumed = max(running, resumed)
        elif requeued is not None:  # requeued, and no later attempt recorded: still waiting
            running = resumed = max(issued, min(self.hi, self.now))
            why_queue = self.note(
                f"attempt {a.attempt}: requeued, no later attempt recorded: queued to the report's end", notes
            )
        fig.add("restart", _overlap(issued, waiting, *clip) + _overlap(running, resumed, *clip), gpus, why_restart)
        fig.add("queue", _overlap(waiting, running, *clip), gpus, why_queue)

        # work lost: what the last completed checkpoint does not cover, at the job's own step time
        lost_s, lost_steps, step_time, why = self.work_lost(i, failed_at, p)
        lost_s = max(0.0, min(lost_s, failed_at - p)) if p is not None else 0.0
        lost = (failed_at - lost_s, failed_at)
        fig.add("work_lost", _overlap(*lost, *clip), gpus, why and self.note(f"attempt {a.attempt}: {why}", notes))
        self.figures.merge(fig)

        named = list(inc.nodes) if inc is not None else []
        if inc is not None and not named:  # no node in its fault: the suspects it named
            named = sorted({str(s["node"]) for s in inc.suspects if s.get("node")})
        row = {
            "job": self.job,
            "history": self.inputs.history.get(self.job, RECORDED),
            "attempt": a.attempt,
            "incident": inc.id if inc is not None else None,
            "fault_class": (inc.fault_class or "unknown") if inc is not None else "(no incident)",
            "incident_decision": inc.decision if inc is not None else None,
            "nodes": named,
            "gpus": gpus,
            "day": _day(failed_at),
            "failed_at": failed_at,
            "detected_at": detected,
            "requeued_at": requeued,
            "waiting_at": waiting if nxt is not None else None,
            "running_at": running if nxt is not None else None,
            "resumed_at": resumed if nxt is not None else None,
            "step": prog.get("step"),
            "checkpoint": self.checkpoint(i)[0],
            "step_time_s": step_time,
            "lost_steps": lost_steps,
            "lost": fig.detail(),
            "lost_gpu_hours": fig.total(),
            "estimated": any(fig.why[c] for c in CAUSES),
            "_lost": lost,
            "_next_start": resumed,
            "_figures": fig,
            "_span": (lost[0], resumed),
        }
        self.failures.append(row)
        return row

    def checkpoint(self, i: int) -> tuple[int | None, float | None]:
        """The last completed checkpoint before attempt i failed: its own, else an earlier attempt's."""
        for a in reversed(self.attempts[: i + 1]):
            if a.progress.get("checkpoint") is not None:
                return a.progress["checkpoint"], a.progress.get("checkpoint_at")
        return None, None

    def work_lost(
        self, i: int, failed_at: float, p: float | None
    ) -> tuple[float, int | None, float | None, str | None]:
        """(seconds, steps, step time, why it is an estimate) of the work the failure of attempt i
        lost: (its last step - the last completed checkpoint) x the step time it printed."""
        prog = self.attempts[i].progress
        step, first_step = prog.get("step"), prog.get("first_step")
        step_time, why = prog.get("step_time"), []
        if step_time is None and step is not None and first_step is not None and step > first_step:
            first_at, last_at = prog.get("first_at"), prog.get("last_at")
            if first_at is not None and last_at is not None and last_at > first_at:
                step_time = (last_at - first_at) / (step - first_step)
                why.append("no step time printed: from its progress lines' times and steps")
        ckpt, ckpt_at = self.checkpoint(i)
        if ckpt is None and i + 1 < len(self.attempts):
            resumed = self.attempts[i + 1].progress.get("first_step")
            if resumed is not None and step is not None and step_time is not None:
                ckpt = resumed
                why.append("no checkpoint recorded: the step the next attempt resumed at taken as the checkpoint")
        if ckpt is not None and step is not None and step_time is not None:
            steps = max(0, step - ckpt)
            return steps * step_time, steps, step_time, "; ".join(why) or None
        if ckpt_at is not None:
            return failed_at - ckpt_at, None, step_time, "no step time: the time since the checkpoint was written"
        if p is None:
            return 0.0, None, step_time, "no step time and no progress times recorded: no work counted as lost"
        why = ["no checkpoint recorded: the attempt's whole progress counted as lost (an upper bound)"]
        return failed_at - p, None, step_time, why[0]


def measure(
    inputs: Inputs,
    *,
    now: float,
    since: float | None = None,
    until: float | None = None,
    job: str | None = None,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    gpus_from: str = "default",
) -> dict[str, Any]:
    """The report (docs/goodput.md): ``cluster``, ``jobs``, ``failures``, ``by_class``,
    ``by_node``, ``by_day``, and the window and GPU count it was computed with."""
    lo = since if since is not None else -math.inf
    hi = until if until is not None else math.inf
    events: dict[str, list[dict[str, Any]]] = {}
    for e in inputs.events:
        events.setdefault(str(e["job"]), []).append(e)
    incidents: dict[str, list[IncidentRow]] = {}
    for r in inputs.incidents:
        incidents.setdefault(str(r.job), []).append(r)
    progressed: dict[str, set[int]] = {}
    for j_, k_ in inputs.progress:
        progressed.setdefault(j_, set()).add(k_)
    names = set(events) | set(progressed) | set(incidents)
    jobs_out, failures = [], []
    kept: list[list[dict[str, Any]]] = []
    cluster = _Figures()
    wall_gh = productive_gh = 0.0
    attempts = 0
    for name in sorted(n for n in names if job is None or n == job):
        mine = job_attempts(name, events.get(name, []), incidents.get(name, []), progressed.get(name, set()), inputs)
        j = _Job(name, mine, inputs, gpus_per_node, lo, hi, now)
        j.run()
        # a failure in the window: its chain overlaps it, or (a chain of no length) lies in it
        fails = [f for f in j.failures if (f["_span"][1] > lo or f["_span"][0] >= lo) and f["_span"][0] < hi]
        failed = {f["attempt"] for f in fails}
        rows = [r for r in j.rows if r["wall_s"] > 0 or r["attempt"] in failed]
        if not rows:
            continue
        job_wall = sum(r["wall_s"] for r in rows)
        job_productive = sum(r["productive_s"] for r in rows)
        w_gh = sum(_gh(r["wall_s"], r["gpus"]) for r in rows)
        p_gh = sum(_gh(r["productive_s"], r["gpus"]) for r in rows)
        wall_gh, productive_gh, attempts = wall_gh + w_gh, productive_gh + p_gh, attempts + len(rows)
        cluster.merge(j.figures)
        failures += fails
        kept.append(rows)
        jobs_out.append(
            {
                "job": name,
                "history": inputs.history.get(name, RECORDED),
                "state": j.attempts[-1].state,
                "attempts": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
                "failures": len(fails),
                "submitted_at": j.submit,
                "end_at": j.end_at,
                "wall_s": job_wall,
                "productive_s": job_productive,
                "ettr": job_productive / job_wall if job_wall > 0 else None,
                "wall_gpu_hours": w_gh,
                "productive_gpu_hours": p_gh,
                "lost_gpu_hours": j.figures.gpu_hours(),
                "estimates": j.estimates,
            }
        )
    groups: dict[str, dict[str, dict[str, Any]]] = {"fault_class": {}, "day": {}, "node": {}}
    for f in failures:
        fig: _Figures = f["_figures"]
        for key in ("fault_class", "day"):
            g = groups[key].setdefault(f[key], {key: f[key], "failures": 0, "_f": _Figures()})
            g["failures"] += 1
            g["_f"].merge(fig)
        nodes = f["nodes"] or ["(none named)"]
        for n in nodes:  # the lemon list: a failure's cost shared by the nodes its incident names
            g = groups["node"].setdefault(n, {"node": n, "failures": 0, "lost_gpu_hours": 0.0})
            g["failures"] += 1
            g["lost_gpu_hours"] += fig.total() / len(nodes)

    def grouped(key: str) -> list[dict[str, Any]]:
        out = []
        for g in groups[key].values():
            fig = g.pop("_f")
            out.append(g | {"lost_gpu_hours": fig.gpu_hours()})
        return out

    by_class = sorted(grouped("fault_class"), key=lambda g: -g["lost_gpu_hours"]["total"])
    by_day = sorted(grouped("day"), key=lambda g: g["day"])
    by_node = sorted(groups["node"].values(), key=lambda g: (-g["lost_gpu_hours"], g["node"]))
    estimated = sorted({w for jo in jobs_out for w in jo["estimates"]})
    # measured against modelled: the site's failure rate over the window, then each job's model
    site = site_failure_rate(
        len(failures), sum(r["_running_s"] * r["gpus"] / gpus_per_node for rows in kept for r in rows)
    )
    overheads = [sum(f["lost"][c]["seconds"] for c in OVERHEAD_CAUSES) for f in failures]
    site_restart = sum(overheads) / len(overheads) if overheads else None
    for jo, rows in zip(jobs_out, kept):
        jo["model"] = compare_job(jo, rows, [f for f in failures if f["job"] == jo["job"]], site, site_restart)
    return {
        "since": since,
        "until": until,
        "job": job,
        "now": now,
        "gpus_per_node": gpus_per_node,
        "gpus_per_node_from": gpus_from,
        "cluster": {
            "jobs": len(jobs_out),
            "attempts": attempts,
            "failures": len(failures),
            "wall_gpu_hours": wall_gh,
            "productive_gpu_hours": productive_gh,
            "ettr": productive_gh / wall_gh if wall_gh > 0 else None,
            "lost_gpu_hours": cluster.gpu_hours(),
            "estimated": bool(estimated),
        },
        "jobs": jobs_out,
        "failures": [{k: v for k, v in f.items() if not k.startswith("_")} for f in failures],
        "by_class": by_class,
        "by_node": by_node,
        "by_day": by_day,
        "failure_rate": site,
        "estimates": estimated,
        # where the job states came from: sacct where asked and it had the job, else recorded
        "history": dict(inputs.history_asked or {"from": RECORDED, "note": "the scheduler was not asked"})
        | {"jobs_from_sacct": sorted(jo["job"] for jo in jobs_out if jo["history"] != RECORDED)},
    }


def report_from_store(store: Store, history: tuple[Any, str] | None = None, **kw: Any) -> dict[str, Any]:
    """``measure(load(store, job), ...)``; with ``history`` (the scheduler adapter's records, or
    None and why it has none), the job states of the scheduler's accounting first."""
    inputs = load(store, kw.get("job"))
    if history is not None:
        inputs = with_history(inputs, *history)
    return measure(inputs, **kw)
