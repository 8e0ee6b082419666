"""What Recover may touch: per Slurm partition (``policy.scope``) and per job (its comment).

A partition's mode is ``act``, ``recommend`` or ``ignore`` (``policy.scope.partitions``; a
partition not named there has ``policy.scope.default``). It caps the autonomy the policy grants:

- a job's own actions (requeue, exclude, hold, cancel) and its pages follow the mode of the job's
  partition, as the scheduler reports it (never a log);
- a node's actions (drain) follow the strictest mode of the partitions the node is in: a node in
  ``canary`` (act) and ``batch`` (recommend) is drained only as a recommendation, since draining
  it takes it out of both. A node whose partitions the scheduler has not reported yet has the
  default's mode;
- ``ignore``: incidents are recorded (observe), nothing is planned, recommended or paged.

A job's comment (``engine.core.jobcomment``) may lower what applies to it, never raise it:
``recover:off`` turns its own actions into recommendations (its owner is paged with them), and
``recover:max_restarts=N`` lowers its retry budget. Node actions are the site's: a job's comment
never stops the drain of a node with fatal hardware.

    view = SchedulerView()                    # fed by every scheduler poll (live.schedpoll)
    view.saw_jobs(jobs, now); view.saw_nodes(nodes)
    sc = scope_of(compiled.policy.scope, view, "1234", ("n3",))
    mode, note = sc.row_mode("drain", "node", "page" == kind, "n3", "act")
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from engine.core.jobcomment import NONE, Directives, parse_comment
from engine.rulebook.policy_model import SCOPE_MODES, Scope

logger = logging.getLogger(__name__)

__all__ = [
    "IncidentScope",
    "SchedulerView",
    "job_refusal",
    "node_mode",
    "node_refusal",
    "partition_mode",
    "scope_of",
    "strictest",
    "summary",
]

#: a scope mode as the autonomy it allows
AUTONOMY_OF = {"ignore": "observe", "recommend": "recommend", "act": "act"}
_LEVELS = ("observe", "recommend", "act")
#: how long a job the scheduler stopped listing keeps its partition and comment here (seconds)
KEEP_JOBS = 3600.0
#: warnings about ignored comments per minute; more are logged at debug level and counted
WARN_PER_MINUTE = 10


def strictest(*modes: str) -> str:
    return min(modes, key=SCOPE_MODES.index)


def lower(autonomy: str, mode: str) -> str:
    """An autonomy capped by a scope mode."""
    return min(autonomy, AUTONOMY_OF[mode], key=_LEVELS.index)


def partition_mode(scope: Scope, partition: str | None) -> tuple[str, str]:
    """A partition's mode, and which setting gave it."""
    if partition and partition in scope.partitions:
        mode = scope.partitions[partition]
        return mode, f"partition {partition} is {mode} (policy.scope.partitions)"
    name = partition or "unknown"
    return scope.default, f"partition {name} is {scope.default} (policy.scope.default)"


def node_mode(scope: Scope, partitions: Iterable[str] | None) -> tuple[str, str]:
    """The strictest mode of the partitions a node is in, for its node actions."""
    parts = sorted(set(partitions or ()))
    if not parts:
        return scope.default, f"its partitions are not known yet: policy.scope.default is {scope.default}"
    modes = {p: partition_mode(scope, p)[0] for p in parts}
    mode = strictest(*modes.values())
    if len(parts) == 1:
        return mode, partition_mode(scope, parts[0])[1]
    listed = ", ".join(f"{p} ({m})" for p, m in modes.items())
    return mode, f"it is in partitions {listed}: the strictest, {mode}, applies to node actions"


def summary(scope: Scope) -> dict[str, Any]:
    """The scope settings as plain data (``recover status`` shows the leader's)."""
    return {"default": scope.default, "partitions": dict(scope.partitions), "job_comment": scope.job_comment}


