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
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable

from .actions import idem_key
from .rulebook.compile import CompiledRulebook
from .store import Store

logger = logging.getLogger(__name__)

__all__ = ["Actuator", "VERIFIERS"]

TERMINAL = ("verified", "escalated", "skipped", "recommended")
DEFAULT_VERIFY = {"drain": "node_drained", "requeue": "job_requeued", "exclude": "job_excluded", "hold": "job_held",
                  "release": "job_released", "resume": "node_resumed", "cancel": "job_cancelled", "notify": "none"}


def _node(adapter, name: str):
    for n in adapter.nodes():
        if n.name == name:
            return n
    return None


def _v_node_drained(adapter, action: dict, inc) -> bool:
    n = _node(adapter, action["target"])
    return bool(n and n.drained and f"incident {inc.id}" in (n.reason or ""))


def _v_node_resumed(adapter, action: dict, inc) -> bool:
    n = _node(adapter, action["target"])
    return bool(n and not n.drained)


def _v_job_requeued(adapter, action: dict, inc) -> bool:
    j = adapter.job(action["target"])
    return bool(j and j.attempt > int(inc.attempt or 0))


def _v_job_excluded(adapter, action: dict, inc) -> bool:
    j = adapter.job(action["target"])
    return bool(j and set(inc.nodes) <= set(j.excluded_nodes))


def _v_job_held(adapter, action: dict, inc) -> bool:
    j = adapter.job(action["target"])
    return bool(j and j.state == "PENDING" and "held" in (j.reason or "").lower())


def _v_job_released(adapter, action: dict, inc) -> bool:
    j = adapter.job(action["target"])
    return bool(j and "held" not in (j.reason or "").lower())


def _v_job_cancelled(adapter, action: dict, inc) -> bool:
    j = adapter.job(action["target"])
    return j is None or j.state in ("CANCELLED", "COMPLETED", "FAILED")


VERIFIERS: dict[str, Callable[[Any, dict, Any], bool]] = {
    "node_drained": _v_node_drained, "node_resumed": _v_node_resumed, "job_requeued": _v_job_requeued,
    "job_excluded": _v_job_excluded, "job_held": _v_job_held, "job_released": _v_job_released,
    "job_cancelled": _v_job_cancelled,
}


