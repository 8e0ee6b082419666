"""Pre-flight: immediately before a command runs, read the live state and re-plan.

``preflight`` answers None (run it as planned) or (status, note): ``verified`` (its effect is
there already), ``skipped`` (not needed, or refused: the note says why) or ``recommended`` (the
policy's autonomy for that action only recommends). What is checked depends on the action's
kind, its verifier: ``PREFLIGHT`` maps a kind to its check. Every check may raise
``StateUnknown`` (the scheduler could not tell) or ``NotYet`` (the job is between states).

Before that, the scope (``engine.core.scope``) is checked against the live state: a job's own
action is refused when its comment now says ``recover:off``, and recommended (not run) when its
partition does not act; a node's action when the strictest mode of its partitions does not act.
What the incident was planned with can only be lowered here, never raised.

The checks journal what they learn on the incident (``Actuator.note_incident``), plan follow-up
actions (a requeue for the job that really holds the faulty GPU, a keep-held for a job that
requires an isolated node) and page people; they never run a command themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Tuple

from engine.core.actions import idem_key
from engine.core.scope import job_refusal, node_refusal
from engine.errors import NotYet, SchedulerError, StateUnknown
from engine.live.paging import is_page
from engine.live.verify import base_attempt, live_job, node_named, verify_name
from engine.rulebook.model import kind_of
from engine.store import ActionStatus

if TYPE_CHECKING:
    from engine.live.actuator import Actuator

__all__ = ["PREFLIGHT", "Decision", "autonomy_of", "preflight"]

#: (status, note) for an action that is not run as planned; None: run it
Decision = Optional[Tuple[str, str]]


def preflight(act: "Actuator", action: dict, inc) -> Decision:
    """Read the live state and re-plan the action (see the module docstring)."""
    kind = verify_name(act.compiled, action)
    if kind == "job_cancelled":  # a job that already ended needs no cancel, whatever the policy
        decided = _pre_cancel(act, action, inc)
        if decided is not None:
            return decided
    level = autonomy_of(act, action["action"])
    if level in ("observe", "recommend"):
        return ActionStatus.RECOMMENDED, f"policy.autonomy.{action['action']} is {level}: recommended, not run"
    check = PREFLIGHT.get(kind)
    if check is not None:
        return check(act, action, inc)
    own = kind_of(act.compiled.actions.get(action["action"]), action["action"])
    if kind != "job_cancelled" and own not in ("page", "other"):
        decided = _scoped(act, action)  # a hold, a release, a resume: their own target's scope
        if decided is not None:
            return decided
    if kind == "none" and is_page(act.compiled, action["action"]) or "{{ outcome }}" in _sources(act, action):
        # a page says what happened so far, as of now, not as of the plan
        so_far = act.outcome(inc.id)
        act.rerender(action, inc, outcome=(f"{action['note']} / " if action.get("note") else "") + so_far)
    return None


def autonomy_of(act: "Actuator", name: str) -> str | None:
    """An action's own autonomy (``policy.autonomy.cancel``), where the policy sets one."""
    policy = act.compiled.policy
    # rules/50-policy.yaml sets cancel; autonomy.classes is the fault classes' grants, never an action's
    return policy.autonomy.of(name) if name not in policy.plans else None


def _scope_status(refusal: tuple[str, str] | None) -> Decision:
    if refusal is None:
        return None
    mode, note = refusal
    return (ActionStatus.RECOMMENDED, note) if mode == "recommend" else (ActionStatus.SKIPPED, note)


def _job_scope(act: "Actuator", live) -> Decision:
    """The job's comment and partition, as the scheduler has them now (None: go on)."""
    return _scope_status(job_refusal(act.compiled.policy.scope, live)) if live is not None else None


def _scoped(act: "Actuator", action: dict) -> Decision:
    """An action without a check of its own, scoped by its target as the scheduler has it now."""
    per = getattr(act.compiled.actions.get(action["action"]), "per", "job")
    if per == "node":
        try:
            node = node_named(act.adapter, action["target"])
        except SchedulerError as exc:
            raise StateUnknown(str(exc)) from exc
        return _scope_status(node_refusal(act.compiled.policy.scope, node)) if node is not None else None
    return _job_scope(act, live_job(act.adapter, action["target"]))


