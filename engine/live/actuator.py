"""Acting: runs the journaled actions through the scheduler adapter, verifies their effect, and
resumes correctly after a crash.

The journal (the store's ``actions`` table) is the truth. An action is written ``planned`` in the
same transaction that closes its incident; before it runs it is marked ``started``; after, its
result is recorded; then its effect is checked against the scheduler (a drained node reports
DRAIN with our reason, a requeued job has a higher restart count...). A controller killed at any
point finds on restart:

    planned    -> runs it
    started    -> it may or may not have run: verify first; run it only if its effect is absent
    succeeded  -> verify (again)
    failed     -> retry while attempts remain, then escalate

so nothing is lost and nothing runs twice. The actions of one incident run in plan order; an
action whose outcome cannot be verified after ``max_attempts`` escalates the incident (a notify
is sent once and the reason recorded).

Only the scheduler's own errors (``SchedulerError``) mean "the scheduler could not tell": the
action waits, and after ``drain_retry_for`` of nothing else it is escalated. Any other exception
is a bug of ours (a verifier, an adapter, a template): it is logged once with its traceback and
the action escalated, never taken for an unanswered question that would hold the plan for ever.

This module is the journal's state machine (``step``, ``_advance``). Around it:
``verify`` (the verifiers: is an action's effect there), ``preflight`` (re-planning by kind
against the live state just before a command runs) and ``paging`` (the outcome in words, and
the pages to people).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from typing import Callable

from engine.clock import SYSTEM, Clock
from engine.core.actions import plan_actions
from engine.core.policy import isolate_settings
from engine.errors import NotYet, StateUnknown, StoreError
from engine.live import paging, verify
from engine.live.metrics import LogLimiter
from engine.live.preflight import preflight
from engine.live.verify import VERIFIERS, live_job
from engine.rulebook.compile import CompiledRulebook
from engine.store import TERMINAL, ActionStatus, Store

logger = logging.getLogger(__name__)

__all__ = ["Actuator", "VERIFIERS", "live_job", "StateUnknown", "NotYet"]

#: the store refusing a write (as live.batch.STORE_ERRORS): the controller's outage handling owns it
_STORE_ERRORS = (StoreError, sqlite3.Error)


class Actuator:
    def __init__(
        self,
        store: Store,
        adapter,
        compiled: CompiledRulebook,
        metrics=None,
        *,
        max_attempts: int = 3,
        verify_timeout: float = 20.0,
        retry_delay: float = 2.0,
        drain_retry_for: float | None = None,
        clock: Clock = SYSTEM,
    ):
        self.store = store
        self.adapter = adapter
        self.compiled = compiled
        self.metrics = metrics
        self.max_attempts = max_attempts
        self.verify_timeout = verify_timeout
        self.retry_delay = retry_delay
        self._drain_retry_for = drain_retry_for
        self.pending = False
        #: False while the scheduler is known not to answer (set by the controller's poller):
        #: actions wait instead of burning their attempts
        self.available = True
        #: retry backoff, verify timeouts and the drain's retry window are measured on this clock,
        #: against the journal's stamps (the store's clock: the controller hands both the same one)
        self.clock = clock
        #: warnings about an action that waits go out once per LOG_EVERY_S, not on every step
        self.limiter = LogLimiter(clock=clock)
        #: action id -> (when it first could not be told, how many times in a row)
        self._unknown: dict[int, tuple[float, int]] = {}
        self.hold_after_run = float(os.environ.get("RECOVER_TEST_HOLD_AFTER_RUN", "0") or 0)
        #: whether this process still leads (the controller's Leadership.acting): asked again after
        #: "started" is journaled, just before the command runs
        self.may_act: Callable[[], bool] = lambda: True

    @property
    def drain_retry_for(self) -> float:
        if self._drain_retry_for is not None:
            return self._drain_retry_for
        return float(isolate_settings(self.compiled)["drain_retry_for"])

    @classmethod
    def for_controller(cls, controller) -> "Actuator":
        if controller.adapter is None:
            raise RuntimeError("acting needs a scheduler: use --scheduler slurm, or --dry-run")
        return cls(
            controller.store, controller.adapter, controller.compiled, controller.metrics, clock=controller.clock
        )

    def submit(self, closed) -> None:
        """An incident closed with planned actions. They are already in the journal (committed with
        the incident); the controller's loop runs them on its next ``step()``, outside any
        transaction, so that "started" is on disk before a command runs."""
        self.pending = True

    def _verify_name(self, action: dict) -> str:
        return verify.verify_name(self.compiled, action)

    def _check(self, action: dict, inc) -> bool:
        """Is the action's effect there? Raises StateUnknown when the scheduler could not tell."""
        return verify.check(self.adapter, self.compiled, action, inc)

    def _count(self, action: str, status: str) -> None:
        if self.metrics is not None:
            self.metrics.actions.labels(action=action, status=status).inc()

    def _run(self, action: dict) -> None:
        a = self.compiled.actions.get(action["action"])
        timeout = a.timeout if a is not None else 30.0
        # journal first: if we die after this line, the restart verifies before running again
        self.store.update_action(action["id"], ActionStatus.STARTED, attempt=True)
        if not self.may_act():
            # the lease ran out between the journal and the command (a pause): the next leader
            # finds it started, verifies, and runs it only if its effect is absent
            logger.error("action %s not run: this controller no longer leads", action["id"])
            return
        result = self.adapter.run(action["argv"], timeout)
        if self.hold_after_run:  # test seam: widen the crash window between running and journaling
            self.clock.sleep(self.hold_after_run)
        output = (result.stdout + result.stderr)[-2000:]
        status = ActionStatus.SUCCEEDED if result.rc == 0 else ActionStatus.FAILED
        self.store.update_action(action["id"], status, rc=result.rc, output=output)
        self._count(action["action"], status)
        # a command that did what it should is routine; one that failed is for an operator to see
        logger.log(
            logging.INFO if result.rc == 0 else logging.WARNING,
            "act incident=%s action=%s target=%s rc=%s cmd=%s",
            action["incident"],
            action["action"],
            action["target"],
            result.rc,
            json.dumps(action["argv"]),
        )

    def note_incident(self, inc, guard: str, why: str) -> None:
        row = self.store.incident(inc.id)
        guards = list(row.guards if row is not None else inc.guards)
        if any(g.get("guard") == guard and g.get("why") == why for g in guards):
            return
        guards.append({"guard": guard, "why": why})
        self.store.set_incident_guards(inc.id, guards)

    def outcome(self, incident_id: int) -> str:
        """What was done, what failed and what was refused for this incident, in a few words."""
        return paging.outcome(self.store, self.compiled, incident_id)

    def replan(self, inc, names: tuple[str, ...], *, job: str | None = None, attempt: int | None = None, **extra):
        """Plan some of a stored incident's actions again, with what is known now; ``job`` and
        ``attempt`` name another job than the incident's (one sharing its node)."""
        return plan_actions(
            self.compiled,
            inc.decision or "stop",
            inc.id,
            inc.job if job is None else job,
            inc.attempt if attempt is None else attempt,
            inc.nodes,
            inc.fault_class or "unknown",
            names=names,
            **extra,
        )

    def rerender(self, action: dict, inc, **extra) -> bool:
        """Render the action again with what is known now (live exclusions, the outcome so far)."""
        plan, problems = self.replan(inc, (action["action"],), reason=inc.reason or "", **extra)
        mine = [p for p in plan if p.target == action["target"]]
        if not mine:
            logger.warning("action %s could not be rendered again: %s", action["id"], "; ".join(problems))
            return False
        argv = list(mine[0].argv)
        if argv != list(action["argv"]):
            self.store.set_action_argv(action["id"], argv)
            action["argv"] = argv
        return True

    def page(self, inc, why: str, tag: str, job: str | None = None) -> None:
        """Tell people (the rulebook's notify), once per incident, tag and job."""
        paging.page(self.store, self.compiled, inc, why, tag, job)

    def _escalate(self, action: dict, inc, why: str) -> None:
        self.store.update_action(action["id"], ActionStatus.ESCALATED, note=why)
        self._count(action["action"], ActionStatus.ESCALATED)
        self.note_incident(inc, "escalated", f"{action['action']} {action['target']}: {why}")
        if action["action"] != paging.page_action(self.compiled):  # not paged about with itself
            self.page(inc, f"ESCALATED: {action['action']} {action['target']}: {why}", "escalation")

    def _replan_and_run(self, action: dict, inc) -> bool:
        """Re-plan against the live state; run unless that says otherwise. True when terminal."""
        decided = preflight(self, action, inc)
        if decided is None:
            self._run(action)
            return False
        status, note = decided
        self.store.update_action(action["id"], status, verified=(status == ActionStatus.VERIFIED) or None, note=note)
        self._count(action["action"], status)
        logger.log(
            logging.INFO if status == ActionStatus.VERIFIED else logging.WARNING,
            "act incident=%s action=%s target=%s: %s (%s)",
            action["incident"],
            action["action"],
            action["target"],
            status,
            note,
        )
        return True

    def step(self) -> None:
        """Advance every unfinished incident's actions by at most one state each, reading the
        scheduler once for the whole step where the adapter can (``snapshot()``: one squeue and
        one sinfo, asked again after any command that may change the cluster)."""
        snapshot = getattr(self.adapter, "snapshot", None)
        with snapshot() if snapshot is not None else contextlib.nullcontext():
            self._step_all()

    def _step_all(self) -> None:
        for incident_id in self.store.unfinished_incidents():
            inc = self.store.incident(incident_id)
            blocked = False
            for action in self.store.actions(incident_id):
                if action["mode"] != "act" or action["status"] in TERMINAL or action["status"] == ActionStatus.HELD:
                    continue  # a held one waits for its shared outage to end (core.shared_outage)
                # a page about the incident (escalation, a drain that has not taken) goes out at
                # once: it must not wait behind the very action it is about
                aside = ":notify-" in str(action["idem_key"])
                if blocked and not aside:
                    continue
                try:
                    done = self._step_one(action, inc, aside)
                except _STORE_ERRORS as exc:  # nothing can be journaled: try again on a later step
                    if self.limiter.ok(f"store-{action['id']}"):
                        logger.warning("action %s waits: the store refused a write (%s)", action["id"], exc)
                    done = False
                except Exception as exc:  # never let one action stop the loop, nor wedge its plan
                    done = self._internal_error(action, inc, exc)
                if not done and not aside:
                    blocked = True  # the next action of this incident waits for this one

    def _step_one(self, action: dict, inc, aside: bool) -> bool:
        """One action moved along by one state; True when it reached a terminal one."""
        try:
            if not self.available and not aside:
                # the poller knows it is away: _wait_for_scheduler's rule applies, not ours
                self._unknown.pop(action["id"], None)
                return self._wait_for_scheduler(action, inc)
            # no enclosing transaction: "started" must be committed before the command runs
            done = self._advance(action, inc)
        except NotYet as exc:  # it answered: the job is between states
            self._unknown.pop(action["id"], None)
            logger.debug("action %s waits: %s", action["id"], exc)
            return False
        except StateUnknown as exc:
            return self._could_not_tell(action, inc, exc)
        self._unknown.pop(action["id"], None)  # the scheduler answered
        return done

    def _could_not_tell(self, action: dict, inc, exc: Exception) -> bool:
        """The scheduler could not tell: wait, never guess; but not for ever. Once it has answered
        nothing else for ``drain_retry_for`` (and at least ``max_attempts`` times in a row), the
        action is escalated: a person is told, and the plan no longer waits behind it. True then."""
        now = self.clock.monotonic()
        first, count = self._unknown.get(action["id"], (now, 0))
        count += 1
        self._unknown[action["id"]] = (first, count)
        waited = now - first
        if waited >= self.drain_retry_for and count >= self.max_attempts:
            self._unknown.pop(action["id"], None)
            self._escalate(
                action,
                inc,
                f"the scheduler could not tell its state for {waited:.0f} s ({count} tries): {str(exc)[:200]}",
            )
            return True
        if self.limiter.ok(f"unknown-{action['id']}"):
            logger.warning(
                "action %s waits: the scheduler could not tell its state (%s); %d in a row over %.0f s, "
                "escalated after %.0f s",
                action["id"],
                exc,
                count,
                waited,
                self.drain_retry_for,
            )
        return False

    def _internal_error(self, action: dict, inc, exc: Exception) -> bool:
        """A bug of ours (a verifier, an adapter, a template), not a scheduler that could not tell:
        logged once with its traceback, and the action escalated rather than retried on every step
        (it would fail the same way) or left holding its plan. True when the journal says so."""
        self._unknown.pop(action["id"], None)
        if self.metrics is not None:
            self.metrics.errors.inc()
        if self.limiter.ok(f"bug-{action['id']}"):
            logger.error(
                "action %s (%s %s): internal error; escalated, not retried",
                action["id"],
                action["action"],
                action["target"],
                exc_info=exc,
            )
        try:
            self._escalate(
                action, inc, f"internal error ({type(exc).__name__}: {str(exc)[:160]}); see the controller log"
            )
        except Exception:  # the store refusing, or the page failing too: the action comes back later
            if self.limiter.ok(f"bug-escalate-{action['id']}"):
                logger.exception("action %s could not be escalated", action["id"])
            return False
        return True

    def _wait_for_scheduler(self, action: dict, inc) -> bool:
        """The scheduler does not answer: nothing can be done or checked. A drain that waits says so."""
        if self._verify_name(action) == "node_drained":
            why = f"drain of {action['target']} waits: the scheduler does not answer"
            self.note_incident(inc, "drain_pending", f"drain of {action['target']} has not taken yet")
            self.page(
                inc, why + f"; retrying for up to {self.drain_retry_for:.0f} s", f"drain-pending-{action['target']}"
            )
            first = float(action.get("created_at") or action["updated_at"])
            if self.clock.wall() - first >= self.drain_retry_for:
                self._escalate(action, inc, f"the scheduler did not answer for {self.clock.wall() - first:.0f} s")
                return True
        return False

    def _advance(self, action: dict, inc) -> bool:
        """Move one action along; True when it reached a terminal state."""
        status = action["status"]
        age = self.clock.wall() - float(action["updated_at"])
        if status == ActionStatus.PLANNED:
            return self._replan_and_run(action, inc)
        if status == ActionStatus.STARTED:  # a crash between start and result: did it happen?
            # could not verify is not "not done": StateUnknown goes up, and nothing is re-run on a guess
            seen = self._check(action, inc)
            if seen:
                self.store.update_action(
                    action["id"], ActionStatus.VERIFIED, verified=True, note="found done after a restart"
                )
                return True
            if action["attempts"] >= self.max_attempts:
                self._escalate(action, inc, "could not be confirmed after a restart")
                return True
            return self._replan_and_run(action, inc)
        if status == ActionStatus.SUCCEEDED:
            seen = self._check(action, inc)
            if seen:
                self.store.update_action(action["id"], ActionStatus.VERIFIED, verified=True)
                self._count(action["action"], ActionStatus.VERIFIED)
                return True
            if age < self.verify_timeout:
                return False
            if action["attempts"] >= self.max_attempts:
                self._escalate(action, inc, f"ran {action['attempts']} times but its effect was never seen")
                return True
            return self._replan_and_run(action, inc)
        if status == ActionStatus.FAILED:
            seen = self._check(action, inc) if self._verify_name(action) != "none" else False
            if seen:
                self.store.update_action(
                    action["id"], ActionStatus.VERIFIED, verified=True, note="effect present despite the error"
                )
                return True
            # a drain, and anything that failed because slurmctld was away, is retried with backoff
            # for longer than a controller failover; other failures have max_attempts
            by_time = self._verify_name(action) == "node_drained" or verify.unreachable(
                self.adapter, action.get("output")
            )
            if by_time:
                first = float(action.get("created_at") or action["updated_at"])
                waited = self.clock.wall() - first
                if self._verify_name(action) == "node_drained":
                    why = (
                        f"drain of {action['target']} has not taken yet "
                        f"({(action.get('output') or '').strip()[-120:]}); retrying for up to {self.drain_retry_for:.0f} s"
                    )
                    self.note_incident(inc, "drain_pending", f"drain of {action['target']} has not taken yet")
                    self.page(inc, why, f"drain-pending-{action['target']}")
                if waited >= self.drain_retry_for:
                    self._escalate(
                        action,
                        inc,
                        f"failed for {waited:.0f} s ({action['attempts']} tries): "
                        f"{(action.get('output') or '')[-200:]}",
                    )
                    return True
                delay = min(30.0, self.retry_delay * 2 ** max(0, action["attempts"] - 1))
                if age >= delay:
                    self._replan_and_run(action, inc)
                return False
            if action["attempts"] >= self.max_attempts:
                self._escalate(action, inc, f"failed {action['attempts']} times: {(action.get('output') or '')[-200:]}")
                return True
            if age >= self.retry_delay:
                return self._replan_and_run(action, inc)
            return False
        return True