class Actuator:
    def __init__(self, store: Store, adapter, compiled: CompiledRulebook, metrics=None, *,
                 max_attempts: int = 3, verify_timeout: float = 20.0, retry_delay: float = 2.0):
        self.store = store
        self.adapter = adapter
        self.compiled = compiled
        self.metrics = metrics
        self.max_attempts = max_attempts
        self.verify_timeout = verify_timeout
        self.retry_delay = retry_delay
        self.pending = False
        self.hold_after_run = float(os.environ.get("RECOVER_TEST_HOLD_AFTER_RUN", "0") or 0)

    @classmethod
    def for_controller(cls, controller) -> "Actuator":
        if controller.adapter is None:
            raise RuntimeError("acting needs a scheduler: use --scheduler slurm, or --dry-run")
        return cls(controller.store, controller.adapter, controller.compiled, controller.metrics)

    def submit(self, closed) -> None:
        """An incident closed with planned actions. They are already in the journal (committed with
        the incident); the controller's loop runs them on its next ``step()``, outside any
        transaction, so that "started" is on disk before a command runs."""
        self.pending = True

    def _verify_name(self, action: dict) -> str:
        a = self.compiled.actions.get(action["action"])
        return (a.verify if a is not None and a.verify else None) or DEFAULT_VERIFY.get(action["action"], "none")

    def _verified(self, action: dict, inc) -> bool:
        name = self._verify_name(action)
        if name == "none":
            return action.get("rc") == 0
        fn = VERIFIERS.get(name)
        if fn is None:
            return action.get("rc") == 0
        try:
            return fn(self.adapter, action, inc)
        except Exception as exc:
            logger.warning("verify %s of action %s failed: %s", name, action["id"], exc)
            return False

    def _count(self, action: str, status: str) -> None:
        if self.metrics is not None:
            self.metrics.actions.labels(action=action, status=status).inc()

    def _run(self, action: dict) -> None:
        a = self.compiled.actions.get(action["action"])
        timeout = a.timeout if a is not None else 30.0
        # journal first: if we die after this line, the restart verifies before running again
        self.store.update_action(action["id"], "started", attempt=True)
        result = self.adapter.run(action["argv"], timeout)
        if self.hold_after_run:  # test seam: widen the crash window between running and journaling
            time.sleep(self.hold_after_run)
        output = (result.stdout + result.stderr)[-2000:]
        status = "succeeded" if result.rc == 0 else "failed"
        self.store.update_action(action["id"], status, rc=result.rc, output=output)
        self._count(action["action"], status)
        logger.warning("act incident=%s action=%s target=%s rc=%s cmd=%s", action["incident"], action["action"],
                       action["target"], result.rc, json.dumps(action["argv"]))

    def _escalate(self, action: dict, inc, why: str) -> None:
        self.store.update_action(action["id"], "escalated", note=why)
        self._count(action["action"], "escalated")
        guards = list(inc.guards) + [{"guard": "escalated", "why": f"{action['action']} {action['target']}: {why}"}]
        self.store._exec("UPDATE incidents SET guards = ? WHERE id = ?", (json.dumps(guards), inc.id))
        notify = self.compiled.actions.get("notify")
        if notify is not None and action["action"] != "notify":
            from .actions import plan_actions

            plan, _ = plan_actions(self.compiled, inc.decision or "stop", inc.id, inc.job, inc.attempt, inc.nodes,
                                   inc.fault_class or "unknown", names=("notify",))
            for p in plan:
                key = idem_key(inc.id, "notify-escalation", p.target)
                if self.store.add_action(inc.id, key, "notify", p.target, p.argv, "act", "planned",
                                         note=f"escalation: {why}") is not None:
                    logger.error("incident %s escalated: %s", inc.id, why)

    def step(self) -> None:
        """Advance every unfinished incident's actions by at most one state each."""
        pending = self.store._exec(
            "SELECT DISTINCT incident FROM actions WHERE mode = 'act' AND status NOT IN ('verified','escalated','skipped','recommended') "
            "ORDER BY incident").fetchall()
        for (incident_id,) in pending:
            inc = self.store.incident(incident_id)
            for action in self.store.actions(incident_id):
                if action["mode"] != "act" or action["status"] in TERMINAL:
                    continue
                try:
                    # no enclosing transaction: "started" must be committed before the command runs
                    done = self._advance(action, inc)
                except Exception as exc:  # never let one action stop the loop
                    logger.exception("action %s: %s", action["id"], exc)
                    done = False
                if not done:
                    break  # the next action of this incident waits for this one

    def _advance(self, action: dict, inc) -> bool:
        """Move one action along; True when it reached a terminal state."""
        status = action["status"]
        age = time.time() - float(action["updated_at"])
        if status == "planned":
            self._run(action)
            return False
        if status == "started":  # a crash between start and result: did it happen?
            if self._verified(action, inc):
                self.store.update_action(action["id"], "verified", verified=True, note="found done after a restart")
                return True
            if action["attempts"] >= self.max_attempts:
                self._escalate(action, inc, "could not be confirmed after a restart")
                return True
            self._run(action)
            return False
        if status == "succeeded":
            if self._verified(action, inc):
                self.store.update_action(action["id"], "verified", verified=True)
                self._count(action["action"], "verified")
                return True
            if age < self.verify_timeout:
                return False
            if action["attempts"] >= self.max_attempts:
                self._escalate(action, inc, f"ran {action['attempts']} times but its effect was never seen")
                return True
            self._run(action)
            return False
        if status == "failed":
            if self._verified(action, inc) and self._verify_name(action) != "none":
                self.store.update_action(action["id"], "verified", verified=True, note="effect present despite the error")
                return True
            if action["attempts"] >= self.max_attempts:
                self._escalate(action, inc, f"failed {action['attempts']} times: {(action.get('output') or '')[-200:]}")
                return True
            if age >= self.retry_delay:
                self._run(action)
            return False
        return True
