"""What a candidate rulebook or policy would have done to the lost GPU-hours (``recover goodput
--what-if``; docs/goodput.md, "What-if").

The stored incidents are re-decided under the rulebook in force and under the candidate with the
machinery of ``recover rules diff`` (engine.ops.rulediff). For each incident whose verdict
changes, and, when the candidate's ``settle`` differs, each incident whose restart would have
come sooner or later, the GPU-hours it would have saved (positive) or cost (negative) are
estimated from the measured report (engine.ops.goodput): its failure row, its job's later
attempts and failures. Each estimate states the assumptions it rests on; none is a forecast.

Pure over its inputs: the changes, the report and the two settle windows.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from engine.ops.rulediff import Change

__all__ = ["RESTARTS", "HALTS", "policy_overlay", "estimate"]

#: decisions that requeue the job; everything else leaves it where the failure left it
RESTARTS = frozenset({"restart", "isolate_and_restart"})
HALTS = frozenset({"stop", "observe"})


def policy_overlay(pairs: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a policy mapping: dotted keys nest (``blast_radius.max_drains=3``),
    values are read as YAML scalars (``settle=30s``, ``max_restarts=1``). ValueError on a pair
    without ``=`` or with an empty key."""
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ValueError(f"--policy {pair!r}: give KEY=VALUE, e.g. settle=30s")
        node = out
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ValueError(f"--policy {pair!r}: {p} is given both a value and keys")
            node = nxt
        node[parts[-1]] = yaml.safe_load(value) if value.strip() else ""
    return out


def _gh(seconds: float, gpus: int) -> float:
    return seconds * gpus / 3600.0


class _Job:
    """One job of the report: its attempts and failures, by attempt."""

    def __init__(self, job: Mapping[str, Any], failures: Sequence[Mapping[str, Any]], k: int):
        self.job, self.k = job, k
        self.attempts = {a["attempt"]: a for a in job["attempts"]}
        self.failures = {f["attempt"]: f for f in failures if f["job"] == job["job"]}

    def later(self, attempt: int) -> list[Mapping[str, Any]]:
        return [a for n, a in sorted(self.attempts.items()) if n > attempt]

    def wall_gh(self, a: Mapping[str, Any]) -> float:
        return _gh(a["wall_s"], a["gpus"])


def _decision(verdicts: Sequence[Any]) -> str | None:
    return verdicts[0].decision if verdicts else None


def _one(change: Change, f: Mapping[str, Any] | None, job: _Job | None) -> tuple[float, list[str]]:
    """(GPU-hours saved, the assumptions) for one changed verdict."""
    old, new = _decision(change.old), _decision(change.new)
    old_nodes = set(change.old[0].nodes) if change.old else set()
    new_nodes = set(change.new[0].nodes) if change.new else set()
    if f is None or job is None:
        return 0.0, ["no failure of a job attempt is recorded for this incident: nothing to re-cost"]
    attempt = f["attempt"]
    later = job.later(attempt)
    restarts_old, restarts_new = old in RESTARTS, new in RESTARTS
    if restarts_old and not restarts_new:
        why = f"{new or 'no incident'} instead of {old}: nothing requeues the job after this failure"
        done = [a for a in later if a["state"] == "COMPLETED"]
        if done:
            lost = sum(_gh(a["productive_s"], a["gpus"]) for a in later)
            return -lost, [
                why,
                "the job completed after the restart: stopping forgoes the productive GPU-hours of its "
                "later attempts (an upper bound: a person may resubmit it from its checkpoint)",
            ]
        saved = f["lost"]["restart"]["gpu_hours"] + f["lost"]["queue"]["gpu_hours"]
        saved += sum(job.wall_gh(a) for a in later)
        return saved, [
            why,
            "the restart did not lead to a completed run: the failed attempts' GPU-hours after it "
            "(its restart and queue, and the later attempts' whole wall time) are saved",
        ]
    if restarts_new and not restarts_old:
        a = job.attempts.get(attempt)
        cost = job.wall_gh(a) if a is not None else f["lost_gpu_hours"]
        return -cost, [
            f"{new} instead of {old or 'no incident'}: the job is requeued",
            "the restart is assumed to fail again the same way (the fault the old decision stopped for "
            "repeats), after as long: one more attempt like the failed one, its whole wall time",
            "one restart only: the retry budget is assumed to stop it then",
        ]
    if restarts_new and restarts_old and new_nodes - old_nodes:
        excluded = new_nodes - old_nodes
        avoided = [g for n, g in sorted(job.failures.items()) if n > attempt and set(g["nodes"]) & excluded]
        saved = sum(g["lost_gpu_hours"] for g in avoided)
        return saved, [
            f"{new} excluding {', '.join(sorted(excluded))} as well: the job does not run there again",
            (
                f"the later failure(s) of attempt(s) {', '.join(str(g['attempt']) for g in avoided)} on "
                f"{', '.join(sorted(excluded))} would not have happened: their lost GPU-hours are saved"
                if avoided
                else "no later failure of the job was on those nodes: nothing saved"
            ),
            "the excluded nodes' capacity and a drain's cost to other jobs are not counted",
        ]
    if restarts_new and restarts_old and old_nodes - new_nodes:
        return 0.0, [
            f"{new} no longer excluding {', '.join(sorted(old_nodes - new_nodes))}: whether the job would "
            "have landed there again and failed is not known: not estimated (0)",
        ]
    return 0.0, [f"the same course of action ({new}): only the record changes (class or nodes)"]


