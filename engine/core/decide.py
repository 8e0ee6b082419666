"""Deciding: when an incident closes, its strongest fault goes through the policy's guards
(``core.policy.decide``) to a decision, and the decision's actions are planned and journaled;
fatal node hardware is isolated at once, under the same guards, before the incident settles.

    decider = Decider(compiled, store, tracker, node_states, job_states, scheduler="slurm", mode="recommend")
    closed = decider.close(incident_id, key, faults, best, at, evidence)
"""

from __future__ import annotations

import bisect
import json
import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from engine.core.actions import PlannedAction, plan_actions
from engine.core.policy import Decision, GuardContext, decide, fingerprint
from engine.core.progress import ProgressTracker
from engine.core.scope import IncidentScope, SchedulerView, scope_of
from engine.core.suspect_policy import with_suspects
from engine.facts import Fact
from engine.rulebook.compile import CompiledRulebook
from engine.rulebook.model import kind_of
from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = ["ClosedIncident", "Decider", "best_fault", "rank", "split_key"]


@dataclass(frozen=True)
class ClosedIncident:
    id: int
    key: str
    job: str | None
    attempt: int | None
    decision: Decision
    plan: tuple[PlannedAction, ...]
    problems: tuple[str, ...]
    at: float


def rank(f: Fact) -> tuple[int, float]:
    return (-int(f.get("priority", 0)), f.at)


def best_fault(faults: Sequence[Fact]) -> Fact:
    """The strongest fault: highest priority, the earliest on a tie."""
    return min(faults, key=rank)


def split_key(key: str) -> tuple[str | None, int | None]:
    """``job:J:A`` -> (J, A); a node's or an origin's incident has neither."""
    kind, _, rest = key.partition(":")
    if kind != "job":
        return None, None
    job_id, _, att = rest.rpartition(":")
    return job_id, int(att)


