"""The incident engine: facts in; symptoms, faults, incidents, decisions and plans out.

Flow of one fact::

    ingest(fact) -> flood de-duplication -> absence watches -> progress? (aggregated, not in the Rete)
                 -> state facts replace their predecessor -> Rete -> firings -> derived facts
                 -> each derived fact joins the open incident of its job attempt (or node), or opens one
    advance(now) -> delayed (for:) firings and expired absences fire -> settled incidents close:
                    strongest fault wins -> policy decision -> rendered plan -> store; facts retracted

This module holds ``Engine`` (what callers use) and the incident lifecycle: which incident a
derived fact joins, when one opens, settles and closes, and what late evidence of a closed one
does. The rest is in its own module: ``open_incident`` (one open incident: its key, facts,
evidence and suspects), ``memory`` (working memory, repeats, retraction),
``timers`` (``for:`` and ``absent_for:``), ``derive`` (a firing's conclusion), ``decide``
(guards, decision and plan when an incident closes, fatal hardware at once), ``bind`` (a
node's incident waiting for the scheduler to say which job attempt held the node: ``to_ask``,
``holders``), ``progress`` (hangs and stragglers).

Time is whatever the caller says it is (virtual in replay and tests, wall time live), so the
same input gives the same incidents.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from typing import Any, Callable, Mapping

from engine.core.bind import NodeWaits, Wait, bound_note
from engine.core.decide import ClosedIncident, Decider, best_fault, rank, split_key
from engine.core.derive import Derivation, view
from engine.core.context import ClusterContext
from engine.core.incident_table import IncidentTable
from engine.core.memory import Live, WorkingMemory
from engine.core.open_incident import OpenIncident, incident_key
from engine.core.ledger import JobLedger
from engine.core.progress import ProgressTracker
from engine.core.shared_outage import SharedOutages
from engine.core.suspects import RankEvidence
from engine.core.rete import ReteNetwork, ReteSession
from engine.core.timers import Timers
from engine.facts import JOB_ACTIVE_STATES, Fact
from engine.rulebook.compile import CompiledRule, CompiledRulebook
from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = ["Engine", "ClosedIncident", "incident_key"]

_OPENING = ("error", "fatal")
#: firings recorded per re-derived conclusion (64 ranks printing one error); later ones are counted
REDERIVED_RECORDED = 64

#: (rule, {alias: fact id}, id of the fact it derived)
Firing = tuple[CompiledRule, dict[str, str], str]


def _then_flush(method: Callable[..., None]) -> Callable[..., None]:
    """An entry point of the Engine: what the call buffered in the store (incident times, fact
    counts, an open transaction's fact and firing rows) is written before its caller sees the
    store, also when the call raised; inside a transaction, at its commit or first statement."""

    @functools.wraps(method)
    def call(self: "Engine", *args: Any) -> None:
        try:
            method(self, *args)
        finally:
            self.store.flush_unless_in_transaction()

    return call


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
        self.session: ReteSession = self.network.session(alpha=fast)
        self._closed = False
        self.cluster = cluster or ClusterContext()
        self.on_close = on_close
        #: False: the reference path (every template rendered, every id hashed), for differential tests
        self.fast = fast
        self._derivations: dict[int, Derivation] = {}
        policy = compiled.policy  # every value from the rulebook (rules/50-policy.yaml), in seconds
        self.settle = policy.settle
        self.cascade = policy.cascade
        self.fact_ttl = policy.hang.fact_ttl
        self.now: float | None = None
        # overflowed: distinct log lines past their scope's bound, counted on the last held
        counters = "facts flooded firings derived rederived unused incidents template_errors rete_errors overflowed"
        self.stats = dict.fromkeys(counters.split(), 0)
        self.memory = WorkingMemory(self.session, self.stats, policy.distinct_lines)
        self.timers = Timers(compiled)
        self.memory.on_retract = self.timers.forget
        self.live: dict[str, Live] = self.memory.live
        self.open = IncidentTable()  # by key, and by id (``by_id``)
        self.recent = IncidentTable()  # closed, still gathering their cascade
        self.pending: dict[str, deque[tuple[Fact, list[Firing]]]] = {}  # warnings waiting for an incident
        self.tracker = ProgressTracker(policy)
        self.ledger = JobLedger(store)  # job states and progress, kept for the goodput report
        self._last_due = float("-inf")
        self.closed: list[ClosedIncident] = []
        self.node_states: dict[str, dict[str, Any]] = {}
        self.job_states: dict[str, str] = {}
        view = self.cluster.view  # the scheduler's partitions and comments, for policy.scope
        self.decider = Decider(
            compiled, store, self.tracker, self.node_states, self.job_states, scheduler=scheduler, mode=mode, view=view
        )
        #: node incidents whose fault came before the scheduler said which job ran there
        self.waits = NodeWaits()
        #: what each rank of a job attempt said (attribution reads it when the incident closes)
        self.ranks = RankEvidence()
        #: many jobs failing alike at once: one shared outage (core.shared_outage)
        self.outages = SharedOutages(
            compiled, store, scheduler=scheduler, mode=mode, closed=self.closed, on_close=on_close
        )

    def resume(self) -> int:
        """After a restart: take over the incidents the store still has open, so they settle and
        close as usual. (Their facts are not re-asserted: correlation with them is lost.)"""
        n = 0
        for row in self.store.incidents(status="open"):
            if row.key.startswith("outage:"):
                self.outages.resume(row.id, row.key, row.opened_at, row.last_evidence_at)
                continue
            facts = [f for f, _, _ in self.store.facts(row.id)]
            faults = [f for f in facts if f.kind == "fault"]
            inc = self.open[row.key] = OpenIncident(
                row.id,
                row.key,
                row.opened_at,
                row.last_evidence_at,
                faults,
                {f.id for f in facts},
                best_fault(faults) if faults else None,
            )
            if row.job is not None and split_key(row.key) != (row.job, row.attempt):
                inc.bound = (row.job, int(row.attempt or 0))  # bound without taking the job's key
            elif row.job is None and row.node and faults:
                self.waits.add(row.id, row.node, row.opened_at)
            n += 1
        return n

    # -- input -----------------------------------------------------------------------------
    @_then_flush
    def ingest(self, fact: Fact) -> None:
        """Take one fact from a source (not a derived one)."""
        self._advance(fact.at)
        self.stats["facts"] += 1
        fact = self._with_job(fact)
        repeated = self.memory.repeat_of(fact)
        if repeated is not None:
            repeated.count += 1
            self.stats["flooded"] += 1
            if repeated.incident is not None:
                self.store.bump_fact(repeated.fact.id)
            return
        self.timers.saw(fact)
        if fact.kind == "log" and fact.get("job") is not None:
            job, attempt = str(fact.get("job")), int(fact.get("attempt") or 0)
            if fact.get("rank_evidence") is not None:
                self.ranks.observe(fact, self._holding(job, attempt))
            if isinstance(fact.get("peer"), str) and isinstance(fact.get("node"), str):
                self.ranks.peer(
                    job, attempt, str(fact.get("node")), str(fact.get("peer")), fact.origin, self._holding(job, attempt)
                )
        if fact.kind == "progress":
            if fact.get("table") is None:  # a part of a table of peers (peer_table) is no training step
                self.ledger.progress(fact)
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
            self.outages.user(str(fact.get("job")), fact.get("user"))
            self.ledger.job(fact)
            self.tracker.job_state(str(fact.get("job")), int(fact.get("attempt") or 0), str(fact.get("state")), fact.at)
            nodes = fact.get("nodes") or ()
            if isinstance(nodes, tuple) and nodes:  # the scheduler's node list, in its order
                layout = fact.get("tasks_per_node")  # the scheduler's layout: 2(x3),1
                job, attempt = str(fact.get("job")), int(fact.get("attempt") or 0)
                self.ranks.allocation(job, attempt, nodes, layout if isinstance(layout, str) else None)
            if fact.get("state") is None or fact.get("state") in JOB_ACTIVE_STATES:
                self.cluster.assign(
                    str(fact.get("job")), fact.get("attempt"), nodes if isinstance(nodes, tuple) else (), fact.at
                )
            else:
                self.cluster.release(str(fact.get("job")))
        self.memory.replace_state(fact)
        self._assert_chain(fact)

    @_then_flush
    def flooded(self, flood: Any) -> None:
        """Repeats of a fact already ingested (a ``linefacts.Flood``): counted, never asserted."""
        delta = flood.count - flood.applied
        if delta <= 0:
            return
        flood.applied = flood.count
        self.stats["flooded"] += delta
        live = self.live.get(flood.fact_id)
        if live is not None and flood.peers and live.fact.get("job") is not None:
            job, attempt = str(live.fact.get("job")), int(live.fact.get("attempt") or 0)
            for host, peer, origin in flood.peers:  # the hosts that repeated it, each with its peer
                self.ranks.peer(job, attempt, host, peer, origin, self._holding(job, attempt))
        if live is not None:
            live.count += delta
            live.flood = flood
            if live.incident is None:
                return  # counted when it joins an incident
        # in an incident (or no longer live): the stored row, if any, is brought up to date
        self.store.bump_fact(flood.fact_id, delta, flood.evidence())

    def _holding(self, job: str, attempt: int) -> set[str]:
        """The nodes the cluster says the job attempt holds now."""
        return {n for n, (j, a, _) in self.cluster.node_job.items() if j == job and (a is None or a == attempt)}

    def _suspects(self, inc: OpenIncident) -> list[dict[str, Any]]:
        return inc.suspects(self.live, self.ranks, self.compiled.policy.suspects.max_silent)

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

    # -- the Rete --------------------------------------------------------------------------
    def _assert_chain(self, fact: Fact) -> None:
        queue: deque[Fact] = deque([fact])
        while queue:
            firings = self.memory.assert_fact(queue.popleft())
            for cr, matched in firings or ():
                self.stats["firings"] += 1
                if self.timers.hold(cr, matched):
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

    def _rederived(self, again: Live, firing: Firing) -> None:
        """A conclusion drawn again from other evidence: the firing is recorded and the facts it
        matched join the incident, so that explain shows every derivation and its lines."""
        if again.incident is not None:
            if (inc := self._incident(again.incident)) is not None:
                self._attach(inc, again.fact, [firing])
            return
        for queue in self.pending.values():  # not in an incident yet: it joins one with both firings
            for old, firings in queue:
                if old.id == again.fact.id:
                    firings.append(firing)
                    return

    # -- incidents -------------------------------------------------------------------------
    def _route(self, derived: Fact, firing: Firing) -> None:
        # a derived fact joins the open incident of the facts it was derived from; else its scope's
        inc = None
        for fid in firing[1].values():
            live = self.live.get(fid)
            if live is not None and live.incident is not None:
                inc = self.open.by_id.get(live.incident)
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
                if not (derived.kind == "fault" and late.best is not None and rank(derived) < rank(late.best)):
                    self._attach(late, derived, [firing])
                    return
        if inc is None and not opens:
            self.pending.setdefault(key, deque(maxlen=256)).append((derived, [firing]))
            return
        if inc is None:
            first = derived.get("job")
            inc = OpenIncident(
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

    def _attach(self, inc: OpenIncident, fact: Fact, firings: list[Firing]) -> None:
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
        if (held := self.live.get(fact.id)) is None:
            held = self.live[fact.id] = Live(fact)
        held.incident = inc.id
        if fact.kind == "fault" and fact.id not in inc.fault_ids:
            inc.faults.append(fact)
            inc.fault_ids.add(fact.id)
            if inc.best is None or rank(fact) < rank(inc.best):
                inc.best = fact
                self.store.set_provisional(inc.id, str(fact.get("fault_class")), fact.get("nodes") or (), fact.id)
            if self.decider.wants_at_once(fact):
                self.decider.isolate_now(inc.id, inc.key, fact, lambda: self._evidence(inc), bound=inc.bound)
            self._wait_for_job(inc, fact.at)
            job, attempt = inc.bound or split_key(inc.key)
            if inc.best is fact and job is not None:
                evidence = [self.live[f].fact for f in inc.facts if f in self.live]
                self.outages.failed(inc.id, job, attempt or 0, fact, self._holding(job, attempt or 0), evidence)
        inc.last_at = max(inc.last_at, fact.at)
        self.store.touch_incident(inc.id, fact.at)

    # -- the scheduler's answer: which job held a node's incident's node -----------------------
    def _wait_for_job(self, inc: OpenIncident, at: float) -> None:
        """A fault (at ``at``) of a node's incident with no job: which job attempt held the node
        is asked of the scheduler (the caller: ``to_ask``), never guessed (see ``core.bind``)."""
        kind, _, node = inc.key.partition(":")
        if kind == "node" and inc.bound is None and inc.id not in self.waits:
            self.waits.add(inc.id, node, at)

    def to_ask(self) -> set[str]:
        """Nodes whose incident waits for the scheduler to say which job held them, not yet asked."""
        return self.waits.to_ask()

    @_then_flush
    def holders(self, jobs: Any, covers: Any, asked_at: float) -> None:
        """The scheduler's answer: the job attempts ``jobs`` hold the nodes they list, of the
        nodes ``covers``, as of ``asked_at`` (when the question was put). A node's incident that
        waits for it is bound to its job attempt: the same decision and plan as when the job was
        known at once (its requeue excluding the node), planned now if the fault is isolated at
        once or the incident closed already."""
        if not len(self.waits):
            return
        for wait, holders in self.waits.answer(jobs, covers, asked_at):
            self._bind(wait, holders)

    def _bind(self, wait: Wait, holders: list[Any]) -> None:
        if (inc := self._incident(wait.incident)) is None:
            return
        job_id, attempt = str(holders[0].job_id), int(holders[0].attempt or 0)
        note = bound_note(wait.node, holders)
        inc.bound = (job_id, attempt)
        closed = inc.closed_at is not None
        table = self.recent if closed else self.open
        key = f"job:{job_id}:{attempt}"
        if table.get(inc.key) is inc and key not in table:  # later evidence of the job finds it
            del table[inc.key]
            inc.key = key
            table[key] = inc
        self.store.bind_incident(inc.id, inc.key, job_id, attempt)
        logger.warning("incident %s: %s", inc.id, note["why"])
        if closed:
            self.decider.bind_closed(
                inc.id,
                job_id,
                attempt,
                inc.faults,
                inc.best,
                self.now if self.now is not None else inc.last_at,
                self._evidence(inc),
                inc.decision,
                note,
            )
            return
        inc.notes.append(note)
        for old, firings in self.pending.pop(key, ()):  # the job's warnings join it, as at an opening
            if old.at >= inc.opened_at - self.settle:
                self._attach(inc, old, firings)
        if inc.best is not None and self.decider.wants_at_once(inc.best):
            self.decider.isolate_now(inc.id, inc.key, inc.best, lambda: self._evidence(inc), bound=inc.bound)

    def _evidence(self, inc: OpenIncident) -> dict[str, Any]:
        return inc.evidence(self.live)

    def _close(self, inc: OpenIncident, at: float) -> ClosedIncident:
        closed = self.decider.close(
            inc.id,
            inc.key,
            inc.faults,
            inc.best,
            at,
            self._evidence(inc),
            bound=inc.bound,
            notes=inc.notes,
            suspects=self._suspects(inc),
            held_by=self._held_by(inc),
        )
        inc.decision = closed.decision.decision
        # its facts stay in the Rete for the cascade window, so late evidence still correlates
        self.recent[inc.key] = inc
        inc.closed_at = at
        self.closed.append(closed)
        if self.on_close is not None:
            try:
                self.on_close(closed)
            except Exception:
                logger.exception("incident %s: close callback failed", inc.id)
        return closed

    def _held_by(self, inc: OpenIncident) -> int | None:
        job, attempt = inc.bound or split_key(inc.key)
        best = inc.best.get("fault_class") if inc.best is not None else None
        return self.outages.holding(job, attempt or 0, str(best)) if job is not None else None

    def _retract_all(self, inc: OpenIncident) -> None:
        for fid in list(inc.facts):
            self.memory.retract(fid)

    def _incident(self, incident: int) -> OpenIncident | None:
        """The open, else the recently closed, incident with this id."""
        return self.open.by_id.get(incident) or self.recent.by_id.get(incident)

    # -- time ------------------------------------------------------------------------------
    @_then_flush
    def advance(self, now: float) -> None:
        """Move time forward: fire due timers, close settled incidents, expire old facts."""
        self._advance(now)

    def _fire_later(self, cr: CompiledRule, matched: dict[str, dict]) -> None:
        """A delayed or absence firing whose facts are all still held."""
        if all(str(m.get("id")) in self.live for m in matched.values()):
            derived = self._fire(cr, matched)
            if derived is not None:
                self._assert_chain(derived)

    def _advance(self, now: float) -> None:
        if self.now is not None and now <= self.now:
            return
        self.now = now
        for _, cr, matched in self.timers.due_delayed(now):
            self._fire_later(cr, matched)
        for w in self.timers.expired_watches(now):
            self._fire_later(w.rule, w.matched)
        for key, inc in self.recent.ended(now, self.cascade):
            del self.recent[key]
            self.waits.drop(inc.id)  # no longer bound: its cascade is over
            self._retract_all(inc)
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
        for key, inc in self.open.settled(now, self.settle):
            del self.open[key]
            self._close(inc, now)
        self.outages.advance(now)
        self.memory.expire(now - self.fact_ttl, lambda live: live.incident in self.open.by_id)

    def close(self) -> None:
        """Done with this engine (after ``finish``, or when a controller replaces it): its facts
        leave the Rete and its session is handed on (durable_rules holds 1,024 per rulebook)."""
        if not self._closed:
            self._closed = True
            self.session.close()

    def finish(self) -> list[ClosedIncident]:
        """End of input (replay, tests): fire what is due and close every open incident."""
        # an absence is only proven by time passing: the end of a file proves nothing
        at = self.now if self.now is not None else 0.0
        for key, inc in list(self.recent.items()):
            del self.recent[key]
            self._retract_all(inc)
        for key, inc in list(self.open.items()):
            del self.open[key]
            self._close(inc, max(at, inc.last_at))
            self.recent.pop(key, None)
            self._retract_all(inc)
        self.outages.finish(at)
        self.waits = NodeWaits()
        self.store.flush()
        return list(self.closed)