def estimate(
    changes: Sequence[Change],
    report: Mapping[str, Any],
    *,
    incidents: int,
    settle_old: float,
    settle_new: float,
) -> dict[str, Any]:
    """The what-if: one row per incident that changes, with ``gpu_hours_saved`` (negative: a
    cost) and its ``assumptions``, and their total."""
    k = int(report["gpus_per_node"])
    by_incident = {f["incident"]: f for f in report["failures"] if f["incident"] is not None}
    jobs = {j["job"]: _Job(j, report["failures"], k) for j in report["jobs"]}
    rows: dict[int, dict[str, Any]] = {}
    for c in changes:
        f = by_incident.get(c.incident)
        saved, why = _one(c, f, jobs.get(str(c.job)) if c.job is not None else None)
        rows[c.incident] = c.to_dict() | {"gpu_hours_saved": saved, "assumptions": why}
    shift = settle_old - settle_new
    if shift:
        for f in report["failures"]:
            inc = f["incident"]
            # only a plain restart waits for the settle; isolation acts at once (docs/goodput.md)
            if inc is None or f["incident_decision"] != "restart" or f["requeued_at"] is None:
                continue
            row = rows.get(inc)
            if row is not None and _decision_kind(row["new"]) != "restart":
                continue  # re-decided away from a plain restart: the settle no longer delays it
            delay = f["lost"]["decision"]["seconds"]
            seconds = min(shift, delay) if shift > 0 else shift
            reason = (
                f"settle {settle_new:g}s instead of {settle_old:g}s: the requeue "
                + (
                    f"comes {seconds:g}s sooner (at most the decision delay measured, {delay:g}s)"
                    if shift > 0
                    else f"comes {-seconds:g}s later"
                )
                + "; the GPUs are held, idle, meanwhile"
            )
            saved = _gh(seconds, int(f["gpus"]))
            if row is None:
                row = rows[inc] = {
                    "incident": inc,
                    "job": f["job"],
                    "attempt": f["attempt"],
                    "changed": [],
                    "old": [],
                    "new": [],
                    "gpu_hours_saved": 0.0,
                    "assumptions": [],
                }
            row["changed"].append("settle")
            row["gpu_hours_saved"] += saved
            row["assumptions"].append(reason)
    out = [rows[i] for i in sorted(rows)]
    return {
        "incidents": incidents,
        "changed": out,
        "gpu_hours_saved": sum(r["gpu_hours_saved"] for r in out),
        "settle_s": {"base": settle_old, "candidate": settle_new},
    }


def _decision_kind(verdicts: Sequence[Mapping[str, Any]]) -> str | None:
    return str(verdicts[0]["decision"]) if verdicts else None