def _sources(act: "Actuator", action: dict) -> str:
    a = act.compiled.actions.get(action["action"])
    return " ".join(t.source for t in a.argv) if a is not None else ""


def _pre_cancel(act: "Actuator", action: dict, inc) -> Decision:
    job = action["target"]
    live = live_job(act.adapter, job)
    if live is None or not live.active:
        return ActionStatus.SKIPPED, f"job {job} already ended: nothing to free"
    if live.attempt != base_attempt(action, inc):
        return ActionStatus.SKIPPED, f"job {job} runs a newer attempt ({live.attempt}): not cancelled"
    return _job_scope(act, live)


def _pre_requeue(act: "Actuator", action: dict, inc) -> Decision:
    job = action["target"]
    live = live_job(act.adapter, job)
    base = base_attempt(action, inc)
    bad = set(inc.nodes)
    if live is None:
        return ActionStatus.SKIPPED, f"job {job} is no longer known to the scheduler"
    scoped = _job_scope(act, live)
    if scoped is not None:
        return scoped
    if not live.requeue:
        return (
            ActionStatus.SKIPPED,
            f"refused: job {job} opted out of requeue (--no-requeue, Requeue=0); it was not requeued",
        )
    if live.attempt > base:
        on_bad = sorted(set(live.nodes) & bad) if live.active else []
        note = f"already restarted by Slurm or a person (attempt {base} -> {live.attempt}); not requeued again"
        if on_bad:
            key = f"{idem_key(inc.id, 'requeue', job)}@{live.attempt}"
            added = act.store.add_action(
                inc.id,
                key,
                "requeue",
                job,
                action["argv"],
                "act",
                ActionStatus.PLANNED,
                note=f"attempt {live.attempt} landed on {','.join(on_bad)}",
            )
            if added is not None:
                note += f"; attempt {live.attempt} landed on {','.join(on_bad)}: it is requeued"
        return ActionStatus.SKIPPED, note
    if live.state == "PENDING":
        return ActionStatus.SKIPPED, f"job {job} is already pending ({live.reason or 'queued'}): not requeued"
    if base_attempt(action, inc) == int(inc.attempt or 0):
        return _shared_nodes(act, action, inc, live)
    return None


def _faulty_gpus(act: "Actuator", inc, node: str) -> set[int]:
    """GPU indexes the incident's evidence names on ``node`` (NVML facts carry them)."""
    found = set()
    for f, _, _ in act.store.facts(inc.id):
        gpu = f.attrs.get("gpu")
        if f.attrs.get("node") == node and isinstance(gpu, int) and not isinstance(gpu, bool):
            found.add(gpu)
    return found


def _shared_nodes(act: "Actuator", action: dict, inc, live) -> Decision:
    """A node shared by several jobs: requeue only the job that holds the faulty GPU; when that
    is not known, requeue none of them blindly, and name and tell every one."""
    job = action["target"]
    try:
        others = [j for j in act.adapter.jobs() if j.job_id != job and j.active and set(j.nodes) & set(inc.nodes)]
    except SchedulerError as exc:
        raise StateUnknown(str(exc)) from exc
    if not others:
        return None
    holders: set[str] = set()
    for node in sorted(set(inc.nodes) & {n for j in others for n in j.nodes}):
        gpus = _faulty_gpus(act, inc, node)
        maps = {}
        for j in [live] + others:
            if node in j.nodes:
                d = j if getattr(j, "detailed", False) else live_job(act.adapter, j.job_id)
                maps[j.job_id] = d.gpus_on(node) if d is not None else None
        if not gpus or any(v is None for v in maps.values()):
            names = ", ".join(sorted(maps))
            why = (
                f"node {node} is shared by jobs {names} and which of them holds the faulty GPU is not known: "
                "none is requeued blindly; the drain lets them finish"
            )
            act.note_incident(inc, "shared_node", why)
            for other in sorted(maps):
                act.page(inc, why, f"shared-{node}", job=other)
            return ActionStatus.SKIPPED, why
        holders |= {jid for jid, idx in maps.items() if idx and set(idx) & gpus}
    for other in sorted(holders - {job}):
        o = next(j for j in others if j.job_id == other)
        # rendered for that job from the template: patching this job's argv would leave an
        # element such as JobId=<this job> alone and requeue the job judged not to hold the GPU
        plan, problems = act.replan(inc, ("requeue",), job=other, attempt=o.attempt, reason=inc.reason or "")
        mine = [p for p in plan if p.target == other]
        if not mine:
            why = f"job {other} holds the faulty GPU but its requeue could not be planned: {'; '.join(problems) or 'no requeue action'}"
            act.note_incident(inc, "shared_node", why)
            act.page(inc, why, f"shared-{other}", job=other)
            continue
        act.store.add_action(
            inc.id,
            f"{mine[0].idem_key}@{o.attempt}",
            "requeue",
            other,
            list(mine[0].argv),
            "act",
            ActionStatus.PLANNED,
            note=f"holds the faulty GPU on {','.join(o.nodes)}",
        )
    if job not in holders:
        why = f"job {job} does not hold the faulty GPU: it keeps running (the drain lets it finish)"
        act.note_incident(
            inc, "shared_node", why + (f"; requeued instead: {', '.join(sorted(holders))}" if holders else "")
        )
        return ActionStatus.SKIPPED, why
    return None


