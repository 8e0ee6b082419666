"""One cause, many jobs: a shared outage (``policy.shared_outage``).

Five jobs hitting ``Input/output error`` within seconds, or twenty losing their NCCL peers behind
one leaf switch, are one outage of a filesystem or the fabric, not twenty failures. When at
least ``min_jobs`` different jobs fail with the same fault class (one of ``classes``) within
``window``, and the scheduler names at least ``min_users`` different users among them (where it
names none, the user count is not applied), one shared incident opens (key ``outage:CLASS:T``):
it names the common resource where the evidence shows it, pages once, and holds back the
requeues of its jobs (those that failed then, and every later job failing with that class while
it lasts) so that they do not burn their retry budgets on a dead filesystem. It ends when no new
failure of its class came for ``quiet``, when it has lasted ``hold_limit``, or when an operator
says so (``recover outage end N``: ``request_end``); the held actions are released then.

Trust (DESIGN.md): a failure is counted for the job attempt its fact belongs to, which only the
scheduler (the file's job) decides; a job's log that prints other jobs' errors is still one job.
The resource is a label for people: the path the storage errors name is the jobs' text (cleaned
and bounded by the converter) and is never the target of any action; the nodes are the
scheduler's allocations.

    outages = SharedOutages(compiled, store, scheduler="slurm", mode="recommend")
    outages.user("101", "alice")                       # the scheduler's word on a job
    outages.failed(incident, "101", 0, fault, nodes, paths)
    held_by = outages.holding("101", 0, "storage_io_error")   # when the job's incident closes
    outages.advance(now)                                # ends them
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from engine.core.actions import PlannedAction, plan_actions
from engine.core.decide import ClosedIncident
from engine.core.policy import Decision, fingerprint, granted
from engine.facts import Fact
from engine.rulebook.compile import CompiledRulebook
from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = ["Outage", "SharedOutages", "common_path", "end_key"]

#: members named in the shared incident's guards (more are counted)
MEMBERS_NAMED = 32


def end_key(incident: int) -> str:
    """The store's meta key by which ``recover outage end N`` asks the leader to end outage N."""
    return f"outage_end:{int(incident)}"


def common_path(paths: Iterable[str]) -> str | None:
    """The deepest folder that every path is in (``/lustre/a/x``, ``/lustre/a/y`` -> ``/lustre/a``);
    None when fewer than two paths or only ``/`` is common. A label: never acted on."""
    parts = [p.split("/") for p in {posixpath.normpath(p) for p in paths if p.startswith("/")}]
    if len(parts) < 2:
        return None
    folders = [p[:-1] for p in parts]  # a file's folder: two files of one folder share it
    common: list[str] = []
    for level in zip(*folders):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return "/".join(common) if len(common) > 1 else None


@dataclass
class _Failure:
    job: str
    attempt: int
    incident: int
    fault_class: str
    at: float
    fault: Fact
    nodes: tuple[str, ...] = ()
    path: str | None = None
    source: str = ""  # the file its log lines came from


@dataclass
class Outage:
    incident: int
    fault_class: str
    opened_at: float
    last_at: float
    members: dict[tuple[str, int], _Failure] = field(default_factory=dict)
    page: tuple[PlannedAction, ...] = ()

    def jobs(self) -> set[str]:
        return {j for j, _ in self.members}


