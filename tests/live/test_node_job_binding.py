"""A GPU that fails as its job starts (issue 18, item 3): the Xid arrives before any scheduler
poll has shown the job on its node, so its incident opens for the node alone. The scheduler is
asked which job attempt held the node, and the incident is bound to the attempt it names: the
job is requeued excluding the node, as when the job was known at once. Only the scheduler's
answer binds, never a log line.

In process, on schedulers that answer what the test says (the real-Slurm version is
tests/e2e/test_slurm_e2e.py::test_a_gpu_that_fails_as_its_job_starts_requeues_that_job).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.facts import Fact
from engine.live.actuator import Actuator
from engine.live.controller import Controller, ControllerConfig
from engine.ops import explain
from engine.rulebook import load_rulebook
from scheduler_adapters.base import CommandResult, JobInfo, NodeInfo
from scheduler_adapters.simulated import SimulatedCluster
from tests.helpers import wait_for

SITE = "policy:\n  settle: 1s\n  blast_radius: {max_drains: 50, max_fraction: 1.0, window: 1h}\n"
NODES = ("n1", "n2", "n3", "n4")


class Scheduler:
    """Jobs as the test sets them; ``polls`` counts whole-cluster polls, ``asked`` the nodes asked
    about; while ``down`` nothing answers."""

    name = "fake"
    template_scheduler = "slurm"

    def __init__(self) -> None:
        self.job_list: list[JobInfo] = []
        self.polls = 0
        self.asked: list[list[str]] = []
        self.down = False

    def jobs(self):
        if self.down:
            raise RuntimeError("Unable to contact slurm controller (connect failure)")
        self.polls += 1
        return list(self.job_list)

    def job(self, job_id):
        return next((j for j in self.job_list if j.job_id == job_id), None)

    def jobs_on(self, nodes):
        if self.down:
            raise RuntimeError("Unable to contact slurm controller (connect failure)")
        self.asked.append(list(nodes))
        return [j for j in self.job_list if set(j.nodes) & set(nodes)]

    def nodes(self):
        if self.down:
            raise RuntimeError("Unable to contact slurm controller (connect failure)")
        return [NodeInfo(n, "allocated") for n in NODES]

    def run(self, argv, timeout=30.0):
        return CommandResult(0)


def make(tmp: Path, adapter, **kw) -> Controller:
    res = load_rulebook(defaults=True, overlays=[("site.yaml", SITE)])
    assert res.ok, res.errors
    spool = tmp / "spool"
    spool.mkdir(exist_ok=True)
    cfg = ControllerConfig(
        db=str(tmp / "recover.db"),
        spool=str(spool),
        scheduler="fake",
        adapter=adapter,
        dry_run=kw.pop("dry_run", True),
        scheduler_interval=kw.pop("scheduler_interval", 600.0),  # no poll comes by itself
        scheduler_startup_wait=5.0,
        **kw,
    )
    return Controller(cfg, res.compiled)


@pytest.fixture
def started(tmp_path):
    made: list[Controller] = []

    def start(adapter, **kw) -> Controller:
        ctl = make(tmp_path, adapter, **kw)
        ctl.startup()
        made.append(ctl)
        return ctl

    yield start
    for ctl in made:
        ctl.stop_event.set()
        if ctl.sched is not None:
            ctl.sched.stop()
        ctl.follower.stop()
        ctl.store.close()


def xid(ctl: Controller, node: str, code: int = 79) -> None:
    """A fatal Xid from the node's agent, as it writes it to the spool."""
    fact = Fact.make("xid", {"node": node, "code": code, "pci": "0000:3b:00"}, time.time(), f"kmsg:{node}")
    with open(Path(ctl.cfg.spool or "") / f"{node}.jsonl", "a") as fh:
        fh.write(fact.to_json() + "\n")