class Decider:
    def __init__(
        self,
        compiled: CompiledRulebook,
        store: Store,
        tracker: ProgressTracker,
        node_states: Mapping[str, dict[str, Any]],
        job_states: Mapping[str, str],
        *,
        scheduler: str,
        mode: str,
        view: SchedulerView | None = None,
    ):
        self.compiled = compiled
        self.view = view  # the scheduler's word on partitions and job comments (engine.core.scope)
        self.store = store
        self.tracker = tracker
        self.node_states = node_states  # the engine's, kept current by what it ingests
        self.job_states = job_states
        self.scheduler = scheduler
        self.mode = mode
        self.at_once = compiled.policy.isolate.at_once
        self._isolated: set[tuple[int, str]] = set()  # (incident, node) isolated before the close
        self._isolated_bound: set[tuple[int, str]] = set()  # ... and again for the job it was bound to
        #: (node, time) of drains journaled at once, in time order (the guards look at a window's)
        self._early_drains: list[tuple[str, float]] = []

    def close(
        self,
        incident: int,
        key: str,
        faults: Sequence[Fact],
        best: Fact | None,
        at: float,
        evidence: Mapping[str, Any],
        *,
        bound: tuple[str, int] | None = None,
        notes: Sequence[Mapping[str, Any]] = (),
        suspects: Sequence[Mapping[str, Any]] = (),
        held_by: int | None = None,
    ) -> ClosedIncident:
        """Decide a settled incident, journal its plan and close it in the store. ``bound``: the
        job attempt the scheduler said held a node's incident's node (its key names none);
        ``notes``: guards recorded with the decision's (how it was bound); ``suspects``: the
        ranks its evidence points at (core.suspects), kept where its class names suspects
        (policy.suspects.classes), and what they cost decided by ``core.suspect_policy``;
        ``held_by``: the shared outage incident (core.shared_outage) the job attempt is one of
        failures of: its requeue and exclusion are journaled held, its pages left to the outage's."""
        if faults:
            top = best or best_fault(faults)
            fault_class, nodes, reason, fault_id = (
                top.get("fault_class"),
                tuple(top.get("nodes") or ()),
                str(top.get("reason", "")),
                top.id,
            )
        else:
            fault_class, nodes, reason, fault_id = "unknown", (), "no rule could tell what caused this failure", None
        job_id, attempt = bound if bound is not None else split_key(key)
        chosen = next((f for f in faults if f.id == fault_id), None)  # the fault decided on, as listed
        rule = chosen.get("rule") if chosen is not None else None
        with self.store.transaction():
            if job_id is not None:
                p = self.tracker.get(job_id, attempt or 0)
                if p:
                    self.store.save_progress(job_id, attempt or 0, p.get("step"), p.get("checkpoint"), p.get("last_at"))
            ctx = self.guard_context(incident, job_id, attempt, at, nodes)
            weak = str(chosen.get("keyword") or "") if chosen is not None and chosen.get("weak") else None
            only = str(chosen.get("recommend_only")) if chosen is not None and chosen.get("recommend_only") else None
            decision = decide(self.compiled, fault_class, nodes, reason, ctx, rule, weak=weak, recommend=only)
            found = list(suspects) if fault_class in self.compiled.policy.suspects.classes else []
            drain_for_diagnosis: tuple[str, ...] = ()
            if found:
                self.store.set_suspects(incident, found)
                history = self.store.suspect_history(at - self.compiled.policy.suspects.window, exclude=incident)
                decision, drain_for_diagnosis = with_suspects(self.compiled, decision, found, ctx, history)
                if held_by is not None and drain_for_diagnosis:  # many jobs' victims of one cause
                    why = f"{', '.join(drain_for_diagnosis)} not drained for diagnosis: a shared outage ({held_by})"
                    decision = replace(decision, guards=(*decision.guards, {"guard": "shared_outage", "why": why}))
                    drain_for_diagnosis = ()
            plan, problems = self._plan(
                decision, incident, job_id, attempt, fault_class, reason, evidence, decision.plan
            )
            plan = [p for p in plan if (p.name, p.target) not in decision.skip_targets]
            diagnosis: list[PlannedAction] = []
            if drain_for_diagnosis:
                diagnosis, more = plan_actions(
                    self.compiled,
                    decision.decision,
                    incident,
                    job_id,
                    attempt,
                    drain_for_diagnosis,
                    fault_class,
                    self.scheduler,
                    names=["drain_suspect"],
                    reason=reason,
                    evidence=evidence,
                )
                problems = list(problems) + more
            held: set[str] = set()
            outage_guard: list[dict[str, Any]] = []
            if held_by is not None:
                held = {p.name for p in plan if self.compiled.actions[p.name].kind in ("requeue", "exclude")}
                pages = {p.name for p in plan if self.compiled.actions[p.name].kind == "page"}
                plan = [p for p in plan if p.name not in pages]
                outage_guard.append(
                    {
                        "guard": "shared_outage",
                        "why": f"one of the jobs of shared outage incident {held_by}: "
                        + (f"{', '.join(sorted(held))} held until it ends" if held else "nothing to hold")
                        + ("; paged once by that incident" if pages else ""),
                    }
                )
            mode = self._mode_of(decision)
            rows = self._rows(ctx.scope, plan if mode in ("recommend", "act") else [], mode)
            guards = [dict(n) for n in notes] + list(decision.guards) + [{"guard": "plan", "why": p} for p in problems]
            guards += outage_guard + _scope_guards(rows)
            self.store.close_incident(
                incident,
                at,
                fault_class,
                decision.decision,
                decision.nodes,
                fault_id,
                reason,
                guards,
                mode,
                fingerprint(fault_class, decision.nodes, rule),
                mode_why=decision.mode_why,
            )
            self._journal(incident, rows, held=held, held_by=held_by)
            # a drain for diagnosis has its own autonomy (policy.autonomy.drain_suspect)
            own = self.compiled.policy.autonomy.of("drain_suspect") or "recommend"
            dmode = "act" if mode == "act" and own == "act" else "recommend"
            if mode in ("recommend", "act") and own != "observe":
                note = "a suspect of several jobs' collective timeouts: drained for diagnosis" + (
                    "" if dmode == "act" else f" (policy.autonomy.drain_suspect is {own})"
                )
                self._journal(incident, self._rows(ctx.scope, diagnosis, dmode), note)
            plan = plan + diagnosis
        return ClosedIncident(incident, key, job_id, attempt, decision, tuple(plan), tuple(problems), at)

    def _mode_of(self, decision: Decision) -> str:
        """How a decision's plan is journaled: acted on, recommended, or only observed."""
        if self.mode == "act":
            return decision.autonomy
        return "observe" if decision.autonomy == "observe" else "recommend"

    def _plan(
        self,
        decision: Decision,
        incident: int,
        job_id: str | None,
        attempt: int | None,
        fault_class: str,
        reason: str,
        evidence: Mapping[str, Any],
        names: Iterable[str] | None,
    ) -> tuple[list[PlannedAction], list[str]]:
        return plan_actions(
            self.compiled,
            decision.decision,
            incident,
            job_id,
            attempt,
            decision.nodes,
            fault_class,
            self.scheduler,
            names=names,
            reason=reason,
            evidence=evidence,
        )

    def wants_at_once(self, fault: Fact) -> bool:
        return (
            fault.get("fault_class") in self.at_once
            and bool(fault.get("nodes"))
            and not fault.get("weak")
            and not fault.get("recommend_only")
        )

    def isolate_now(
        self,
        incident: int,
        key: str,
        fault: Fact,
        evidence: Callable[[], Mapping[str, Any]],
        bound: tuple[str, int] | None = None,
    ) -> None:
        """Fatal node hardware: journal the isolation (drain, requeue, exclude) now, under the same
        guards as at the close, instead of after the settle window; the close then finds these
        actions journaled (same idempotency keys) and adds only what is new (the page). Where the
        policy does not let it act (monitor mode, or a class not granted act), the same actions are
        recorded now as recommendations: the moment act mode would have run them is on record.

        Called again once a node's incident is ``bound`` to the job attempt the scheduler says
        held the node: the drain is journaled already, the job's requeue and exclusion are new."""
        done = self._isolated if bound is None else self._isolated_bound
        nodes = tuple(n for n in fault.get("nodes") or () if (incident, n) not in done)
        if not nodes:
            return
        job_id, attempt = bound if bound is not None else split_key(key)
        ctx = self.guard_context(incident, job_id, attempt, fault.at, nodes)
        decision = decide(
            self.compiled, str(fault.get("fault_class")), nodes, str(fault.get("reason", "")), ctx, fault.get("rule")
        )
        if decision.decision != "isolate_and_restart" or decision.autonomy not in ("act", "recommend"):
            return  # a guard changed it (blast radius, silence, budget) or it only observes: left to the close
        mode = "act" if self.mode == "act" and decision.autonomy == "act" else "recommend"
        names = [n for n in decision.plan if n != "notify"]
        fault_class = str(fault.get("fault_class"))
        plan, _ = self._plan(
            decision, incident, job_id, attempt, fault_class, str(fault.get("reason", "")), evidence(), names
        )
        note = (
            "at once: fatal node hardware"
            + (f"; job {job_id} attempt {attempt} from the scheduler's answer" if bound is not None else "")
            + ("" if mode == "act" else " (act mode would run it now)")
        )
        plan = [p for p in plan if (p.name, p.target) not in decision.skip_targets]
        self._journal(incident, self._rows(ctx.scope, plan, mode), note)
        for n in nodes:
            if (incident, n) not in self._isolated:  # its drain counts once (blast radius)
                self._isolated.add((incident, n))
                bisect.insort(self._early_drains, (n, fault.at), key=_time_of)
            done.add((incident, n))
        if mode == "act":
            logger.warning("incident %s: %s on %s isolated at once", incident, fault_class, ",".join(nodes))
        else:
            logger.warning(
                "incident %s: %s on %s: recommended at once (%s): %s",
                incident,
                fault_class,
                ",".join(nodes),
                decision.mode_why,
                ", ".join(f"{p.name} {p.target}" for p in plan if (p.name, p.target) not in decision.skip_targets),
            )

    def bind_closed(
        self,
        incident: int,
        job: str,
        attempt: int,
        faults: Sequence[Fact],
        best: Fact | None,
        at: float,
        evidence: Mapping[str, Any],
        decided: str | None,
        note: Mapping[str, Any],
    ) -> list[PlannedAction]:
        """A node's incident that closed before the scheduler said which job attempt held its
        node: bound to it now. The policy decides again with the job's history; when that is
        still what the incident was decided, the job's part of the plan (requeue, exclusion) is
        journaled as the close would have (acted on, or recommended). When the job's history
        changes the decision (its retry budget is spent), nothing more is planned: the incident
        says why, and a person decides."""
        notes = [dict(note)]
        planned: list[PlannedAction] = []
        with self.store.transaction():
            if faults:
                planned = self._plan_bound(incident, job, attempt, faults, best, at, evidence, decided, notes)
            self.store.add_guards(incident, notes)
        for p in planned:
            logger.warning(
                "incident %s job=%s attempt=%s: bound after its close, %s action=%s cmd=%s",
                incident,
                job,
                attempt,
                "planned" if self.mode == "act" else "recommend",
                p.name,
                json.dumps(list(p.argv)),
            )
        return planned

    def _plan_bound(
        self,
        incident: int,
        job: str,
        attempt: int,
        faults: Sequence[Fact],
        best: Fact | None,
        at: float,
        evidence: Mapping[str, Any],
        decided: str | None,
        notes: list[dict[str, Any]],
    ) -> list[PlannedAction]:
        """The job's part of a closed incident's plan, journaled; ``notes`` gets why not, if not."""
        planned: list[PlannedAction] = []
        top = best or best_fault(faults)
        fault_class, reason = str(top.get("fault_class")), str(top.get("reason", ""))
        ctx = self.guard_context(incident, job, attempt, at, tuple(top.get("nodes") or ()))
        decision = decide(self.compiled, fault_class, tuple(top.get("nodes") or ()), reason, ctx, top.get("rule"))
        mode = self._mode_of(decision)
        if decided is not None and decision.decision != decided:
            whys = "; ".join(str(g.get("why")) for g in decision.guards if g.get("why"))
            notes.append(
                {
                    "guard": "bound",
                    "why": f"with job {job}'s history the policy says {decision.decision}, not {decided}"
                    + (f" ({whys})" if whys else "")
                    + ": nothing more is planned for the job",
                }
            )
        elif mode in ("recommend", "act"):
            names = tuple(n for n in decision.plan if n != "notify")  # the close paged already
            plan, problems = self._plan(decision, incident, job, attempt, fault_class, reason, evidence, names)
            notes += [{"guard": "plan", "why": p} for p in problems]
            rows = self._rows(ctx.scope, [p for p in plan if (p.name, p.target) not in decision.skip_targets], mode)
            notes += _scope_guards(rows)
            planned = self._journal(incident, rows, "bound after the close")
        return planned

    def _rows(self, scope: IncidentScope | None, plan: Sequence[PlannedAction], mode: str) -> list[_Row]:
        """Each planned action with the mode it is journaled in: ``mode``, capped by the scope
        (a node's partitions for its node actions; the job's partition and comment for its own)."""
        rows = []
        for p in plan:
            action = self.compiled.actions.get(p.name)
            per, page = getattr(action, "per", "job"), kind_of(action, p.name) == "page"
            m, why = scope.row_mode(per, page, p.target, mode) if scope is not None else (mode, None)
            rows.append(_Row(p, m, why))
        return rows

    def _journal(
        self,
        incident: int,
        rows: Sequence[_Row],
        note: str = "",
        held: Collection[str] = (),
        held_by: int | None = None,
    ) -> list[PlannedAction]:
        """Journal the rows (an observed one is not journaled); returns the actions newly added.
        ``held``: the names of actions a shared outage (``held_by``) holds until it ends."""
        added = []
        for r in rows:
            if r.mode not in ("recommend", "act"):
                continue
            hold = held_by is not None and r.action.name in held
            status = "held" if hold else "recommended" if r.mode == "recommend" else "planned"
            text = "; ".join(x for x in (note, f"held: shared outage incident {held_by}" if hold else "", r.why) if x)
            if self.store.add_action(
                incident,
                r.action.idem_key,
                r.action.name,
                r.action.target,
                r.action.argv,
                r.mode,
                status,
                note=text,
                held_by=held_by if hold else None,
            ):
                added.append(r.action)
        return added

    def guard_context(
        self, incident: int, job: str | None, attempt: int | None, now: float, nodes: Sequence[str] = ()
    ) -> GuardContext:
        # ``now`` is engine time (the logs' own time in replay): a silence applies when it was
        # active then, never because it is active on the wall clock today
        progress: dict[int, dict] = {}
        history: list = []
        requeued: set = set()
        if job is not None:
            progress = self.store.progress_of(job)
            history = self.store.job_history(job, exclude=incident)
            requeued = self.store.requeued_attempts(job)
        silences = {s["node"]: s["reason"] for s in self.store.silences(active_at=now)}
        # exactly the drains the blast-radius guard counts: its window is the site's, of any length
        since = now - self.compiled.policy.blast_radius.window
        recent = self.store.recent_actions_of(("drain", "drain_suspect", "requeue"), since)
        drains = [(t, w) for name in ("drain", "drain_suspect") for t, w, _ in recent[name]]
        counted = set(drains)
        early = self._early_drains
        drains += [d for d in early[bisect.bisect_left(early, since, key=_time_of) :] if d not in counted]
        requeues = [(t, w) for t, w, _ in recent["requeue"]]
        return GuardContext(
            job=job,
            attempt=attempt,
            incident=incident,
            now=now,
            history=history,
            progress=progress,
            job_state=self.job_states.get(job) if job is not None else None,
            recent_drains=drains,
            recent_requeues=requeues,
            cluster_size=len(self.node_states),
            node_states=self.node_states,
            silenced=silences.get,
            requeued_attempts=frozenset(requeued),
            forced_mode="recommend" if self.mode == "recommend" else None,
            scope=scope_of(self.compiled.policy.scope, self.view, job, nodes),
        )


def _time_of(drain: tuple[str, float]) -> float:
    return drain[1]


@dataclass(frozen=True)
class _Row:
    """A planned action and the mode it is journaled in; ``why``: the scope lowered it."""

    action: PlannedAction
    mode: str
    why: str | None


def _scope_guards(rows: Sequence[_Row]) -> list[dict[str, Any]]:
    """One ``scope`` guard per reason the scope lowered actions: it names them (the page says
    what Recover would have done)."""
    by_why: dict[str, list[str]] = {}
    for r in rows:
        if r.why:
            by_why.setdefault(r.why, []).append(f"{r.action.name} {r.action.target}")
    return [{"guard": "scope", "why": f"{why}: {', '.join(names)}"} for why, names in by_why.items()]