class SharedOutages:
    def __init__(
        self,
        compiled: CompiledRulebook,
        store: Store,
        *,
        scheduler: str,
        mode: str,
        closed: list[ClosedIncident] | None = None,
        on_close: Callable[[ClosedIncident], None] | None = None,
    ):
        """``closed`` and ``on_close``: the engine's list of closed incidents and its callback,
        which get the shared incident when it closes, as they get the jobs' incidents."""
        self.closed = closed if closed is not None else []
        self.on_close = on_close
        self.compiled = compiled
        self.policy = compiled.policy.shared_outage
        self.store = store
        self.scheduler = scheduler
        self.mode = mode
        self.users: dict[str, str] = {}  # job -> user, as the scheduler said
        self.recent: dict[tuple[str, int], _Failure] = {}  # failures of the eligible classes, not in one
        self.active: dict[str, Outage] = {}  # fault class -> its outage
        self._asked_at = float("-inf")  # when the store was last asked for operators' ends

    # -- input ---------------------------------------------------------------------------------
    def user(self, job: str, user: object) -> None:
        if isinstance(user, str) and user:
            self.users[job] = user[:64]

    def failed(
        self,
        incident: int,
        job: str,
        attempt: int,
        fault: Fact,
        nodes: Iterable[str] = (),
        evidence: Sequence[Fact] = (),
    ) -> None:
        """A job attempt's incident got a fault (``fault``, its strongest so far); ``nodes``: the
        attempt's allocation, as the scheduler said; ``evidence``: the incident's facts."""
        fault_class = str(fault.get("fault_class"))
        key = (job, attempt)
        if fault_class not in self.policy.classes:
            self.recent.pop(key, None)  # a stronger fault of another class explains it after all
            return
        logs = [e for e in evidence if e.kind == "log"]
        path = next((str(p) for e in logs if isinstance(p := e.get("path"), str)), None)
        source = min((e.origin.rsplit(":", 1)[0] for e in logs), default=f"job {job}")
        f = _Failure(job, attempt, incident, fault_class, fault.at, fault, tuple(sorted(nodes)), path, source)
        outage = self.active.get(fault_class)
        if outage is not None:
            if (job, attempt) not in outage.members:
                self._join(outage, f)
                self.store.set_reason(outage.incident, self._reason(outage))
            return
        self.recent[key] = f
        since = fault.at - self.policy.window
        for k, old in list(self.recent.items()):
            if old.at < since:
                del self.recent[k]
        alike = [r for r in self.recent.values() if r.fault_class == fault_class and r.at <= fault.at]
        jobs = {r.job for r in alike}
        # a log that prints other jobs' ids (a replay takes a job from its log's own lines) is
        # still one log: it counts once, however many jobs it names
        if min(len(jobs), len({r.source for r in alike})) < self.policy.min_jobs:
            return
        users = {self.users[j] for j in jobs if j in self.users}
        if users and len(users) < self.policy.min_users:
            return  # one user's jobs failing together: likely their own data or code
        self._open(fault_class, alike, users)

    def holding(self, job: str, attempt: int, fault_class: str) -> int | None:
        """The shared outage incident that holds this job attempt's requeue, if any."""
        outage = self.active.get(fault_class)
        if outage is None or (job, attempt) not in outage.members:
            return None
        return outage.incident

    # -- the shared incident ---------------------------------------------------------------------
    def _open(self, fault_class: str, alike: list[_Failure], users: set[str]) -> None:
        first = min(f.at for f in alike)
        last = max(f.at for f in alike)
        incident = self.store.open_incident(f"outage:{fault_class}:{int(first)}", None, None, None, first)
        outage = self.active[fault_class] = Outage(incident, fault_class, first, last)
        for f in sorted(alike, key=lambda f: f.at):
            self.recent.pop((f.job, f.attempt), None)
            self._join(outage, f)
        self.store.set_provisional(incident, fault_class, (), alike[0].fault.id)
        reason = self._reason(outage, users)
        self.store.set_reason(incident, reason)
        self.store.add_guards(incident, [{"guard": "shared_outage", "why": f"opened at {len(alike)} jobs: {reason}"}])
        outage.page = self._page(outage, reason)
        logger.warning("incident %s: %s", incident, reason)

    def _join(self, outage: Outage, f: _Failure) -> None:
        key = (f.job, f.attempt)
        if key in outage.members:
            return
        outage.members[key] = f
        outage.last_at = max(outage.last_at, f.at)
        self.store.add_fact(outage.incident, f.fault)
        self.store.touch_incident(outage.incident, f.at)

    def _resource(self, outage: Outage) -> str:
        members = outage.members.values()
        if outage.fault_class == "storage_io_error":
            path = common_path(f.path for f in members if f.path)
            named = sum(1 for f in members if f.path)
            return f"path {path} (named by {named} of them)" if path else "no common path named"
        counts: dict[str, int] = {}
        for f in members:
            for n in f.nodes:
                counts[n] = counts.get(n, 0) + 1
        shared = sorted(n for n, c in counts.items() if c >= 2)
        if not shared:
            return "no node shared by two of them"
        more = f" and {len(shared) - 16} more" if len(shared) > 16 else ""
        return f"nodes shared by two or more of them: {','.join(shared[:16])}{more}"

    def _reason(self, outage: Outage, users: set[str] | None = None) -> str:
        jobs = outage.jobs()
        users = users if users is not None else {self.users[j] for j in jobs if j in self.users}
        who = f" of {len(users)} users" if users else " (the scheduler named no user)"
        return (
            f"shared outage: {len(jobs)} jobs{who} failed with {outage.fault_class} within "
            f"{int(self.policy.window)} s; {self._resource(outage)}; their requeues are held until it ends"
        )

    def _mode(self, decision: str, fault_class: str) -> str:
        autonomy, _ = granted(self.compiled, decision, fault_class)
        if self.mode != "act":
            return "observe" if autonomy == "observe" else "recommend"
        return autonomy

    def _page(self, outage: Outage, reason: str) -> tuple[PlannedAction, ...]:
        """The one page: the page actions of the stop plan (the shipped notify), else the first."""
        pages = [n for n, a in self.compiled.actions.items() if a.kind == "page"]
        names = [n for n in self.compiled.policy.plans.get("stop", ()) if n in pages] or pages[:1]
        mode = self._mode("observe", outage.fault_class)
        if not names or mode == "observe":
            return ()
        plan, problems = plan_actions(
            self.compiled, "observe", outage.incident, None, None, (), outage.fault_class, self.scheduler,
            names=names, reason=reason,
            outcome=f"one page for {len(outage.jobs())} jobs; their requeues held until the outage ends",
        )  # fmt: skip
        if problems:
            self.store.add_guards(outage.incident, [{"guard": "plan", "why": p} for p in problems])
        for p in plan:
            self.store.add_action(
                outage.incident, p.idem_key, p.name, p.target, p.argv, mode,
                "planned" if mode == "act" else "recommended", note="one page for the shared outage",
            )  # fmt: skip
        return tuple(plan)

    # -- the end ---------------------------------------------------------------------------------
    def request_end(self, incident: int, why: str) -> None:
        """An operator ends an outage (``recover outage end``): the leader ends it at its next step."""
        self.store.set_meta(end_key(incident), why[:200] or "ended by an operator")

    def advance(self, now: float) -> None:
        """End the outages whose class was quiet for ``quiet``, that lasted ``hold_limit``, or
        that an operator ended; release what they held."""
        if not self.active:
            return
        ask = now - self._asked_at >= 1.0  # the store once a second, not at every fact
        if ask:
            self._asked_at = now
        for fault_class, outage in list(self.active.items()):
            asked = self.store.meta(end_key(outage.incident)) if ask else None
            if asked is not None:
                why = f"ended by an operator ({asked})"
            elif now - outage.last_at >= self.policy.quiet:
                why = f"no new {fault_class} failure for {int(now - outage.last_at)} s (policy.shared_outage.quiet)"
            elif now - outage.opened_at >= self.policy.hold_limit:
                why = f"it held requeues for {int(now - outage.opened_at)} s (policy.shared_outage.hold_limit)"
            else:
                continue
            self._end(outage, max(now, outage.last_at), why)
            del self.active[fault_class]

    def finish(self, at: float) -> None:
        """End of input (replay): every outage still open is closed; what it held stays held."""
        for fault_class, outage in list(self.active.items()):
            self._close(outage, max(at, outage.last_at), "still open at the end of the input: its requeues stay held")
            del self.active[fault_class]

    def _end(self, outage: Outage, at: float, why: str) -> None:
        released = self.store.release_held(
            outage.incident, f"released: shared outage incident {outage.incident} ended ({why})"
        )
        self._close(outage, at, f"ended: {why}; {released} held action(s) released")
        logger.warning(
            "incident %s: shared outage ended: %s; %s held action(s) released", outage.incident, why, released
        )

    def _close(self, outage: Outage, at: float, why: str) -> None:
        members = sorted(outage.members.values(), key=lambda f: (f.at, f.job))
        named = ", ".join(
            (
                f"incident {f.incident} (job {f.job} attempt {f.attempt}"
                if f.incident
                else f"(job {f.job} attempt {f.attempt}"
            )
            + (f", user {self.users[f.job]}" if f.job in self.users else "")
            + ")"
            for f in members[:MEMBERS_NAMED]
        )
        more = f" and {len(members) - MEMBERS_NAMED} more" if len(members) > MEMBERS_NAMED else ""
        guards = [
            {"guard": "shared_outage", "why": f"members: {named}{more}"},
            {"guard": "shared_outage", "why": why},
        ]
        reason = self._reason(outage)
        with self.store.transaction():
            self.store.add_guards(outage.incident, guards)
            inc = self.store.incident(outage.incident)
            guards = list(inc.guards) if inc is not None else guards
            mode = self._mode("observe", outage.fault_class)
            self.store.close_incident(
                outage.incident,
                at,
                outage.fault_class,
                "observe",
                (),
                members[0].fault.id if members else None,
                reason,
                guards,
                mode,
                fingerprint(outage.fault_class, (), "shared_outage"),
            )
        decision = Decision(outage.fault_class, "observe", (), reason, tuple(guards), mode, plan=("notify",))
        closed = ClosedIncident(
            outage.incident, f"outage:{outage.fault_class}:{int(outage.opened_at)}", None, None, decision,
            outage.page, (), at,
        )  # fmt: skip
        self.closed.append(closed)
        if self.on_close is not None:
            try:
                self.on_close(closed)
            except Exception:
                logger.exception("incident %s: close callback failed", outage.incident)

    def resume(self, incident: int, key: str, opened_at: float, last_at: float) -> None:
        """After a restart: an outage the store still has open goes on (its held actions are
        in the store, held_by it)."""
        fault_class = key.split(":")[1] if key.count(":") >= 2 else ""
        if not fault_class:
            return
        outage = self.active[fault_class] = Outage(incident, fault_class, opened_at, last_at)
        for fact, _, _ in self.store.facts(incident):  # its jobs' faults: who is one of it
            job, attempt = fact.get("job"), fact.get("attempt")
            if fact.kind == "fault" and job is not None:
                member = _Failure(str(job), int(attempt or 0), 0, fault_class, fact.at, fact)
                outage.members[(member.job, member.attempt)] = member