def steps(ctl: Controller, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctl.step()
        time.sleep(0.05)
    ctl.step()


def planned(ctl: Controller) -> set[tuple[str, str]]:
    return {(a["action"], a["target"]) for a in ctl.store.actions()}


def running(job: str, nodes: tuple[str, ...], attempt: int = 0) -> JobInfo:
    return JobInfo(job, attempt, "RUNNING", nodes=nodes)


# -- the scheduler's answer comes before the incident closes -----------------------------------------
@pytest.mark.parametrize("polling", ["inline", "worker"])
def test_an_xid_before_the_poll_that_shows_its_job_is_bound_to_that_job(started, polling):
    sched = Scheduler()
    ctl = started(sched)
    if polling == "worker":  # as under `recover run`: its first poll, then 10 minutes without one
        ctl.sched.start_worker()
        wait_for("the worker's first poll", lambda: ctl.sched.worker.take() is not None, 10)
    polls = sched.polls
    sched.job_list = [running("301", ("n1", "n2"))]  # the job starts; no poll has seen it
    xid(ctl, "n2")
    steps(ctl, 1.5)  # past the settle window
    [inc] = ctl.store.incidents()
    assert (inc.status, inc.job, inc.attempt, inc.fault_class, inc.decision) == (
        "closed",
        "301",
        0,
        "gpu_fell_off_bus",
        "isolate_and_restart",
    )
    assert {("drain", "n2"), ("requeue", "301"), ("exclude", "301")} <= planned(ctl), planned(ctl)
    exclude = next(a for a in ctl.store.actions() if a["action"] == "exclude")
    assert "ExcNodeList=n2" in exclude["argv"]
    assert any(g["guard"] == "bound" and "job 301 attempt 0 held n2" in g["why"] for g in inc.guards), inc.guards
    assert sched.polls == polls and sched.asked == [["n2"]]  # no poll came: the question did, once
    why = explain.render_text(explain.build(ctl.store, inc.id))  # `recover explain` says how it was bound
    assert "guard:    bound: the fault on n2 came before a scheduler poll showed its job" in why, why


def test_later_evidence_of_the_job_joins_the_bound_incident(started):
    sched = Scheduler()
    ctl = started(sched)
    sched.job_list = [running("301", ("n1", "n2"))]
    xid(ctl, "n2")
    ctl.step()
    xid(ctl, "n2", code=48)  # a second Xid on n2: the node's job is known now
    steps(ctl, 1.5)
    [inc] = ctl.store.incidents()
    assert (inc.key, inc.job) == ("job:301:0", "301")


# -- the scheduler's answer comes after the incident closed ------------------------------------------
def test_an_answer_after_the_close_plans_the_jobs_requeue(started):
    sched = Scheduler()
    ctl = started(sched, scheduler_interval=0.0)  # polled every step, once it answers
    sched.job_list = [running("301", ("n1", "n2"))]
    sched.down = True
    xid(ctl, "n2")
    steps(ctl, 1.5)
    [inc] = ctl.store.incidents()
    assert (inc.status, inc.job) == ("closed", None)
    assert planned(ctl) == {("drain", "n2"), ("notify", "-")}
    sched.down = False  # slurmctld answers again: its first poll shows 301 on n2
    ctl.step()
    inc = ctl.store.incident(inc.id)
    assert (inc.job, inc.attempt, inc.key) == ("301", 0, "job:301:0")
    assert {("requeue", "301"), ("exclude", "301")} <= planned(ctl), planned(ctl)
    assert {a["status"] for a in ctl.store.actions()} == {"recommended"}
    assert [g["guard"] for g in inc.guards].count("bound") == 1


# -- no job held the node ------------------------------------------------------------------------------
def test_a_node_that_ran_no_job_stays_the_nodes_incident(started, tmp_path):
    sched = Scheduler()
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "slurm-302.out").write_text("")
    sched.job_list = [JobInfo("302", 0, "RUNNING", nodes=("n3",), stdout=str(logs / "slurm-302.out"))]
    ctl = started(sched, follow=[str(logs / "*.out")])
    # job 302's log claims n2, and a job that starts on n2 after the scheduler's answer is not it
    with open(logs / "slurm-302.out", "a") as fh:
        fh.write("SLURM_JOB_ID=302 SLURM_JOB_NODELIST=n2\nSLURMD_NODENAME=n2\n")
    ctl.step()
    xid(ctl, "n2")
    ctl.step()
    assert ["n2"] in sched.asked and not ctl.engine.waits
    sched.job_list.append(running("303", ("n2",)))
    sched.polls, ctl.sched.interval = 0, 0.0
    steps(ctl, 1.5)
    assert sched.polls > 0
    [inc] = ctl.store.incidents()
    assert (inc.job, inc.key) == (None, "node:n2")
    assert planned(ctl) == {("drain", "n2"), ("notify", "-")}


def test_a_poll_asked_before_the_fault_does_not_end_the_wait():
    """A poll begun before the Xid cannot tell that the node was free when the GPU failed."""
    from engine.core.bind import NodeWaits

    waits = NodeWaits()
    waits.add(7, "n2", since=100.0)
    assert waits.to_ask() == {"n2"} and waits.to_ask() == set()
    assert waits.answer([], covers={"n2"}, asked_at=99.0) == [] and 7 in waits
    assert waits.answer([running("5", ("n1",))], covers={"n1", "n2"}, asked_at=101.0) == []
    assert 7 not in waits  # asked after the fault: no job held n2

    waits.add(8, "n2", since=100.0)
    pending = JobInfo("9", 0, "PENDING", nodes=("n2",))
    shared = [running("12", ("n2",)), running("301", ("n2", "n3"), attempt=2), pending, running("x;rm", ("n2",))]
    [(wait, holders)] = waits.answer(shared, covers={"n2"}, asked_at=99.0)
    assert wait.incident == 8 and [(j.job_id, j.attempt) for j in holders] == [("12", 0), ("301", 2)]


