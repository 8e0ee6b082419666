"""The scheduler's word, as facts: which jobs run where, and job and node state changes.

Each poll is compared with the states seen last (kept in the store, so a job that ended while
the controller was down is still noticed, while the history a fresh database finds is not acted
on): a changed node or job becomes a ``node``/``job`` fact, a running job's nodes go into the
cluster context, and the job logs it names are followed.

A node's fault that arrives before any poll showed a job on that node (a GPU failing as its job
starts) opens an incident for the node alone, which waits for the scheduler to say which job
attempt held the node (``engine.core.bind``): the poll asks about those nodes at once (on the
worker's thread, ``PollWorker.ask``; inline, a question bounded by the adapter's timeout) and
hands every answer, and every poll, to the engine (``Engine.holders``), which binds the incident
to the job attempt the scheduler names. Never to one a log names.

When slurmctld does not answer, the rest goes on without it: at startup, input waits for its
first answer only so long (``wait_first_answer``); under ``recover run`` it is polled on a
worker thread (``PollWorker``) that never blocks the loop, and while it is unavailable the
actuator is told so (actions wait) and the health gauge says 0. When it answers again, its
snapshot is compared with the last states as usual: what changed meanwhile becomes facts.

    sched = SchedulerPoll(adapter, "slurm", store, batch, metrics, limiter, cluster, follow_job=...)
    sched.wait_first_answer(stop, try_once)   # startup
    sched.start_worker()                      # recover run
    sched.poll(now, engine)                   # every step, inside the batch
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable, Sequence

from engine.clock import SYSTEM, Clock
from engine.core.incidents import Engine
from engine.core.context import ClusterContext
from engine.facts import JOB_ACTIVE_STATES, Fact
from engine.live.batch import Batch
from engine.live.metrics import LogLimiter, Metrics
from engine.live.worker import Answer, PollWorker, jobs_on
from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = ["SchedulerPoll"]

#: (path, job, attempt, nodes): follow a running job's log, as that job attempt's
FollowJob = Callable[[str, str, int, Sequence[str]], None]


#: every this many answered polls, every running job's logs are handed to the follower again
REHAND_POLLS = 12


class SchedulerPoll:
    """Polls one adapter; owns the last states seen and the worker thread."""

    def __init__(
        self,
        adapter: Any,
        name: str,
        store: Store,
        batch: Batch,
        metrics: Metrics,
        limiter: LogLimiter,
        cluster: ClusterContext,
        *,
        follow_job: FollowJob,
        interval: float = 5.0,
        startup_wait: float = 30.0,
        on_available: Callable[[bool], None] | None = None,
        clock: Clock = SYSTEM,
    ):
        self.adapter = adapter
        self.name = name  # the facts' origin: "<name>:jobs", "<name>:nodes"
        self.store = store
        self.batch = batch
        self.metrics = metrics
        self.limiter = limiter
        self.cluster = cluster
        self.follow_job = follow_job
        self.interval = interval
        self.startup_wait = startup_wait
        self.on_available = on_available
        self.clock = clock
        self.worker: Any = None  # a PollWorker once start_worker(); until then poll() asks inline
        self._last = 0.0  # engine time of the last inline poll
        self.ok = False  # whether the last inline poll was answered
        self.job_states: dict[str, tuple] = {}
        self.node_states: dict[str, tuple] = {}
        #: job -> (attempt, nodes, logs) last handed to follow_job: handed again only when that
        #: changes (10,000 running jobs: ~0.2 s a poll to hand them all), and all of them every
        #: REHAND_POLLS polls (a log the follower forgot while gone is followed again if it is back)
        self._handed: dict[str, tuple] = {}
        self._polls = 0
        self.states_known = False
        self.restore()

    # -- state kept in the store -----------------------------------------------------------------
    def restore(self) -> None:
        """The job states last committed (at start, and after a store outage); node states are
        learnt again from the next poll."""
        raw = self.store.meta("job_states")
        saved = json.loads(raw) if raw is not None else None
        self.node_states.clear()
        self._handed.clear()
        if not isinstance(saved, dict):
            self.job_states, self.states_known = {}, False
            return
        out = {}
        for k, v in saved.items():
            try:
                out[str(k)] = (v[0], int(v[1]), tuple(v[2]), v[3])
            except (TypeError, ValueError, IndexError):
                continue
        self.job_states, self.states_known = out, True

    def fresh(self) -> None:
        """Compare next with an answer asked from now on, none taken before (at takeover: the
        follower took the answers until now, and one older than the old leader's last poll would
        show its changes undone)."""
        self._last = float("-inf")
        if self.worker is not None:
            self.worker.poll_now()

    def _save(self) -> None:
        value = {k: [v[0], v[1], list(v[2]), v[3]] for k, v in self.job_states.items()}
        self.store.set_meta("job_states", json.dumps(value))

    # -- when to poll --------------------------------------------------------------------------
    def wait_first_answer(self, stop: threading.Event, try_once: Callable[[], bool]) -> None:
        """At startup: ``try_once`` (a poll, committed) until the scheduler answers, a stop is
        asked, or ``startup_wait`` has passed (then input is read without its state)."""
        deadline = self.clock.monotonic() + max(0.0, self.startup_wait)
        while not stop.is_set():
            self._last = float("-inf")
            if try_once():
                return
            if self.clock.monotonic() >= deadline:
                logger.error(
                    "scheduler did not answer within %.0f s of startup: reading input without its state "
                    "(facts of nodes have no job until it answers)",
                    self.startup_wait,
                )
                return
            self.clock.wait(stop, 1.0)

    def start_worker(self) -> None:
        """Poll on a thread of its own from now on: a scheduler that hangs never blocks the loop."""
        self.worker = PollWorker(self.adapter, self.interval, timeout=max(10.0, 2 * self.interval), clock=self.clock)
        self.worker.start()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    def _take(self, now: float) -> tuple[list, list, float] | None:
        """The jobs and nodes to compare, and when they were asked for; or None (nothing new,
        not due, or no answer)."""
        health = self.metrics.source_health.labels(source="scheduler")
        if self.worker is not None:  # `recover run`: polled on its own thread, never blocking the loop
            snap = self.worker.take()
            health.set(1 if self.worker.available else 0)
            if self.on_available is not None:
                self.on_available(self.worker.available)  # actions wait while it does not answer
            if snap is None:
                return None
            self.ok = True
            return snap.jobs, snap.nodes, snap.started if snap.started is not None else snap.at
        if now - self._last < self.interval:
            return None
        self._last = now
        self.ok = False
        started = self.clock.wall()  # what the answer says holds from then on (see engine.core.bind)
        try:
            jobs = self.adapter.jobs()
            nodes = self.adapter.nodes()
        except Exception as exc:  # the scheduler's trouble: say so (rate-limited), try again next time
            health.set(0)
            if self.limiter.ok("scheduler"):
                logger.warning("scheduler poll failed: %s", exc)
            return None
        health.set(1)
        self.ok = True
        return jobs, nodes, started

    # -- which job held a node whose fault came first ----------------------------------------------
    def _ask(self, now: float, engine: Engine) -> None:
        """Ask which job attempts hold the nodes whose incident waits to know (see the module)."""
        nodes = engine.to_ask()
        if not nodes:
            return
        if self.worker is not None:
            self.worker.ask(nodes)  # answered on its thread: the loop never waits for it
            return
        started = self.clock.wall()
        try:  # inline (startup, tests): bounded by the adapter's own timeout
            jobs = jobs_on(self.adapter, nodes)
        except Exception as exc:
            if self.limiter.ok("scheduler-ask"):
                logger.warning("which jobs hold %s: the scheduler did not say (%s)", ",".join(sorted(nodes)), exc)
            return
        self._answered(Answer(frozenset(nodes), jobs, started), now, engine)

    def _answered(self, answer: Any, now: float, engine: Engine) -> None:
        """An answer about some nodes: who holds them goes into the cluster context, and the
        incidents that wait for it are bound (inside the batch)."""
        self.batch.begin()
        self.cluster.view.saw_jobs(answer.jobs, now)
        for j in answer.jobs:
            self.cluster.assign(j.job_id, j.attempt, j.nodes, now)
        engine.holders(answer.jobs, answer.nodes, answer.started)

    # -- what changed ----------------------------------------------------------------------------
    def poll(self, now: float, engine: Engine) -> None:
        """Ask (or take the worker's answer) and ingest what changed, inside the batch."""
        self._ask(now, engine)
        if self.worker is not None:
            for answer in self.worker.answers():
                self._answered(answer, now, engine)
        got = self._take(now)
        if got is None:
            return
        jobs, nodes, asked_at = got
        self.batch.begin()
        # partitions and comments first: what an incident decided in this poll may act on is scoped
        self.cluster.view.saw_nodes(nodes)
        self.cluster.view.saw_jobs(jobs, now)
        states_changed = False
        self._polls += 1
        if self._polls % REHAND_POLLS == 0:
            self._handed.clear()
        # nodes first: a node that died is seen while its job is still assigned to it
        first_poll = not self.node_states
        for n in nodes:
            node_state = (n.state, n.flags, n.reason)
            if self.node_states.get(n.name) != node_state:
                self.node_states[n.name] = node_state
                if first_poll:  # how nodes were when we started is state to know, not an event to act on
                    engine.node_states[n.name] = {"state": n.state, "drained": n.drained, "down": n.down}
                    continue
                attrs = {
                    "node": n.name,
                    "state": n.state,
                    "flags": list(n.flags),
                    "reason": n.reason or "",
                    "drained": n.drained,
                    "down": n.down,
                }
                engine.ingest(Fact.make("node", attrs, now, f"{self.name}:nodes"))
        for j in jobs:
            state = (j.state, j.attempt, tuple(j.nodes), j.reason or "")
            if j.state == "RUNNING":
                self.cluster.assign(j.job_id, j.attempt, j.nodes, now)
                handed = (j.attempt, tuple(j.nodes), j.stdout, j.stderr)
                if self._handed.get(j.job_id) != handed:
                    self._handed[j.job_id] = handed
                    for path in {j.stdout, j.stderr} - {None, ""}:
                        self.follow_job(path, j.job_id, j.attempt, j.nodes)
            if self.job_states.get(j.job_id) != state:
                first_time = j.job_id not in self.job_states
                self.job_states[j.job_id] = state
                states_changed = True
                if first_time and not self.states_known and j.state not in JOB_ACTIVE_STATES | {"PENDING"}:
                    continue  # it ended before this controller ever watched: history, not an event
                attrs = {
                    "job": j.job_id,
                    "attempt": j.attempt,
                    "state": j.state,
                    "reason": j.reason or "",
                    "nodes": list(j.nodes),
                }
                if j.exit_code is not None:
                    attrs["exit_code"] = j.exit_code
                if j.user:  # who runs it (a shared outage counts users)
                    attrs["user"] = j.user
                if j.tasks_per_node:  # its task layout (the rank map)
                    attrs["tasks_per_node"] = j.tasks_per_node
                engine.ingest(Fact.make("job", attrs, now, f"{self.name}:jobs"))
        self.states_known = True
        if states_changed:
            self._save()
        engine.holders(jobs, {n.name for n in nodes}, asked_at)
