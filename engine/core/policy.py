"""Policy: from a fault to a decision, and the guards that may change it.

Guards, in the order they apply (each configurable under ``policy:`` in the rulebook)::

    silences      a silenced node's incidents are only recorded            (recover silence add)
    retry         at most N restarts per job and per root-cause fingerprint in a window
    no_progress   stop when the last checkpoint/step did not advance across N attempts
    blast_radius  at most K drains (or P% of the nodes seen), and at most R requeues of other jobs,
                  in a window; past it: stop acting, notify
    inhibit       nodes already drained are not drained again (a DOWN node still gets the DRAIN
                  flag: without it, it returns to service when its slurmd comes back)
    throttle      one requeue per job attempt, one drain per node per incident
    autonomy      per decision kind and per fault class: observe | recommend | act, the lower of
                  the two; a class not named in autonomy.classes recommends (--dry-run forces recommend)
    scope         the job's partition's mode (policy.scope) caps it: recommend, or ignore (observe);
                  the job's comment may lower its restart budget (recover:max_restarts=N)
                  (engine.core.scope; each action's own cap is applied when it is journaled)

Each guard that changes a decision or a plan says so in the ``guards`` list of the result, which
the store keeps and ``explain`` prints: "why did it not restart?" is answered without code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from engine.core.scope import IncidentScope, lower
from engine.rulebook.compile import CompiledRulebook
from engine.rulebook.policy_model import LEVELS

__all__ = [
    "Decision",
    "GuardContext",
    "decide",
    "granted",
    "fingerprint",
    "isolate_settings",
    "blast_radius_window",
]

RESTARTING = ("restart", "isolate_and_restart")


@dataclass(frozen=True)
class Decision:
    fault_class: str
    decision: str
    nodes: tuple[str, ...]
    reason: str
    guards: tuple[Mapping[str, Any], ...] = field(default=())
    autonomy: str = "recommend"  # observe | recommend | act
    plan_only: tuple[str, ...] | None = None  # a guard replaced the plan with these actions
    skip_targets: frozenset[tuple[str, str]] = frozenset()  # (action, target) a guard removed
    plan: tuple[str, ...] = ()  # the actions it runs: plan_only, the class's own plan, or the decision's
    mode_why: str = ""  # which policy keys gave it its autonomy (explain prints it)


@dataclass
class GuardContext:
    """What the guards may look at; every field has a harmless default so the core can run alone."""

    job: str | None = None
    attempt: int | None = None
    incident: int | None = None
    now: float = 0.0  # engine time, given by the caller: wall time live, the logs' own time in replay
    history: Sequence[
        Mapping[str, Any]
    ] = ()  # earlier closed incidents of this job: {attempt, decision, fault_class, fingerprint, closed_at}
    progress: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # attempt -> {step, checkpoint}
    recent_drains: Sequence[tuple[str, float]] = ()  # (node, wall time) of drains planned or run
    recent_requeues: Sequence[tuple[str, float]] = ()  # (job, engine time) of requeues planned or run
    cluster_size: int = 0
    node_states: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # node -> {drained, down}
    silenced: Callable[[str], str | None] = lambda node: None  # reason, or None
    requeued_attempts: frozenset[tuple[str, int]] = frozenset()
    forced_mode: str | None = None  # "recommend" under --dry-run
    job_state: str | None = None  # the scheduler's last word on this job
    scope: IncidentScope | None = None  # its partition's mode and its comment (engine.core.scope)


#: fault classes of a job that is still running: without a node to isolate, notify only
NOTIFY_WITHOUT_NODE = frozenset({"straggler"})


def fingerprint(fault_class: str, nodes: Sequence[str], rule: str | None) -> str:
    return f"{fault_class}|{rule or '-'}|{','.join(sorted(nodes))}"


def isolate_settings(compiled: CompiledRulebook) -> dict[str, Any]:
    """``policy.isolate``: which fault classes are isolated at once, how long a drain is retried."""
    iso = compiled.policy.isolate
    return {"at_once": iso.at_once, "drain_retry_for": iso.drain_retry_for}


def blast_radius_window(compiled: CompiledRulebook) -> float:
    """``policy.blast_radius.window`` in seconds: how far back the guard counts drains. The caller
    that loads those drains reads the same value, so a site's 48 h window is 48 h, not the 24 h a
    fixed query would see."""
    return compiled.policy.blast_radius.window


def _progress_value(p: Mapping[str, Any] | None) -> int | None:
    if not p:
        return None
    if p.get("checkpoint") is not None:
        return int(p["checkpoint"])
    if p.get("step") is not None:
        return int(p["step"])
    return None


def decide(
    compiled: CompiledRulebook,
    fault_class: str,
    nodes: tuple[str, ...],
    reason: str,
    ctx: GuardContext | None = None,
    rule: str | None = None,
    *,
    weak: str | None = None,
    recommend: str | None = None,
) -> Decision:
    """``weak``: the keyword, when the fault was reached only through weak evidence (a class's
    keyword, rules/25-weak-evidence.yaml): a node-scoped class is then recommended, never acted on.
    ``recommend``: why the fault's own rule says its evidence may only recommend (its
    ``recommend_only``: a job's text about a node, rules/14-matchers-families-kinds4.yaml)."""
    ctx = ctx or GuardContext()
    policy = compiled.policy
    decision = policy.decisions.get(fault_class, "restart")
    guards: list[dict[str, Any]] = []
    plan_only: tuple[str, ...] | None = None
    skip: set[tuple[str, str]] = set()

    def change(guard: str, to: str, why: str) -> None:
        nonlocal decision
        guards.append({"guard": guard, "from": decision, "to": to, "why": why})
        decision = to

    if decision == "isolate_and_restart" and not nodes and fault_class in NOTIFY_WITHOUT_NODE:
        # a slow job still runs: a requeue loses the minutes since its checkpoint and, with no
        # node to exclude, lands it on the same kind of nodes; worth a page, not a restart
        change(
            "no_nodes",
            "observe",
            "the job runs slow and no node is named: nothing to isolate, "
            "and a restart would lose work without removing the cause; notify only",
        )
        plan_only = ("notify",)
    elif decision == "isolate_and_restart" and not nodes:
        change("no_nodes", "restart", "the fault names no node to isolate")

    if decision in RESTARTING and ctx.job_state == "CANCELLED":
        change(
            "cancelled",
            "observe",
            f"the scheduler says job {ctx.job} was cancelled (by a user or an operator): it is not restarted",
        )

    # silences: maintenance on every implicated node -> record only
    silenced = {n: ctx.silenced(n) for n in nodes}
    if nodes and all(silenced.values()):
        change("silence", "observe", "; ".join(f"{n} silenced: {r}" for n, r in silenced.items()))

    retry = policy.retry
    if decision in RESTARTING and ctx.job is not None:
        window = retry.window
        recent = [
            h
            for h in ctx.history
            if h.get("decision") in RESTARTING and ctx.now - float(h.get("closed_at") or 0) <= window
        ]
        fp = fingerprint(fault_class, nodes, rule)
        same = [h for h in recent if h.get("fingerprint") == fp]
        class_budget = retry.per_class.get(fault_class)  # fault_classes: {NAME: {retry: N}}
        same_class = [h for h in recent if h.get("fault_class") == fault_class]
        asked = ctx.scope.directives.max_restarts if ctx.scope is not None else None
        if asked is not None and asked < retry.max_per_job and len(recent) >= asked:
            change(
                "retry_budget",
                "stop",
                f"job {ctx.job} was already restarted {len(recent)} times: its comment asks at most "
                f"{asked} (recover:max_restarts={asked}; the site allows {retry.max_per_job} per {int(window)} s)",
            )
        elif len(recent) >= retry.max_per_job:
            change(
                "retry_budget",
                "stop",
                f"job {ctx.job} was already restarted {len(recent)} times "
                f"(budget {retry.max_per_job} per {int(window)} s)",
            )
        elif len(same) >= retry.max_per_fingerprint:
            change(
                "retry_budget",
                "stop",
                f"the same root cause ({fault_class}) already caused {len(same)} restarts "
                f"(budget {retry.max_per_fingerprint})",
            )
        elif class_budget is not None and len(same_class) >= int(class_budget):
            change(
                "retry_budget",
                "stop",
                f"{fault_class} already caused {len(same_class)} restarts of job {ctx.job} "
                f"(its retry budget is {class_budget})",
            )
        else:
            n = retry.no_progress_attempts
            if n > 0 and ctx.attempt is not None and ctx.attempt >= n:
                now_p = _progress_value(ctx.progress.get(ctx.attempt))
                then_p = _progress_value(ctx.progress.get(ctx.attempt - n))
                # an attempt we know failed, with no progress on record, made none
                seen = set(ctx.progress) | {int(h.get("attempt") or 0) for h in ctx.history} | {ctx.attempt}
                attempts_known = all((ctx.attempt - k) in seen for k in range(n + 1))
                if attempts_known and (now_p is None or (then_p is not None and now_p <= then_p)):
                    change(
                        "no_progress",
                        "stop",
                        f"no progress across {n} attempts: checkpoint/step "
                        f"{then_p} at attempt {ctx.attempt - n}, {now_p} at attempt {ctx.attempt}",
                    )

    if decision == "isolate_and_restart":
        # only DRAIN keeps a node out: a DOWN node without it returns to service with its slurmd
        already = [n for n in nodes if ctx.node_states.get(n, {}).get("drained")]
        if policy.inhibit.drained_nodes and already:
            for node in already:
                skip.add(("drain", node))
            guards.append({"guard": "inhibit", "why": f"already drained, not drained again: {', '.join(already)}"})
        to_drain = [n for n in nodes if n not in already]
        blast = policy.blast_radius
        window = blast.window
        drained = {n for n, t in ctx.recent_drains if ctx.now - t <= window}
        new = [n for n in to_drain if n not in drained]
        limit = blast.max_drains
        if ctx.cluster_size:
            limit = min(limit, max(1, int(blast.max_fraction * ctx.cluster_size)))
        if new and len(drained) + len(new) > limit:
            change(
                "blast_radius",
                "observe",
                f"draining {', '.join(new)} would make {len(drained) + len(new)} drains "
                f"in {int(window)} s, over the limit of {limit}: stopped acting, a human is paged",
            )
            plan_only = ("notify",)

    if decision in RESTARTING and ctx.job is not None:
        # requeues count too: twenty jobs requeued into a dead filesystem is an outage, not a fix
        blast = policy.blast_radius
        others = {j for j, t in ctx.recent_requeues if ctx.now - t <= blast.window and j != ctx.job}
        if len(others) + 1 > blast.max_requeues:
            change(
                "blast_radius",
                "observe",
                f"requeueing job {ctx.job} would make {len(others) + 1} jobs requeued in {int(blast.window)} s, "
                f"over the limit of {blast.max_requeues} (policy.blast_radius.max_requeues): "
                "stopped acting, a human is paged",
            )
            plan_only = ("notify",)

    if (
        decision in RESTARTING
        and ctx.job is not None
        and ctx.attempt is not None
        and (ctx.job, ctx.attempt) in ctx.requeued_attempts
    ):
        skip.add(("requeue", ctx.job))
        guards.append({"guard": "throttle", "why": f"attempt {ctx.attempt} of job {ctx.job} was already requeued"})

    changed = any("from" in g for g in guards)
    class_plan = getattr(compiled.fault_classes.get(fault_class), "plan", None)
    if plan_only is not None:
        plan = plan_only
    elif class_plan is not None and not changed:
        plan = class_plan  # the class's own plan; a guard that changed the decision gets that decision's
    else:
        plan = tuple(policy.plans.get(decision, ()))
    autonomy, why = granted(compiled, decision, fault_class)
    if weak is not None and autonomy == "act" and policy.decisions.get(fault_class) == "isolate_and_restart":
        # a keyword alone never takes a node out of service, nor restarts around one unseen
        autonomy = "recommend"
        why = (
            f"weak evidence only (keyword {weak!r}) for {fault_class}, a node-scoped class: recommended, never acted on"
        )
    elif recommend and autonomy == "act":
        autonomy, why = "recommend", f"{recommend}: recommended, never acted on"
    scoped = False
    problem = ctx.scope.directives.problem if ctx.scope is not None else None
    if problem is not None and (decision != "observe" or plan):
        guards.append(
            {"guard": "scope", "why": f"job {ctx.job}'s comment is ignored ({problem}): the site's settings apply"}
        )
    if ctx.scope is not None:
        scope_mode, scope_why = ctx.scope.cap(nodes)
        if lower(autonomy, scope_mode) != autonomy:
            why = f"{scope_why} (the policy grants {autonomy}: {why})"
            autonomy, scoped = lower(autonomy, scope_mode), True
            if decision != "observe" or plan:
                guards.append({"guard": "scope", "why": f"{scope_why}: {autonomy} only"})
    if ctx.forced_mode == "recommend":
        why = f"monitor mode (--dry-run): recommended only; in act mode: {autonomy}, {why}"
        autonomy = "recommend" if autonomy == "act" else autonomy
    elif autonomy != "act" and not scoped and (decision != "observe" or plan):
        guards.append({"guard": "autonomy", "why": f"{autonomy}: {why}"})
    return Decision(
        fault_class, decision, nodes, reason, tuple(guards), autonomy, plan_only, frozenset(skip), plan, why
    )


