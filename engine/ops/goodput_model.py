"""The analytical goodput model: what a job's expected effective training time ratio (ETTR) is
for a site's failure rate, the job's size, its checkpoint interval, checkpoint write time and
restart overhead.

It is the small-loss approximation of Kokolis et al., "Revisiting Reliability in Large-Scale
ML Research Clusters" (HPCA 2025)::

    E[ETTR] ≈ (1 − N·r_f·(u0 + Δt/2)) / (1 + w_cp/Δt)

N nodes fail at r_f each, so the job fails every 1/(N·r_f) on average (the MTTF). Each failure
costs the restart overhead u0 plus, on average, half a checkpoint interval of lost work; each
interval of work also pays one checkpoint write w_cp. The checkpoint interval that maximises
it is Young/Daly's first-order optimum Δt* ≈ √(2·w_cp/(N·r_f)).

Pure functions, no I/O: the CLI (``recover goodput --model``) parses and prints; docs/goodput.md
defines every figure. Times are seconds here; the failure rate is per node-day as sites count
it (the paper's 6.5 failures per 1,000 node-days is 0.0065) and turned into per-second below.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.errors import RecoverError

__all__ = [
    "SECONDS_PER_DAY",
    "ModelError",
    "ModelResult",
    "job_failure_rate",
    "mttf_seconds",
    "expected_ettr",
    "young_daly_interval",
    "model",
]

SECONDS_PER_DAY = 86400.0


class ModelError(RecoverError, ValueError):
    """An input the model cannot use (not a finite number, or out of its range)."""


@dataclass(frozen=True)
class ModelResult:
    """The model's answer for one job. ``ettr`` is None where the approximation breaks down (the
    expected loss to failures reaches the whole run), never a negative ratio; ``best_interval_s``
    is None without a checkpoint write time (Young/Daly needs w_cp > 0)."""

    nodes: float
    failure_rate_per_node_day: float
    interval_s: float
    restart_s: float
    write_s: float
    write_given: bool
    mttf_hours: float
    failures_per_day: float
    #: the numerator's loss: the fraction of time failures cost (restart plus lost work)
    failure_loss: float
    #: the denominator's cost: checkpoint write time per second of work
    checkpoint_overhead: float
    ettr: float | None
    valid: bool
    best_interval_s: float | None
    ettr_at_best_interval: float | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check(name: str, value: float, *, positive: bool) -> float:
    # bool is an int in Python; a True failure rate is a caller's bug, not 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"{name} must be a number, not {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ModelError(f"{name} must be a finite number, not {value!r}")
    if positive and v <= 0:
        raise ModelError(f"{name} must be greater than 0, not {value!r}")
    if v < 0:
        raise ModelError(f"{name} must not be negative, not {value!r}")
    return v


def job_failure_rate(nodes: float, failure_rate_per_node_day: float) -> float:
    """N·r_f in failures per second: the job fails when any one of its nodes does."""
    n = _check("nodes", nodes, positive=True)
    r = _check("failure rate", failure_rate_per_node_day, positive=True)
    return n * r / SECONDS_PER_DAY


def mttf_seconds(nodes: float, failure_rate_per_node_day: float) -> float:
    """The job's mean time to failure, 1/(N·r_f), in seconds."""
    return 1.0 / job_failure_rate(nodes, failure_rate_per_node_day)


def expected_ettr(rate_per_s: float, interval_s: float, restart_s: float, write_s: float = 0.0) -> float:
    """The formula as written; it can be ≤ 0 where the small-loss approximation no longer holds
    (``model`` says so instead of returning such a ratio)."""
    lam = _check("job failure rate", rate_per_s, positive=True)
    dt = _check("checkpoint interval", interval_s, positive=True)
    u0 = _check("restart overhead", restart_s, positive=False)
    w = _check("checkpoint write time", write_s, positive=False)
    return (1.0 - lam * (u0 + dt / 2.0)) / (1.0 + w / dt)


def young_daly_interval(rate_per_s: float, write_s: float) -> float:
    """Δt* ≈ √(2·w_cp/(N·r_f)) seconds: checkpointing more often writes more, less often loses
    more work per failure; this balances the two to first order."""
    lam = _check("job failure rate", rate_per_s, positive=True)
    w = _check("checkpoint write time", write_s, positive=True)
    return math.sqrt(2.0 * w / lam)


def model(
    nodes: float,
    failure_rate_per_node_day: float,
    interval_s: float,
    restart_s: float,
    write_s: float | None = None,
) -> ModelResult:
    """Every figure of the model for one job. ``write_s=None`` means the write time is not known:
    it is taken as 0 (the paper's worked figures leave it out) and the note says so."""
    lam = job_failure_rate(nodes, failure_rate_per_node_day)
    dt = _check("checkpoint interval", interval_s, positive=True)
    u0 = _check("restart overhead", restart_s, positive=False)
    w = 0.0 if write_s is None else _check("checkpoint write time", write_s, positive=False)
    notes: list[str] = []
    if write_s is None:
        notes.append("no --write given: the checkpoint write time is taken as 0 (writes cost nothing)")

    loss = lam * (u0 + dt / 2.0)
    ettr = expected_ettr(lam, dt, u0, w)
    # the denominator is ≥ 1, so the ratio is positive exactly when the loss is below 1
    valid = loss < 1.0
    if not valid:
        notes.append(
            f"the approximation breaks down: failures are expected to cost {loss:.2f}× the run time "
            "(N·r_f·(u0 + Δt/2) ≥ 1), so no ETTR can be given; the job would hardly progress. "
            "Shorten the interval or the restart, or split the job"
        )

    best: float | None = None
    at_best: float | None = None
    if w > 0:
        best = young_daly_interval(lam, w)
        e = expected_ettr(lam, best, u0, w)
        at_best = e if lam * (u0 + best / 2.0) < 1.0 else None
    else:
        notes.append(
            "the best checkpoint interval (Young/Daly) needs a checkpoint write time above 0: "
            "give --write to compute it"
        )
    return ModelResult(
        # a count of nodes prints as one (2000, not 2000.0) in --json
        nodes=int(nodes) if float(nodes).is_integer() else float(nodes),
        failure_rate_per_node_day=float(failure_rate_per_node_day),
        interval_s=dt,
        restart_s=u0,
        write_s=w,
        write_given=write_s is not None,
        mttf_hours=1.0 / lam / 3600.0,
        failures_per_day=lam * SECONDS_PER_DAY,
        failure_loss=loss,
        checkpoint_overhead=w / dt,
        ettr=ettr if valid else None,
        valid=valid,
        best_interval_s=best,
        ettr_at_best_interval=at_best,
        notes=notes,
    )