def _pre_exclude(act: "Actuator", action: dict, inc) -> Decision:
    job = action["target"]
    live = live_job(act.adapter, job)
    if live is None:
        return ActionStatus.SKIPPED, f"job {job} is no longer known to the scheduler"
    scoped = _job_scope(act, live)
    if scoped is not None:
        return scoped
    bad = set(inc.nodes)
    required = bad & set(getattr(live, "required_nodes", ()) or ())
    if required:
        _keep_held(act, inc, job, required)
    union = set(live.excluded_nodes) | (bad - required)
    # the journal shows the list this command sets (or would have set), never the plan's guess
    if not act.rerender(action, inc, excluded=sorted(union)):
        return ActionStatus.SKIPPED, "could not be rendered with the job's exclusion list"
    if required and not (bad - required):
        return (
            ActionStatus.SKIPPED,
            f"refused: not excluded from {','.join(sorted(required))}: the job requires it (held instead)",
        )
    if (bad - required) <= set(live.excluded_nodes):
        return ActionStatus.VERIFIED, "already excluded"
    if live.state in ("COMPLETING", "CONFIGURING") or live.state == "REQUEUED":
        raise NotYet(f"job {job} is {live.state.lower()}: its exclusion list is set once it is pending")
    if live.state != "PENDING":
        where = f" on {','.join(live.nodes)}" if live.nodes else ""
        return ActionStatus.SKIPPED, (
            f"job {job} is {live.state.lower()}{where}: its exclusion list changes only while it is pending"
        )
    return None


def _keep_held(act: "Actuator", inc, job: str, required: set[str]) -> None:
    nodes = ",".join(sorted(required))
    why = (
        f"job {job} requires {nodes} (-w), which is isolated for {inc.fault_class}: it is not excluded from it; "
        f"the job is held until a person releases it (scontrol release {job}) or changes its node list"
    )
    act.note_incident(inc, "required_node", why)
    if act.compiled.actions.get("keep_held") is not None:
        plan, _ = act.replan(inc, ("keep_held",))
        for p in plan:
            act.store.add_action(inc.id, p.idem_key, p.name, p.target, p.argv, "act", ActionStatus.PLANNED, note=why)
    act.page(inc, why, "required-node")


def _pre_drain(act: "Actuator", action: dict, inc) -> Decision:
    try:
        node = node_named(act.adapter, action["target"])
    except SchedulerError as exc:
        raise StateUnknown(str(exc)) from exc
    if node is None:
        return ActionStatus.SKIPPED, f"node {action['target']} is not known to the scheduler"
    if node.drained and f"incident {inc.id}" in (node.reason or ""):
        return ActionStatus.VERIFIED, "found drained"
    if node.drained:
        return (
            ActionStatus.VERIFIED,
            f"already drained by someone else (reason: {(node.reason or '-')[:80]}); their reason kept",
        )
    return _scope_status(node_refusal(act.compiled.policy.scope, node))


#: an action's kind (its verifier) -> the check made before it runs
PREFLIGHT: dict[str, Callable[["Actuator", dict, object], Decision]] = {
    "job_requeued": _pre_requeue,
    "job_excluded": _pre_exclude,
    "node_drained": _pre_drain,
}