# -- acting: the job is requeued excluding the node -----------------------------------------------------
def test_acting_requeues_the_job_away_from_the_node(started):
    sim = SimulatedCluster(list(NODES))

    def actuator(ctl):
        return Actuator(ctl.store, ctl.adapter, ctl.compiled, ctl.metrics, verify_timeout=0.0, retry_delay=0.0)

    ctl = started(sim, dry_run=False, actuator_factory=actuator)
    ctl.sched.start_worker()
    wait_for("the worker's first poll", lambda: ctl.sched.worker.take() is not None, 10)
    job = sim.submit("train", nodes=2)  # starts at once, on n1 and n2; no poll sees it
    bad = sim.job(job).nodes[-1]
    xid(ctl, bad)

    def requeued_away():
        ctl.step()
        j = sim.job(job)
        return j.attempt == 1 and bad in j.excluded_nodes and j

    j = wait_for("the job requeued excluding the node", requeued_away, 10, every=0.05)
    assert j.state == "PENDING" and sim.nodes()[NODES.index(bad)].drained
    assert [h[:2] for h in sim.history] == [["scontrol", "update"], ["scontrol", "requeue"], ["scontrol", "update"]]

    def verified():
        ctl.step()
        acts = {(a["action"], a["status"]) for a in ctl.store.actions()}
        assert {("drain", "verified"), ("requeue", "verified"), ("exclude", "verified")} <= acts, acts
        return True

    wait_for("the three actions verified", verified, 10, every=0.05)
    excl = next(a for a in ctl.store.actions() if a["action"] == "exclude")
    assert excl["argv"][-1] == f"ExcNodeList={bad}"


class FlakySim(SimulatedCluster):
    """The simulated cluster, whose slurmctld does not answer while ``down``."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise RuntimeError("Unable to contact slurm controller (connect failure)")

    def jobs(self):
        self._check()
        return super().jobs()

    def jobs_on(self, nodes):
        self._check()
        return super().jobs_on(nodes)

    def nodes(self):
        self._check()
        return super().nodes()


def test_acting_when_the_answer_comes_after_the_close(started):
    sim = FlakySim(list(NODES))

    def actuator(ctl):
        return Actuator(ctl.store, ctl.adapter, ctl.compiled, ctl.metrics, verify_timeout=0.0, retry_delay=0.0)

    ctl = started(sim, dry_run=False, actuator_factory=actuator, scheduler_interval=0.2)
    ctl.sched.start_worker()
    sim.down = True
    wait_for("the scheduler seen down", lambda: not ctl.sched.worker.available, 10)
    job = sim.submit("train", nodes=2)
    bad = sim.job(job).nodes[-1]
    xid(ctl, bad)
    steps(ctl, 1.5)
    [inc] = ctl.store.incidents()
    assert (inc.status, inc.job) == ("closed", None) and sim.job(job).attempt == 0
    sim.down = False

    def requeued_away():
        ctl.step()
        j = sim.job(job)
        assert j.attempt == 1 and bad in j.excluded_nodes, (j, ctl.store.actions())
        return j

    wait_for("the job requeued excluding the node", requeued_away, 10, every=0.05)
    inc = ctl.store.incident(inc.id)
    assert (inc.job, inc.attempt) == (job, 0)
    assert [h[1] for h in sim.history if h[0] == "scontrol"] == ["update", "requeue", "update"]


# -- the worker: a question answered on its thread, between polls ------------------------------------------
def test_the_worker_answers_a_question_at_once_between_its_polls():
    from engine.live.worker import PollWorker

    sched = Scheduler()
    worker = PollWorker(sched, interval=600.0)
    worker.start()
    try:
        wait_for("the first poll", lambda: worker.take() is not None, 10)
        sched.job_list = [running("301", ("n1", "n2")), running("302", ("n3",))]
        t0 = time.time()
        worker.ask({"n2"})
        [answer] = wait_for("the answer", worker.answers, 5)
        assert answer.nodes == {"n2"} and [j.job_id for j in answer.jobs] == ["301"] and answer.started >= t0
        assert worker.answers() == [] and sched.polls == 1  # handed over once; no poll for it
    finally:
        worker.stop()


def test_an_adapter_without_jobs_on_is_answered_from_its_jobs():
    from engine.live.worker import PollWorker

    class Old:
        def jobs(self):
            return [running("301", ("n1", "n2")), JobInfo("9", 0, "COMPLETED", nodes=("n2",))]

    worker = PollWorker(Old())
    worker.ask(["n2"])
    worker.answer_once()
    assert [[j.job_id for j in a.jobs] for a in worker.answers()] == [["301"]]


def test_a_question_the_scheduler_does_not_answer_is_dropped_and_says_nothing_of_its_health():
    from engine.live.worker import PollWorker

    sched = Scheduler()
    sched.down = True
    worker = PollWorker(sched)
    worker.ask(["n2"])
    worker.answer_once()
    assert worker.answers() == [] and worker.available  # the polls say whether it answers
    sched.down = False
    worker.answer_once()  # nothing asked any more
    assert worker.answers() == [] and sched.asked == []
