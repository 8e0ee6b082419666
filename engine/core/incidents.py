"""The incident engine: facts in; symptoms, faults, incidents, decisions and plans out.

Flow of one fact::

    ingest(fact) -> flood de-duplication -> absence watches -> progress? (aggregated, not in the Rete)
                 -> state facts replace their predecessor -> Rete -> firings -> derived facts
                 -> each derived fact joins the open incident of its job attempt (or node), or opens one
    advance(now) -> delayed (for:) firings and expired absences fire -> settled incidents close:
                    strongest fault wins -> policy decision -> rendered plan -> store; facts retracted

Time is whatever the caller says it is (virtual in replay and tests, wall time live), so the
same input gives the same incidents.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from engine.core.actions import PlannedAction, plan_actions
from engine.core.derive import Derivation, view
from engine.facts import JOB_ACTIVE_STATES, Fact
from engine.core.linefacts import ClusterContext
from engine.core.policy import Decision, GuardContext, decide, fingerprint, isolate_settings
from engine.core.progress import ProgressTracker
from engine.core.rete import ReteNetwork, ReteSession
from engine.rulebook.compile import CompiledRule, CompiledRulebook
from engine.rulebook.conditions import evaluate
from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = ["Engine", "ClosedIncident", "incident_key"]

_STATE_KEYS = {"job": ("job",), "node": ("node",), "gpu_state": ("node", "gpu", "signal")}
_OPENING = ("error", "fatal")
DEFAULT_FACT_TTL = 3600.0
#: firings recorded per re-derived conclusion (64 ranks printing one error); later ones are counted
REDERIVED_RECORDED = 64


def incident_key(attrs: Mapping[str, Any]) -> str | None:
    job = attrs.get("job")
    if job is not None:
        return f"job:{job}:{int(attrs.get('attempt') or 0)}"
    node = attrs.get("node")
    if node is not None:
        return f"node:{node}"
    return None


@dataclass
class _Live:
    fact: Fact
    incident: int | None = None
    count: int = 1
    asserted: bool = False
    flood: Any = None  # linefacts.Flood of its repeats, when a flood was collapsed into it


@dataclass
class _Open:
    id: int
    key: str
    opened_at: float
    last_at: float
    faults: list[Fact] = field(default_factory=list)
    facts: set[str] = field(default_factory=set)
    best: Fact | None = None
    closed_at: float | None = None


@dataclass
class _Watch:
    rule: CompiledRule
    matched: dict[str, dict]
    deadline: float
    join: dict[str, Any]


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


class Engine:
    def __init__(
        self,
        compiled: CompiledRulebook,
        store: Store,
        *,
        scheduler: str = "slurm",
        mode: str = "recommend",
        network: ReteNetwork | None = None,
        cluster: ClusterContext | None = None,
        on_close: Callable[[ClosedIncident], None] | None = None,
        fast: bool = True,
    ):
        self.compiled = compiled
        self.store = store
        self.scheduler = scheduler
        self.mode = mode
        self.network = network or ReteNetwork(compiled)
        self.session: ReteSession = self.network.session()
        self.cluster = cluster or ClusterContext()
        self.on_close = on_close
        #: False: the reference path (every template rendered, every id hashed), for differential tests
        self.fast = fast
        self._derivations: dict[int, Derivation] = {}
        self.settle = float(compiled.policy.get("settle", 120.0))
        self.cascade = float(compiled.policy.get("cascade", 900.0))  # seconds: the compiler parsed it
        self.recent: dict[str, _Open] = {}
        hang = compiled.policy.get("hang")
        self.fact_ttl = (
            float((hang or {}).get("fact_ttl", DEFAULT_FACT_TTL)) if isinstance(hang, Mapping) else DEFAULT_FACT_TTL
        )
        self.now: float | None = None
        self.live: dict[str, _Live] = {}
        self.order: deque[tuple[float, str]] = deque()
        self.flood: dict[tuple, str] = {}
        self.state_of: dict[tuple, str] = {}
        self.open: dict[str, _Open] = {}
        self.pending: dict[str, deque[tuple[Fact, list[tuple[CompiledRule, dict[str, str], str]]]]] = {}
        self.delayed: list[tuple[float, CompiledRule, dict[str, dict]]] = []
        self.watches: list[_Watch] = []
        self.tracker = ProgressTracker(compiled.policy)
        self._last_due = float("-inf")
        self.closed: list[ClosedIncident] = []
        self.node_states: dict[str, dict[str, Any]] = {}
        self.job_states: dict[str, str] = {}
        self.stats = {
            "facts": 0,
            "flooded": 0,
            "firings": 0,
            "derived": 0,
            "rederived": 0,
            "unused": 0,
            "incidents": 0,
            "template_errors": 0,
            "rete_errors": 0,
        }
        self.at_once = isolate_settings(compiled)["at_once"]
        self._isolated: set[tuple[int, str]] = set()  # (incident, node) isolated before the close
        self._early_drains: list[tuple[str, float]] = []
        self._absent_rules = {
            id(cr) for cr in compiled.rules if any(c.absent_for is not None for c in cr.rule.conditions)
        }

    def resume(self) -> int:
        """After a restart: take over the incidents the store still has open, so they settle and
        close as usual. (Their facts are not re-asserted: correlation with them is lost.)"""
        n = 0
        for row in self.store.incidents(status="open"):
            facts = [f for f, _, _ in self.store.facts(row.id)]
            faults = [f for f in facts if f.kind == "fault"]
            self.open[row.key] = _Open(
                row.id,
                row.key,
                row.opened_at,
                row.last_evidence_at,
                faults,
                {f.id for f in facts},
                _best_fault(faults) if faults else None,
            )
            n += 1
        return n

    # -- input -----------------------------------------------------------------------------
    def ingest(self, fact: Fact) -> None:
        """Take one fact from a source (not a derived one)."""
        try:
            self._ingest(fact)
        finally:
            self.store.flush()  # what it buffered is written before the caller sees the store

    def _ingest(self, fact: Fact) -> None:
        self._advance(fact.at)
        self.stats["facts"] += 1
        fact = self._with_job(fact)
        if fact.kind in ("log", "xid"):
            fkey = (fact.kind, tuple(sorted((k, v) for k, v in fact.attrs.items() if k != "text")))
            known = self.flood.get(fkey)
            if known is not None and known in self.live:
                live = self.live[known]
                live.count += 1
                self.stats["flooded"] += 1
                if live.incident is not None:
                    self.store.bump_fact(known)
                return
            self.flood[fkey] = fact.id
        self._check_watches(fact)
        if fact.kind == "progress":
            for conclusion in self.tracker.observe(fact):
                self._assert_chain(conclusion)
            return
        if fact.kind == "node" and fact.get("node") is not None:
            self.node_states[str(fact.get("node"))] = {
                "state": fact.get("state"),
                "drained": bool(fact.get("drained")),
                "down": bool(fact.get("down")),
            }
        if fact.kind == "job" and fact.get("job") is not None:
            self.job_states[str(fact.get("job"))] = str(fact.get("state"))
            self.tracker.job_state(str(fact.get("job")), int(fact.get("attempt") or 0), str(fact.get("state")), fact.at)
            nodes = fact.get("nodes") or ()
            if fact.get("state") is None or fact.get("state") in JOB_ACTIVE_STATES:
                self.cluster.assign(
                    str(fact.get("job")), fact.get("attempt"), nodes if isinstance(nodes, tuple) else (), fact.at
                )
            else:
                self.cluster.release(str(fact.get("job")))
        skey = self._state_key(fact)
        if skey is not None:
            old = self.state_of.get(skey)
            self.state_of[skey] = fact.id
            if old is not None:
                self._retract(old)
        self._assert_chain(fact)

    def flooded(self, flood: Any) -> None:
        """Repeats of a fact already ingested (a ``linefacts.Flood``): counted, never asserted."""
        try:
            self._flooded(flood)
        finally:
            self.store.flush()  # what it buffered is written before the caller sees the store

    def _flooded(self, flood: Any) -> None:
        delta = flood.count - flood.applied
        if delta <= 0:
            return
        flood.applied = flood.count
        self.stats["flooded"] += delta
        live = self.live.get(flood.fact_id)
        if live is not None:
            live.count += delta
            live.flood = flood
            if live.incident is None:
                return  # counted when it joins an incident
        # in an incident (or no longer live): the stored row, if any, is brought up to date
        self.store.bump_fact(flood.fact_id, delta, flood.evidence())

    def _with_job(self, fact: Fact) -> Fact:
        """A node's fact (a Xid, a counter) belongs to the job attempt running on that node then."""
        node = fact.get("node")
        if node is None or fact.get("job") is not None or fact.kind == "job":
            return fact
        known = self.cluster.job_on(str(node))
        if not known:
            return fact
        attrs = dict(fact.attrs)
        attrs["job"], attempt = known
        attrs["attempt"] = attempt or 0
        return Fact.make(fact.kind, attrs, fact.at, fact.origin)

    def _state_key(self, fact: Fact) -> tuple | None:
        names = _STATE_KEYS.get(fact.kind)
        if not names:
            return None
        if fact.kind == "gpu_state":  # the agent names the signal `state`; rules may say `signal`
            return (fact.kind, fact.get("node"), fact.get("gpu"), fact.get("signal") or fact.get("state"))
        return (fact.kind,) + tuple(fact.get(n) for n in names)

    # -- the Rete --------------------------------------------------------------------------
    def _assert_chain(self, fact: Fact) -> None:
        queue: deque[Fact] = deque([fact])
        while queue:
            f = queue.popleft()
            live = self.live.get(f.id)
            if live is not None and live.asserted:
                continue
            if live is None:
                live = self.live[f.id] = _Live(f)
            live.asserted = True
            self.order.append((f.at, f.id))
            try:
                firings = self.session.assert_fact(f)
            except Exception as exc:  # a broken fact or action must not stop the service
                self.stats["rete_errors"] += 1
                logger.error("rule engine refused fact %s (%s): %s", f.id, f.kind, exc)
                continue
            if not self.session.handled and live.incident is None:
                # no rule can ever use it: nothing to remember (the Rete did not keep it either)
                del self.live[f.id]
                self.order.pop()
                self.stats["unused"] += 1
                continue
            for cr, matched in firings:
                self.stats["firings"] += 1
                if id(cr) in self._absent_rules:
                    self._add_watch(cr, matched)
                    continue
                if cr.rule.for_s:
                    due = max(float(m.get("at", 0.0)) for m in matched.values()) + cr.rule.for_s
                    self.delayed.append((due, cr, matched))
                    continue
                derived = self._fire(cr, matched)
                if derived is not None:
                    queue.append(derived)

    def _derivation(self, cr: CompiledRule) -> Derivation:
        d = self._derivations.get(id(cr))
        if d is None:
            d = self._derivations[id(cr)] = Derivation(cr, memo=self.fast)
        return d

    def _fire(self, cr: CompiledRule, matched: Mapping[str, dict]) -> Fact | None:
        rule = cr.rule
        derivation = self._derivation(cr)
        views: dict[str, Any] = {}

        def variables() -> Mapping[str, Any]:
            if not views:
                views.update((alias, view(m)) for alias, m in matched.items())
            return views

        def on_error(exc: Exception) -> None:  # derive logged it
            self.stats["template_errors"] += 1

        # identity first: a conclusion drawn again (64 ranks printing one error) is counted, and
        # its display-only text (reason, evidence) is not even rendered
        try:
            attrs, ident = derivation.identity(matched, variables, on_error)
        except Exception as exc:
            self.stats["template_errors"] += 1
            logger.warning("rule %s derived a malformed fact: %s", rule.id, exc)
            return None
        at = max(float(m.get("at", 0.0)) for m in matched.values())
        again = self.live.get(ident)
        if again is not None:
            again.count += 1
            self.stats["rederived"] += 1
            if again.incident is not None:
                self.store.bump_fact(ident)
            if again.count <= REDERIVED_RECORDED:
                self._rederived(again, (cr, {alias: str(m.get("id")) for alias, m in matched.items()}, ident))
            return None
        derivation.render_items(derivation.display_items, matched, variables, on_error, attrs)
        if rule.then_kind == "fault":
            attrs.setdefault("reason", rule.description)
        try:
            derived = Fact.make(rule.then_kind, attrs, at, f"rule:{rule.id}", id=ident)
        except Exception as exc:
            self.stats["template_errors"] += 1
            logger.warning("rule %s derived a malformed fact: %s", rule.id, exc)
            return None
        matched_ids = {alias: str(m.get("id")) for alias, m in matched.items()}
        self.stats["derived"] += 1
        self._route(derived, (cr, matched_ids, derived.id))
        return derived

    def _rederived(self, again: _Live, firing: tuple[CompiledRule, dict[str, str], str]) -> None:
        """A conclusion drawn again from other evidence: the firing is recorded and the facts it
        matched join the incident, so that explain shows every derivation and its lines."""
        if again.incident is not None:
            inc = next((i for i in (*self.open.values(), *self.recent.values()) if i.id == again.incident), None)
            if inc is not None:
                self._attach(inc, again.fact, [firing])
            return
        for queue in self.pending.values():  # not in an incident yet: it joins one with both firings
            for old, firings in queue:
                if old.id == again.fact.id:
                    firings.append(firing)
                    return

    # -- incidents -------------------------------------------------------------------------
    def _route(self, derived: Fact, firing: tuple[CompiledRule, dict[str, str], str]) -> None:
        # a derived fact joins the open incident of the facts it was derived from; else its scope's
        inc = None
        for fid in firing[1].values():
            live = self.live.get(fid)
            if live is not None and live.incident is not None:
                inc = next((i for i in self.open.values() if i.id == live.incident), None)
                if inc is not None:
                    break
        key = (
            inc.key
            if inc is not None
            else (incident_key(derived.attrs) or self._scope_of(firing[1]) or f"origin:{derived.origin}")
        )
        opens = derived.kind == "fault" or derived.get("severity") in _OPENING
        inc = inc or self.open.get(key)
        if inc is None:
            # the cascade of a root cause that already closed (the NCCL watchdog firing minutes
            # after the Xid) is late evidence of that incident, unless it is a stronger fault
            late = self.recent.get(key)
            if late is not None and derived.at - late.last_at <= self.cascade:
                if not (derived.kind == "fault" and late.best is not None and _rank(derived) < _rank(late.best)):
                    self._attach(late, derived, [firing])
                    return
        if inc is None and not opens:
            self.pending.setdefault(key, deque(maxlen=256)).append((derived, [firing]))
            return
        if inc is None:
            first = derived.get("job")
            inc = _Open(
                self.store.open_incident(
                    key,
                    str(first) if first is not None else None,
                    derived.get("attempt"),
                    derived.get("node") if first is None else None,
                    derived.at,
                ),
                key,
                derived.at,
                derived.at,
            )
            self.open[key] = inc
            self.stats["incidents"] += 1
            # earlier evidence of the same scope (warnings) joins the incident
            for old, firings in self.pending.pop(key, ()):
                if old.at >= derived.at - self.settle:
                    self._attach(inc, old, firings)
        self._attach(inc, derived, [firing])

    def _scope_of(self, matched_ids: Mapping[str, str]) -> str | None:
        for fid in matched_ids.values():
            live = self.live.get(fid)
            if live is not None:
                key = incident_key(live.fact.attrs)
                if key is not None:
                    return key
        return None

    def _attach(self, inc: _Open, fact: Fact, firings: list[tuple[CompiledRule, dict[str, str], str]]) -> None:
        first_firing: int | None = None
        for cr, matched_ids, asserted in firings:
            for fid in matched_ids.values():
                live = self.live.get(fid)
                if live is not None and fid not in inc.facts:
                    self.store.add_fact(inc.id, live.fact)
                    if live.count > 1:
                        self.store.bump_fact(
                            fid, live.count - 1, live.flood.evidence() if live.flood is not None else None
                        )
                    live.incident = inc.id
                    inc.facts.add(fid)
            firing_id = self.store.add_firing(
                inc.id, cr.rule.id, str(cr.rule.mark), cr.rule.description, matched_ids, asserted, fact.at
            )
            first_firing = firing_id if first_firing is None else first_firing
        if fact.id not in inc.facts:
            self.store.add_fact(inc.id, fact, derived_by=first_firing)
            inc.facts.add(fact.id)
            known = self.live.get(fact.id)
            if known is not None and known.count > 1 and known.incident is None:  # derived again while pending
                self.store.bump_fact(fact.id, known.count - 1)
        # a derived fact is attached before it is asserted: register it now, so that what is
        # derived from it finds this incident
        self.live.setdefault(fact.id, _Live(fact)).incident = inc.id
        if fact.kind == "fault" and all(f.id != fact.id for f in inc.faults):
            inc.faults.append(fact)
            if inc.best is None or _rank(fact) < _rank(inc.best):
                inc.best = fact
                self.store.set_provisional(inc.id, str(fact.get("fault_class")), fact.get("nodes") or (), fact.id)
            if fact.get("fault_class") in self.at_once and fact.get("nodes"):
                self._isolate_now(inc, fact)
        inc.last_at = max(inc.last_at, fact.at)
        self.store.touch_incident(inc.id, fact.at)

    def _evidence(self, inc: _Open) -> dict[str, Any]:
        """The incident's evidence for action templates: its earliest line, how many, which nodes."""
        lives = sorted(
            (self.live[f] for f in inc.facts if f in self.live and self.live[f].fact.kind not in ("symptom", "fault")),
            key=lambda lv: lv.fact.at,
        )
        first = next(
            (
                lv.fact.get("text") or lv.fact.get("evidence")
                for lv in lives
                if lv.fact.get("text") or lv.fact.get("evidence")
            ),
            None,
        )
        nodes = {str(lv.fact.get("node")) for lv in lives if lv.fact.get("node")}
        return {"first_line": str(first) if first else None, "count": sum(lv.count for lv in lives), "nodes": nodes}

    def _close(self, inc: _Open, at: float) -> ClosedIncident:
        if inc.faults:
            best = inc.best or _best_fault(inc.faults)
            fault_class, nodes, reason, fault_id = (
                best.get("fault_class"),
                tuple(best.get("nodes") or ()),
                str(best.get("reason", "")),
                best.id,
            )
        else:
            fault_class, nodes, reason, fault_id = "unknown", (), "no rule could tell what caused this failure", None
        job, _, rest = inc.key.partition(":")
        job_id = attempt = None
        if job == "job":
            job_id, _, att = rest.rpartition(":")
            attempt = int(att)
        rule = next((f.get("rule") for f in inc.faults if f.id == fault_id), None)
        with self.store.transaction():
            if job_id is not None:
                p = self.tracker.get(job_id, attempt or 0)
                if p:
                    self.store.save_progress(job_id, attempt or 0, p.get("step"), p.get("checkpoint"), p.get("last_at"))
            ctx = self._guard_context(inc, job_id, attempt, at)
            decision = decide(self.compiled, fault_class, nodes, reason, ctx, rule)
            plan, problems = plan_actions(
                self.compiled,
                decision.decision,
                inc.id,
                job_id,
                attempt,
                decision.nodes,
                fault_class,
                self.scheduler,
                names=decision.plan_only,
                reason=reason,
                evidence=self._evidence(inc),
            )
            plan = [p for p in plan if (p.name, p.target) not in decision.skip_targets]
            guards = list(decision.guards) + [{"guard": "plan", "why": p} for p in problems]
            mode = (
                decision.autonomy
                if self.mode == "act"
                else ("observe" if decision.autonomy == "observe" else "recommend")
            )
            self.store.close_incident(
                inc.id,
                at,
                fault_class,
                decision.decision,
                decision.nodes,
                fault_id,
                reason,
                guards,
                mode,
                fingerprint(fault_class, decision.nodes, rule),
            )
            if mode in ("recommend", "act"):
                for pa in plan:
                    self.store.add_action(
                        inc.id,
                        pa.idem_key,
                        pa.name,
                        pa.target,
                        pa.argv,
                        mode,
                        "recommended" if mode == "recommend" else "planned",
                    )
        # its facts stay in the Rete for the cascade window, so late evidence still correlates
        self.recent[inc.key] = inc
        inc.closed_at = at
        closed = ClosedIncident(inc.id, inc.key, job_id, attempt, decision, tuple(plan), tuple(problems), at)
        self.closed.append(closed)
        if self.on_close is not None:
            try:
                self.on_close(closed)
            except Exception:
                logger.exception("incident %s: close callback failed", inc.id)
        return closed

    def _isolate_now(self, inc: _Open, fault: Fact) -> None:
        """Fatal node hardware: journal the isolation (drain, requeue, exclude) now, under the same
        guards as at the close, instead of after the settle window; the close then finds these
        actions journaled (same idempotency keys) and adds only what is new (the page)."""
        nodes = tuple(n for n in fault.get("nodes") or () if (inc.id, n) not in self._isolated)
        if not nodes or self.mode != "act":
            return  # recommendations are recorded when the incident closes
        job_id = attempt = None
        kind, _, rest = inc.key.partition(":")
        if kind == "job":
            job_id, _, att = rest.rpartition(":")
            attempt = int(att)
        ctx = self._guard_context(inc, job_id, attempt, fault.at)
        decision = decide(
            self.compiled, str(fault.get("fault_class")), nodes, str(fault.get("reason", "")), ctx, fault.get("rule")
        )
        if decision.decision != "isolate_and_restart" or decision.autonomy != "act":
            return  # a guard changed it (blast radius, silence, budget, autonomy): left to the close
        names = [n for n in self.compiled.policy["plans"].get("isolate_and_restart", ()) if n != "notify"]
        plan, _ = plan_actions(
            self.compiled,
            decision.decision,
            inc.id,
            job_id,
            attempt,
            decision.nodes,
            str(fault.get("fault_class")),
            self.scheduler,
            names=names,
            reason=str(fault.get("reason", "")),
            evidence=self._evidence(inc),
        )
        for p in plan:
            if (p.name, p.target) in decision.skip_targets:
                continue
            self.store.add_action(
                inc.id, p.idem_key, p.name, p.target, p.argv, "act", "planned", note="at once: fatal node hardware"
            )
        for n in nodes:
            self._isolated.add((inc.id, n))
            self._early_drains.append((n, fault.at))
        logger.warning("incident %s: %s on %s isolated at once", inc.id, fault.get("fault_class"), ",".join(nodes))

    def _guard_context(self, inc: _Open, job: str | None, attempt: int | None, now: float) -> GuardContext:
        # ``now`` is engine time (the logs' own time in replay): a silence applies when it was
        # active then, never because it is active on the wall clock today
        progress: dict[int, dict] = {}
        history: list = []
        requeued: set = set()
        if job is not None:
            progress = self.store.progress_of(job)
            history = self.store.job_history(job, exclude=inc.id)
            requeued = self.store.requeued_attempts(job)
        silences = {s["node"]: s["reason"] for s in self.store.silences(active_at=now)}
        drains = [(t, w) for t, w, _ in self.store.recent_actions("drain", now - 86400)]
        drains += [d for d in self._early_drains if d[1] >= now - 86400 and d not in drains]
        return GuardContext(
            job=job,
            attempt=attempt,
            incident=inc.id,
            now=now,
            history=history,
            progress=progress,
            job_state=self.job_states.get(job) if job is not None else None,
            recent_drains=drains,
            cluster_size=len(self.node_states),
            node_states=self.node_states,
            silenced=silences.get,
            requeued_attempts=frozenset(requeued),
            forced_mode="recommend" if self.mode == "recommend" else None,
        )

    def _retract(self, fact_id: str) -> None:
        live = self.live.pop(fact_id, None)
        if live is None:
            return
        try:
            self.session.retract_fact(fact_id)
        except Exception as exc:
            self.stats["rete_errors"] += 1
            logger.error("could not retract fact %s: %s", fact_id, exc)
        self.watches = [w for w in self.watches if all(m.get("id") != fact_id for m in w.matched.values())]

    # -- time ------------------------------------------------------------------------------
    def _add_watch(self, cr: CompiledRule, matched: dict[str, dict]) -> None:
        absent = next(c for c in cr.rule.conditions if c.absent_for is not None)
        first = matched[cr.rule.conditions[0].alias]
        join = {a: first.get(a) for a in cr.rule.join}
        start = max(float(m.get("at", 0.0)) for m in matched.values())
        self.watches.append(_Watch(cr, matched, start + float(absent.absent_for or 0), join))

    def _check_watches(self, fact: Fact) -> None:
        if not self.watches:
            return
        flat = dict(fact.attrs) | {"kind": fact.kind, "at": fact.at}
        for w in self.watches:
            for cond, tree in zip(w.rule.rule.conditions, w.rule.trees):
                if cond.absent_for is None or cond.kind != fact.kind:
                    continue
                if all(flat.get(a) == v for a, v in w.join.items()) and evaluate(tree, flat, w.matched):
                    w.deadline = max(w.deadline, fact.at + float(cond.absent_for))

    def advance(self, now: float) -> None:
        """Move time forward: fire due timers, close settled incidents, expire old facts."""
        try:
            self._advance(now)
        finally:
            self.store.flush()  # what it buffered is written before the caller sees the store

    def _advance(self, now: float) -> None:
        if self.now is not None and now <= self.now:
            return
        self.now = now
        if self.delayed:
            due = [d for d in self.delayed if d[0] <= now]
            self.delayed = [d for d in self.delayed if d[0] > now]
            for _, cr, matched in due:
                if all(str(m.get("id")) in self.live for m in matched.values()):
                    derived = self._fire(cr, matched)
                    if derived is not None:
                        self._assert_chain(derived)
        if self.watches:
            expired = [w for w in self.watches if w.deadline <= now]
            self.watches = [w for w in self.watches if w.deadline > now]
            for w in expired:
                if all(str(m.get("id")) in self.live for m in w.matched.values()):
                    derived = self._fire(w.rule, w.matched)
                    if derived is not None:
                        self._assert_chain(derived)
        for key, inc in list(self.recent.items()):
            if now - max(inc.last_at, inc.closed_at or 0.0) > self.cascade:
                del self.recent[key]
                for fid in list(inc.facts):
                    self._retract(fid)
        if now - self._last_due >= 0.5:  # hang bounds are minutes: checking twice a second is plenty
            self._last_due = now
            for stall in list(self.tracker.due(now)):
                self._assert_chain(stall)
            # warnings that never opened an incident are forgotten after the settle window
            for key, q in list(self.pending.items()):
                while q and q[0][0].at < now - self.settle:
                    q.popleft()
                if not q:
                    del self.pending[key]
        for key, inc in list(self.open.items()):
            if now - inc.last_at >= self.settle:
                del self.open[key]
                self._close(inc, now)
        while self.order and self.order[0][0] < now - self.fact_ttl:
            _, fid = self.order.popleft()
            live = self.live.get(fid)
            if live is not None and (live.incident is None or all(i.id != live.incident for i in self.open.values())):
                self._retract(fid)
        if len(self.flood) > 4 * len(self.live) + 1024:
            self.flood = {k: v for k, v in self.flood.items() if v in self.live}

    def finish(self) -> list[ClosedIncident]:
        """End of input (replay, tests): fire what is due and close every open incident."""
        # an absence is only proven by time passing: the end of a file proves nothing
        at = self.now if self.now is not None else 0.0
        for key, inc in list(self.recent.items()):
            del self.recent[key]
            for fid in list(inc.facts):
                self._retract(fid)
        for key, inc in list(self.open.items()):
            del self.open[key]
            self._close(inc, max(at, inc.last_at))
            self.recent.pop(key, None)
            for fid in list(inc.facts):
                self._retract(fid)
        self.store.flush()
        return list(self.closed)


def _rank(f: Fact) -> tuple[int, float]:
    return (-int(f.get("priority", 0)), f.at)


def _best_fault(faults: list[Fact]) -> Fact:
    """The strongest fault: highest priority, the earliest on a tie."""
    return min(faults, key=_rank)
