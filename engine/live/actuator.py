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
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import time
from typing import Any, Callable

from engine.core.actions import idem_key, plan_actions
from engine.core.policy import DEFAULT_GUARDS, isolate_settings
from engine.errors import SchedulerError, StoreError
from engine.live.metrics import LogLimiter
from engine.rulebook.compile import CompiledRulebook
from engine.store import TERMINAL, Store

logger = logging.getLogger(__name__)

__all__ = ["Actuator", "VERIFIERS", "live_job"]

DEFAULT_VERIFY = {
    "drain": "node_drained",
    "requeue": "job_requeued",
    "exclude": "job_excluded",
    "hold": "job_held",
    "keep_held": "job_held",
    "release": "job_released",
    "resume": "node_resumed",
    "cancel": "job_cancelled",
    "notify": "none",
    "alertmanager": "none",
}
#: what a Slurm command prints when slurmctld does not answer: not a verdict on the command
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Could not establish a configuration|"
    r"Zero Bytes were transmitted or received|Connection refused",
    re.IGNORECASE,
)
_EXC_ARG = re.compile(r"^ExcNodeList=(.*)$")
ACTIVE = ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED")
#: the store refusing a write (as live.batch.STORE_ERRORS): the controller's outage handling owns it
_STORE_ERRORS = (StoreError, sqlite3.Error)


class Unknown(Exception):
    """The scheduler could not tell (it did not answer): wait, never guess."""


class Wait(Unknown):
    """The job is between states (a requeued attempt still completing): ask again shortly."""


def _node(adapter, name: str):
    for n in adapter.nodes():
        if n.name == name:
            return n
    return None


def live_job(adapter, job: str):
    """The job as Slurm has it right now, with required nodes and GPU indexes where the adapter can
    tell (``job_detail``); raises Unknown when the scheduler does not answer. Any other exception
    is a bug and goes up as it is."""
    detail = getattr(adapter, "job_detail", None)
    try:
        return detail(job) if detail is not None else adapter.job(job)
    except SchedulerError as exc:
        raise Unknown(str(exc)) from exc


def base_attempt(action: dict, inc) -> int:
    """The attempt an action is about: the incident's, or the one named in its key (``...@2``,
    a requeue of a new attempt that landed on a bad node)."""
    _, at, n = str(action.get("idem_key", "")).rpartition("@")
    return int(n) if at and n.isdigit() else int(inc.attempt or 0)


def excluded_in(action: dict) -> set[str] | None:
    for a in action.get("argv") or ():
        m = _EXC_ARG.match(a)
        if m:
            return {x for x in m.group(1).split(",") if x}
    return None


def _v_node_drained(adapter, action: dict, inc) -> bool:
    n = _node(adapter, action["target"])
    return bool(n and n.drained and f"incident {inc.id}" in (n.reason or ""))


def _v_node_resumed(adapter, action: dict, inc) -> bool:
    n = _node(adapter, action["target"])
    return bool(n and not n.drained)


def _v_job_requeued(adapter, action: dict, inc) -> bool:
    j = live_job(adapter, action["target"])
    return bool(j and j.attempt > base_attempt(action, inc))


def _v_job_excluded(adapter, action: dict, inc) -> bool:
    j = live_job(adapter, action["target"])
    if j is None:
        return False
    want = excluded_in(action)
    if want is None:
        want = set(inc.nodes) - set(getattr(j, "required_nodes", ()) or ())
    return want <= set(j.excluded_nodes)


def _v_job_held(adapter, action: dict, inc) -> bool:
    j = live_job(adapter, action["target"])
    return bool(j and j.state == "PENDING" and "held" in (j.reason or "").lower())


def _v_job_released(adapter, action: dict, inc) -> bool:
    j = live_job(adapter, action["target"])
    return bool(j and "held" not in (j.reason or "").lower())