class SchedulerView:
    """The scheduler's last word on each job's partition and comment and each node's partitions,
    from every poll (never from a log). Jobs the scheduler stops listing are kept ``KEEP_JOBS``."""

    def __init__(self) -> None:
        self.jobs: dict[str, tuple[str, str, float]] = {}  # job -> (partition, comment, last seen)
        self.nodes: dict[str, tuple[str, ...]] = {}
        self._warned: set[tuple[str, str]] = set()
        self._window = (float("-inf"), 0)  # (minute start, warnings in it)
        self.ignored_comments = 0
        self._pruned = float("-inf")

    def saw_jobs(self, jobs: Iterable[Any], now: float) -> None:
        for j in jobs:
            comment = str(getattr(j, "comment", "") or "")
            old = self.jobs.get(j.job_id)
            if old is None or old[1] != comment:
                self._check(str(j.job_id), comment, now)
            self.jobs[str(j.job_id)] = (str(getattr(j, "partition", "") or ""), comment, now)
        if len(self.jobs) > 1000 and now - self._pruned >= 60.0:
            self._pruned = now
            self.jobs = {k: v for k, v in self.jobs.items() if v[2] >= now - KEEP_JOBS}

    def saw_nodes(self, nodes: Iterable[Any]) -> None:
        """A full node list (a poll's): replaces what was known."""
        self.nodes = {str(n.name): tuple(str(p) for p in getattr(n, "partitions", ()) or ()) for n in nodes}

    def job(self, job: str | None) -> tuple[str, str] | None:
        entry = self.jobs.get(job) if job is not None else None
        return (entry[0], entry[1]) if entry else None

    def _check(self, job: str, comment: str, now: float) -> None:
        """Say once per job and comment why a comment is ignored (at most WARN_PER_MINUTE a minute)."""
        problem = parse_comment(comment).problem
        if problem is None:
            return
        self.ignored_comments += 1
        digest = hashlib.sha1(comment.encode("utf-8", "replace")).hexdigest()[:12]
        if (job, digest) in self._warned:
            return
        if len(self._warned) >= 10_000:
            self._warned.clear()
        self._warned.add((job, digest))
        start, n = self._window
        if now - start >= 60.0:
            start, n = now, 0
        self._window = (start, n + 1)
        log = logger.warning if n < WARN_PER_MINUTE else logger.debug
        log("job %s: its comment is ignored as a whole (%s); the site's settings apply", job[:40], problem)


@dataclass(frozen=True)
class IncidentScope:
    """What one incident's job and nodes allow (``scope_of``)."""

    settings: Scope
    job: str | None
    partition: str | None
    job_mode: str
    job_why: str
    directives: Directives = NONE
    node_partitions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def node(self, node: str) -> tuple[str, str]:
        return node_mode(self.settings, self.node_partitions.get(node))

    def cap(self, nodes: Iterable[str]) -> tuple[str, str]:
        """The incident's own mode: its job's partition's, or for a node's incident without a job,
        the strictest of its nodes'."""
        if self.job is not None:
            return self.job_mode, self.job_why
        found = [self.node(n) for n in nodes]
        if not found:
            return self.settings.default, f"no job and no node: policy.scope.default is {self.settings.default}"
        return min(found, key=lambda m: SCOPE_MODES.index(m[0]))

    def row_mode(self, per: str, page: bool, target: str, mode: str) -> tuple[str, str | None]:
        """The mode one planned action is journaled with (its plan's ``mode`` capped by the
        scope), and why it is lower, if it is."""
        if mode == "observe":
            return mode, None
        if per == "node" and not page:
            scope_mode, why = self.node(target)
            capped = lower(mode, scope_mode)
            return capped, (None if capped == mode else f"node {target}: {why}")
        if self.directives.off and not page:
            return lower(mode, "recommend"), (
                f"job {self.job} opted out (its comment says recover:off): recommended, not run"
            )
        capped = lower(mode, self.job_mode) if self.job is not None else mode
        return capped, (None if capped == mode else f"job {self.job}: {self.job_why}")


def scope_of(settings: Scope, view: SchedulerView | None, job: str | None, nodes: Iterable[str] = ()) -> IncidentScope:
    """An incident's scope: its job's partition and comment, its nodes' partitions (as the
    scheduler reported them; unknown: the default)."""
    known = view.job(job) if view is not None else None
    partition, comment = known if known else (None, "")
    mode, why = partition_mode(settings, partition)
    directives = parse_comment(comment) if settings.job_comment else NONE
    parts = dict(view.nodes) if view is not None else {}
    return IncidentScope(settings, job, partition, mode, why, directives, parts)


def job_refusal(settings: Scope, live: Any) -> tuple[str, str] | None:
    """Just before a job's own action runs, with the job as the scheduler has it now: ("refused",
    why) when its comment opts it out, (mode, why) when its partition does not act; else None."""
    if settings.job_comment and parse_comment(getattr(live, "comment", "") or "").off:
        return "refused", f"refused: job {live.job_id} opted out (its comment says recover:off): not run"
    mode, why = partition_mode(settings, getattr(live, "partition", "") or None)
    return None if mode == "act" else (mode, f"{why}: not run")


def node_refusal(settings: Scope, node: Any) -> tuple[str, str] | None:
    """Just before a node's action runs: (mode, why) when the node's partitions do not act."""
    mode, why = node_mode(settings, getattr(node, "partitions", ()) or ())
    return None if mode == "act" else (mode, f"node {node.name}: {why}: not run")
