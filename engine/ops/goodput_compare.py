"""Measured against modelled ETTR, per job (docs/goodput.md, "Measured against modelled").

For each job of the measured report (engine.ops.goodput), the model of engine.ops.goodput_model
is given the job's own inputs, as the store measured them:

* the site's failure rate per node-day over the report's window: the failures in it over the
  node-days the jobs in it ran (an attempt's nodes x its running time, first progress to failure
  or end);
* N: the job's nodes (the most any attempt of it held);
* Δt: its checkpoint interval: the greatest common divisor of the checkpoint steps recorded for
  it (a periodic checkpoint lands on multiples of its interval) x the step time it printed;
* u0: its restart overhead: the mean, over its failures, of detection + decision + restart +
  queue (everything but the work lost, which the model counts as Δt/2);
* w_cp: the checkpoint write time, which nothing records: taken as 0.

Each input that is not measured says so (``estimates``), as every figure of the report does.
Pure: it reads the report's rows, nothing else.
"""

from __future__ import annotations

import math
import statistics
from functools import reduce
from typing import Any, Mapping, Sequence

from engine.ops.goodput_model import SECONDS_PER_DAY, expected_ettr

__all__ = ["OVERHEAD_CAUSES", "WRITE_NOT_MEASURED", "site_failure_rate", "compare_job"]

#: the causes the model's u0 stands for (work lost is its Δt/2)
OVERHEAD_CAUSES = ("detection", "decision", "restart", "queue")
WRITE_NOT_MEASURED = "checkpoint write time: not recorded by anything, taken as 0"


def site_failure_rate(failures: int, node_seconds: float) -> dict[str, Any]:
    """The site's failures per node-day over the window: ``failures`` over the node-days run."""
    node_days = node_seconds / SECONDS_PER_DAY
    rate = failures / node_days if node_days > 0 else None
    return {"failures": failures, "node_days": node_days, "failure_rate_per_node_day": rate}


def _step_time(
    attempts: Sequence[Mapping[str, Any]], failures: Sequence[Mapping[str, Any]]
) -> tuple[float | None, str | None]:
    printed = [a["_progress"].get("step_time") for a in attempts if a["_progress"].get("step_time")]
    if printed:
        return statistics.median(printed), None
    derived = [f["step_time_s"] for f in failures if f.get("step_time_s")]
    for a in attempts:
        p = a["_progress"]
        if None not in (p.get("first_at"), p.get("last_at"), p.get("first_step"), p.get("step")):
            if p["step"] > p["first_step"] and p["last_at"] > p["first_at"]:
                derived.append((p["last_at"] - p["first_at"]) / (p["step"] - p["first_step"]))
    if derived:
        return statistics.median(derived), "no step time printed: from its progress lines' times and steps"
    return None, None


def _interval(
    attempts: Sequence[Mapping[str, Any]], failures: Sequence[Mapping[str, Any]]
) -> tuple[float | None, int | None, list[str]]:
    """(seconds, steps, why it is an estimate) of the job's checkpoint interval."""
    notes: list[str] = []
    steps = sorted({int(a["_progress"]["checkpoint"]) for a in attempts if (a["_progress"].get("checkpoint") or 0) > 0})
    running = sum(a["_running_s"] for a in attempts)
    step_time, why = _step_time(attempts, failures)
    if not steps:
        notes.append("checkpoint interval: no checkpoint recorded, taken as the job's whole running time")
        return (running if running > 0 else None), None, notes
    every = reduce(math.gcd, steps)
    if len(steps) == 1:
        notes.append(f"checkpoint interval: one checkpoint recorded (step {steps[0]}): its step taken as the interval")
    if step_time is None:
        notes.append("checkpoint interval: no step time known: taken as the job's whole running time")
        return (running if running > 0 else None), every, notes
    if why:
        notes.append(f"checkpoint interval: {why}")
    return every * step_time, every, notes


def compare_job(
    job: Mapping[str, Any],
    attempts: Sequence[Mapping[str, Any]],
    failures: Sequence[Mapping[str, Any]],
    site: Mapping[str, Any],
    site_restart_s: float | None,
) -> dict[str, Any]:
    """The model's expected ETTR for one job beside its measured one (the ``model`` of a job)."""
    notes: list[str] = []
    nodes = max((len(a["nodes"]) for a in attempts), default=0)
    if nodes == 0:
        nodes = 1
        notes.append("nodes: none recorded, taken as 1")
    rate = site["failure_rate_per_node_day"]
    interval, every, why = _interval(attempts, failures)
    notes += why
    own = [f for f in failures if f["job"] == job["job"]]
    if own:
        restart = statistics.fmean(sum(f["lost"][c]["seconds"] for c in OVERHEAD_CAUSES) for f in own)
        if any(f["lost"][c]["estimate"] for f in own for c in OVERHEAD_CAUSES):
            notes.append("restart overhead: from failure figures that are themselves estimates")
    elif site_restart_s is not None:
        restart = site_restart_s
        notes.append("restart overhead: the job did not fail; the site's mean over its failures")
    else:
        restart = 0.0
        notes.append("restart overhead: no failure in the window to measure it; taken as 0")
    notes.append(WRITE_NOT_MEASURED)
    ettr: float | None = None
    valid = False
    loss: float | None = None
    if rate is None:
        notes.append("failure rate: no node-days run in the window; no model")
    elif interval is None or interval <= 0:
        notes.append("checkpoint interval: nothing to measure it from; no model")
    else:
        lam = nodes * rate / SECONDS_PER_DAY
        loss = lam * (restart + interval / 2.0)
        valid = loss < 1.0
        ettr = (expected_ettr(lam, interval, restart, 0.0) if lam > 0 else 1.0) if valid else None
        if not valid:
            notes.append("the approximation breaks down here (failures would cost the whole run): no ETTR")
    measured = job["ettr"]
    return {
        "measured_ettr": measured,
        "ettr": ettr,
        "gap": None if ettr is None or measured is None else measured - ettr,
        "valid": valid,
        "nodes": nodes,
        "failure_rate_per_node_day": rate,
        "interval_s": interval,
        "interval_steps": every,
        "restart_s": restart,
        "write_s": 0.0,
        "failure_loss": loss,
        "estimates": notes,
    }