def _v_job_cancelled(adapter, action: dict, inc) -> bool:
    j = live_job(adapter, action["target"])
    return j is None or j.state in ("CANCELLED", "COMPLETED", "FAILED")


VERIFIERS: dict[str, Callable[[Any, dict, Any], bool]] = {
    "node_drained": _v_node_drained,
    "node_resumed": _v_node_resumed,
    "job_requeued": _v_job_requeued,
    "job_excluded": _v_job_excluded,
    "job_held": _v_job_held,
    "job_released": _v_job_released,
    "job_cancelled": _v_job_cancelled,
}


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
        monotonic: Callable[[], float] = time.monotonic,
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
        self._monotonic = monotonic
        #: warnings about an action that waits go out once per LOG_EVERY_S, not on every step
        self.limiter = LogLimiter(monotonic=monotonic)
        #: action id -> (when it first could not be told, how many times in a row)
        self._unknown: dict[int, tuple[float, int]] = {}
        self.hold_after_run = float(os.environ.get("RECOVER_TEST_HOLD_AFTER_RUN", "0") or 0)

    @property
    def drain_retry_for(self) -> float:
        if self._drain_retry_for is not None:
            return self._drain_retry_for
        return float(isolate_settings(self.compiled)["drain_retry_for"])

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

    def _check(self, action: dict, inc) -> bool:
        """Is the action's effect there? Raises Unknown when the scheduler could not tell; anything
        else a verifier raises is a bug and goes up to ``step()``."""
        name = self._verify_name(action)
        fn = VERIFIERS.get(name)
        if name == "none" or fn is None:
            return action.get("rc") == 0
        try:
            return bool(fn(self.adapter, action, inc))
        except SchedulerError as exc:
            raise Unknown(f"verify {name}: {exc}") from exc

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

    def _note_incident(self, inc, guard: str, why: str) -> None:
        row = self.store.incident(inc.id)
        guards = list(row.guards if row is not None else inc.guards)
        if any(g.get("guard") == guard and g.get("why") == why for g in guards):
            return
        guards.append({"guard": guard, "why": why})
        self.store.set_incident_guards(inc.id, guards)

    def outcome(self, incident_id: int) -> str:
        """What was done, what failed and what was refused for this incident, in a few words."""
        done, failed, refused, waiting, skipped = [], [], [], [], []
        for a in self.store.actions(incident_id):
            if a["mode"] != "act" or a["action"] in ("notify", "alertmanager") or "notify" in a["idem_key"]:
                continue
            what = f"{a['action']} {a['target']}"
            note = (a.get("note") or "").strip()
            if a["status"] == "verified":
                done.append(what + (f" ({note})" if note else ""))
            elif a["status"] == "skipped":
                (refused if note.startswith("refused") else skipped).append(f"{what}: {note}" if note else what)
            elif a["status"] == "escalated":
                failed.append(f"{what}: {note}")
            elif a["status"] == "failed":
                waiting.append(f"{what} not taken yet ({(a.get('output') or '').strip()[-80:]})")  # noqa: E501
            else:
                waiting.append(f"{what} {a['status']}")
        inc = self.store.incident(incident_id)
        policy = [
            g.get("why", "")
            for g in (inc.guards if inc is not None else ())
            if g.get("guard") in ("blast_radius", "retry_budget", "no_progress", "cancelled", "silence", "autonomy")
        ]
        parts = []
        for label, items in (
            ("done", done),
            ("FAILED", failed),
            ("refused", refused + policy),
            ("not done", skipped),
            ("pending", waiting),
        ):
            if items:
                parts.append(f"{label}: " + ", ".join(items))
        # pages keep only characters safe everywhere (see actions.safe_reason): no ; or |
        return " / ".join(parts) or "nothing to do"

    def _plan(self, inc, names: tuple[str, ...], *, job: str | None = None, attempt: int | None = None, **extra):
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

    def _rerender(self, action: dict, inc, **extra) -> bool:
        """Render the action again with what is known now (live exclusions, the outcome so far)."""
        plan, problems = self._plan(inc, (action["action"],), reason=inc.reason or "", **extra)
        mine = [p for p in plan if p.target == action["target"]]
        if not mine:
            logger.warning("action %s could not be rendered again: %s", action["id"], "; ".join(problems))
            return False
        argv = list(mine[0].argv)
        if argv != list(action["argv"]):
            self.store.set_action_argv(action["id"], argv)
            action["argv"] = argv
        return True

    def _page(self, inc, why: str, tag: str, job: str | None = None) -> None:
        """Tell people (the rulebook's notify), once per incident, tag and job."""
        if self.compiled.actions.get("notify") is None:
            return
        outcome = f"{why} / {self.outcome(inc.id)}"
        plan, _ = plan_actions(
            self.compiled,
            inc.decision or "stop",
            inc.id,
            job or inc.job,
            inc.attempt,
            inc.nodes,
            inc.fault_class or "unknown",
            names=("notify",),
            reason=inc.reason or "",
            outcome=outcome,
        )
        for p in plan:
            key = idem_key(inc.id, f"notify-{tag}", p.target)
            if self.store.add_action(inc.id, key, "notify", p.target, p.argv, "act", "planned", note=why) is not None:
                logger.error("incident %s: %s", inc.id, why)

    def _escalate(self, action: dict, inc, why: str) -> None:
        self.store.update_action(action["id"], "escalated", note=why)
        self._count(action["action"], "escalated")
        self._note_incident(inc, "escalated", f"{action['action']} {action['target']}: {why}")
        if action["action"] != "notify":
            self._page(inc, f"ESCALATED: {action['action']} {action['target']}: {why}", "escalation")

    # -- re-planning against the live state --------------------------------------------------------
    def _preflight(self, action: dict, inc) -> tuple[str, str] | None:
        """Immediately before a command: read the live state and re-plan. None: run it as planned;
        else (status, note): "verified" (its effect is there already), "skipped" (not needed, or
        refused: the note says why). Raises Unknown when the scheduler cannot tell."""
        kind = self._verify_name(action)
        if kind == "job_cancelled":
            decided = self._pre_cancel(action, inc)
            if decided is not None:
                return decided
        level = self._autonomy_of(action["action"])
        if level in ("observe", "recommend"):
            return "recommended", f"policy.autonomy.{action['action']} is {level}: recommended, not run"
        if kind == "job_requeued":
            return self._pre_requeue(action, inc)
        if kind == "job_excluded":
            return self._pre_exclude(action, inc)
        if kind == "node_drained":
            return self._pre_drain(action, inc)
        if (
            kind == "none"
            and action["action"] in ("notify", "alertmanager")
            or "{{ outcome }}" in self._sources(action)
        ):
            self._rerender(
                action, inc, outcome=(f"{action['note']} / " if action.get("note") else "") + self.outcome(inc.id)
            )
        return None

    def _autonomy_of(self, name: str) -> str | None:
        """An action's own autonomy (``policy.autonomy.cancel``), where the policy sets one."""
        cfg = self.compiled.policy.get("autonomy") or {}
        level = cfg.get(name) if name not in (self.compiled.policy.get("plans") or {}) else None
        if level is None:
            level = (
                DEFAULT_GUARDS["autonomy"].get(name) if name not in (self.compiled.policy.get("plans") or {}) else None
            )
        # autonomy.classes is the fault classes' grants, never an action's
        return level if isinstance(level, str) else None

    def _pre_cancel(self, action: dict, inc) -> tuple[str, str] | None:
        job = action["target"]
        live = live_job(self.adapter, job)
        if live is None or live.state not in ACTIVE:
            return "skipped", f"job {job} already ended: nothing to free"
        if live.attempt != base_attempt(action, inc):
            return "skipped", f"job {job} runs a newer attempt ({live.attempt}): not cancelled"
        return None

    def _sources(self, action: dict) -> str:
        a = self.compiled.actions.get(action["action"])
        return " ".join(t.source for t in a.argv) if a is not None else ""

    def _pre_requeue(self, action: dict, inc) -> tuple[str, str] | None:
        job = action["target"]
        live = live_job(self.adapter, job)
        base = base_attempt(action, inc)
        bad = set(inc.nodes)
        if live is None:
            return "skipped", f"job {job} is no longer known to the scheduler"
        if not live.requeue:
            return "skipped", f"refused: job {job} opted out of requeue (--no-requeue, Requeue=0); it was not requeued"
        if live.attempt > base:
            on_bad = sorted(set(live.nodes) & bad) if live.state in ACTIVE else []
            note = f"already restarted by Slurm or a person (attempt {base} -> {live.attempt}); not requeued again"
            if on_bad:
                key = f"{idem_key(inc.id, 'requeue', job)}@{live.attempt}"
                if (
                    self.store.add_action(
                        inc.id,
                        key,
                        "requeue",
                        job,
                        action["argv"],
                        "act",
                        "planned",
                        note=f"attempt {live.attempt} landed on {','.join(on_bad)}",
                    )
                    is not None
                ):
                    note += f"; attempt {live.attempt} landed on {','.join(on_bad)}: it is requeued"
            return "skipped", note
        if live.state == "PENDING":
            return "skipped", f"job {job} is already pending ({live.reason or 'queued'}): not requeued"
        if base_attempt(action, inc) == int(inc.attempt or 0):
            return self._shared_nodes(action, inc, live)
        return None

    def _faulty_gpus(self, inc, node: str) -> set[int]:
        """GPU indexes the incident's evidence names on ``node`` (NVML facts carry them)."""
        found = set()
        for f, _, _ in self.store.facts(inc.id):
            gpu = f.attrs.get("gpu")
            if f.attrs.get("node") == node and isinstance(gpu, int) and not isinstance(gpu, bool):
                found.add(gpu)
        return found

    def _shared_nodes(self, action: dict, inc, live) -> tuple[str, str] | None:
        """A node shared by several jobs: requeue only the job that holds the faulty GPU; when that
        is not known, requeue none of them blindly, and name and tell every one."""
        job = action["target"]
        try:
            others = [
                j
                for j in self.adapter.jobs()
                if j.job_id != job and j.state in ACTIVE and set(j.nodes) & set(inc.nodes)
            ]
        except SchedulerError as exc:
            raise Unknown(str(exc)) from exc
        if not others:
            return None
        holders: set[str] = set()
        for node in sorted(set(inc.nodes) & {n for j in others for n in j.nodes}):
            gpus = self._faulty_gpus(inc, node)
            maps = {}
            for j in [live] + others:
                if node in j.nodes:
                    d = j if getattr(j, "detailed", False) else live_job(self.adapter, j.job_id)
                    maps[j.job_id] = d.gpus_on(node) if d is not None else None
            if not gpus or any(v is None for v in maps.values()):
                names = ", ".join(sorted(maps))
                why = (
                    f"node {node} is shared by jobs {names} and which of them holds the faulty GPU is not known: "
                    "none is requeued blindly; the drain lets them finish"
                )
                self._note_incident(inc, "shared_node", why)
                for other in sorted(maps):
                    self._page(inc, why, f"shared-{node}", job=other)
                return "skipped", why
            holders |= {jid for jid, idx in maps.items() if idx and set(idx) & gpus}
        for other in sorted(holders - {job}):
            o = next(j for j in others if j.job_id == other)
            # rendered for that job from the template: patching this job's argv would leave an
            # element such as JobId=<this job> alone and requeue the job judged not to hold the GPU
            plan, problems = self._plan(inc, ("requeue",), job=other, attempt=o.attempt, reason=inc.reason or "")
            mine = [p for p in plan if p.target == other]
            if not mine:
                why = f"job {other} holds the faulty GPU but its requeue could not be planned: {'; '.join(problems) or 'no requeue action'}"
                self._note_incident(inc, "shared_node", why)
                self._page(inc, why, f"shared-{other}", job=other)
                continue
            self.store.add_action(
                inc.id,
                f"{mine[0].idem_key}@{o.attempt}",
                "requeue",
                other,
                list(mine[0].argv),
                "act",
                "planned",
                note=f"holds the faulty GPU on {','.join(o.nodes)}",
            )
        if job not in holders:
            why = f"job {job} does not hold the faulty GPU: it keeps running (the drain lets it finish)"
            self._note_incident(
                inc, "shared_node", why + (f"; requeued instead: {', '.join(sorted(holders))}" if holders else "")
            )
            return "skipped", why
        return None

    def _pre_exclude(self, action: dict, inc) -> tuple[str, str] | None:
        job = action["target"]
        live = live_job(self.adapter, job)
        if live is None:
            return "skipped", f"job {job} is no longer known to the scheduler"
        bad = set(inc.nodes)
        required = bad & set(getattr(live, "required_nodes", ()) or ())
        if required:
            self._keep_held(inc, job, required)
        union = set(live.excluded_nodes) | (bad - required)
        # the journal shows the list this command sets (or would have set), never the plan's guess
        if not self._rerender(action, inc, excluded=sorted(union)):
            return "skipped", "could not be rendered with the job's exclusion list"
        if required and not (bad - required):
            return (
                "skipped",
                f"refused: not excluded from {','.join(sorted(required))}: the job requires it (held instead)",
            )
        if (bad - required) <= set(live.excluded_nodes):
            return "verified", "already excluded"
        if live.state in ("COMPLETING", "CONFIGURING") or live.state == "REQUEUED":
            raise Wait(f"job {job} is {live.state.lower()}: its exclusion list is set once it is pending")
        if live.state != "PENDING":
            where = f" on {','.join(live.nodes)}" if live.nodes else ""
            return "skipped", (
                f"job {job} is {live.state.lower()}{where}: its exclusion list changes only while it is pending"
            )
        return None

    def _keep_held(self, inc, job: str, required: set[str]) -> None:
        nodes = ",".join(sorted(required))
        why = (
            f"job {job} requires {nodes} (-w), which is isolated for {inc.fault_class}: it is not excluded from it; "
            f"the job is held until a person releases it (scontrol release {job}) or changes its node list"
        )
        self._note_incident(inc, "required_node", why)
        if self.compiled.actions.get("keep_held") is not None:
            plan, _ = self._plan(inc, ("keep_held",))
            for p in plan:
                self.store.add_action(inc.id, p.idem_key, p.name, p.target, p.argv, "act", "planned", note=why)
        self._page(inc, why, "required-node")

    def _pre_drain(self, action: dict, inc) -> tuple[str, str] | None:
        try:
            node = _node(self.adapter, action["target"])
        except SchedulerError as exc:
            raise Unknown(str(exc)) from exc
        if node is None:
            return "skipped", f"node {action['target']} is not known to the scheduler"
        if node.drained and f"incident {inc.id}" in (node.reason or ""):
            return "verified", "found drained"
        if node.drained:
            return (
                "verified",
                f"already drained by someone else (reason: {(node.reason or '-')[:80]}); their reason kept",
            )
        return None

    def _replan_and_run(self, action: dict, inc) -> bool:
        """Re-plan against the live state; run unless that says otherwise. True when terminal."""
        decided = self._preflight(action, inc)
        if decided is None:
            self._run(action)
            return False
        status, note = decided
        self.store.update_action(action["id"], status, verified=(status == "verified") or None, note=note)
        self._count(action["action"], status)
        logger.log(
            logging.INFO if status == "verified" else logging.WARNING,
            "act incident=%s action=%s target=%s: %s (%s)",
            action["incident"],
            action["action"],
            action["target"],
            status,
            note,
        )
        return True

    def step(self) -> None:
        """Advance every unfinished incident's actions by at most one state each."""
        for incident_id in self.store.unfinished_incidents():
            inc = self.store.incident(incident_id)
            blocked = False
            for action in self.store.actions(incident_id):
                if action["mode"] != "act" or action["status"] in TERMINAL:
                    continue
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
        except Wait as exc:  # it answered: the job is between states
            self._unknown.pop(action["id"], None)
            logger.debug("action %s waits: %s", action["id"], exc)
            return False
        except Unknown as exc:
            return self._could_not_tell(action, inc, exc)
        self._unknown.pop(action["id"], None)  # the scheduler answered
        return done

    def _could_not_tell(self, action: dict, inc, exc: Exception) -> bool:
        """The scheduler could not tell: wait, never guess; but not for ever. Once it has answered
        nothing else for ``drain_retry_for`` (and at least ``max_attempts`` times in a row), the
        action is escalated: a person is told, and the plan no longer waits behind it. True then."""
        now = self._monotonic()
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
            self._note_incident(inc, "drain_pending", f"drain of {action['target']} has not taken yet")
            self._page(
                inc, why + f"; retrying for up to {self.drain_retry_for:.0f} s", f"drain-pending-{action['target']}"
            )
            first = float(action.get("created_at") or action["updated_at"])
            if time.time() - first >= self.drain_retry_for:
                self._escalate(action, inc, f"the scheduler did not answer for {time.time() - first:.0f} s")
                return True
        return False

    def _unreachable(self, action: dict) -> bool:
        return bool(_UNREACHABLE.search(action.get("output") or ""))

    def _advance(self, action: dict, inc) -> bool:
        """Move one action along; True when it reached a terminal state."""
        status = action["status"]
        age = time.time() - float(action["updated_at"])
        if status == "planned":
            return self._replan_and_run(action, inc)
        if status == "started":  # a crash between start and result: did it happen?
            # could not verify is not "not done": Unknown goes up, and nothing is re-run on a guess
            seen = self._check(action, inc)
            if seen:
                self.store.update_action(action["id"], "verified", verified=True, note="found done after a restart")
                return True
            if action["attempts"] >= self.max_attempts:
                self._escalate(action, inc, "could not be confirmed after a restart")
                return True
            return self._replan_and_run(action, inc)
        if status == "succeeded":
            seen = self._check(action, inc)
            if seen:
                self.store.update_action(action["id"], "verified", verified=True)
                self._count(action["action"], "verified")
                return True
            if age < self.verify_timeout:
                return False
            if action["attempts"] >= self.max_attempts:
                self._escalate(action, inc, f"ran {action['attempts']} times but its effect was never seen")
                return True
            return self._replan_and_run(action, inc)
        if status == "failed":
            seen = self._check(action, inc) if self._verify_name(action) != "none" else False
            if seen:
                self.store.update_action(
                    action["id"], "verified", verified=True, note="effect present despite the error"
                )
                return True
            # a drain, and anything that failed because slurmctld was away, is retried with backoff
            # for longer than a controller failover; other failures have max_attempts
            by_time = self._verify_name(action) == "node_drained" or self._unreachable(action)
            if by_time:
                first = float(action.get("created_at") or action["updated_at"])
                waited = time.time() - first
                if self._verify_name(action) == "node_drained":
                    why = (
                        f"drain of {action['target']} has not taken yet "
                        f"({(action.get('output') or '').strip()[-120:]}); retrying for up to {self.drain_retry_for:.0f} s"
                    )
                    self._note_incident(inc, "drain_pending", f"drain of {action['target']} has not taken yet")
                    self._page(inc, why, f"drain-pending-{action['target']}")
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