def granted(compiled: CompiledRulebook, decision: str, fault_class: str) -> tuple[str, str]:
    """The mode the policy grants a decision of a fault class, and why: the lower of
    ``policy.autonomy.<decision>`` and ``policy.autonomy.classes.<class>``; a class the policy
    does not name there (a site's own, until granted) recommends."""
    autonomy = compiled.policy.autonomy
    origins = getattr(compiled.book, "origins", {})

    def key(name: str) -> str:
        marks = origins.get(("policy", f"autonomy.{name}"))
        return f"policy.autonomy.{name}" + (f" ({marks[-1]})" if marks else "")

    by_kind = autonomy.of(decision) or "recommend"
    by_class = autonomy.classes.get(fault_class)
    mode = LEVELS[min(LEVELS.index(by_kind), LEVELS.index(by_class if by_class in LEVELS else "recommend"))]
    if mode == "act":
        return mode, f"granted by {key(decision)} and {key('classes.' + fault_class)}"
    why = []
    if by_kind != "act":
        why.append(f"{key(decision)} is {by_kind}")
    if by_class is None:
        why.append(f"fault class {fault_class} is not granted in policy.autonomy.classes")
    elif by_class != "act":
        why.append(f"{key('classes.' + fault_class)} is {by_class}")
    return mode, "; ".join(why)
