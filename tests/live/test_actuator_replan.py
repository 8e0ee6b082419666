"""The actuator re-plans against the job's live state immediately before each command (issue 10):
never a second requeue of an attempt already restarted, exclusions merged, required nodes held,
--no-requeue respected, a drain retried while it has not taken, pages that say what happened."""

import pytest

from engine.clock import FakeClock
from engine.live.actuator import Actuator
from engine.facts import Fact
from engine.core.incidents import Engine
from engine.store import Store
from scheduler_adapters.base import CommandResult, SchedulerUnavailable
from scheduler_adapters.simulated import SimulatedCluster

RULES = """
matchers:  # the tests assert their log facts directly; a rule may only name a declared matcher
  - {id: traceback, pattern: 'Traceback \\(most recent call last\\)'}
rules:
  - id: f.xid
    description: fatal xid
    when: [{as: x, kind: xid, where: {code: 79}}]
    then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ x.node }}"], reason: "Xid 79 on {{ x.node }}"}}
actions:
  drain: {per: node, argv: [scontrol, update, "NodeName={{ node }}", State=DRAIN, "Reason={{ reason }}"]}
  requeue: {argv: [scontrol, requeue, "{{ job }}"]}
  exclude: {argv: [scontrol, update, "JobId={{ job }}", "ExcNodeList={{ excluded|join(',') }}"]}
  keep_held: {argv: [scontrol, hold, "{{ job }}"], verify: job_held}
  notify: {argv: [logger, -t, recover, "incident {{ incident }}: {{ fault_class }} -> {{ decision }}: {{ outcome }}. Why: {{ fault_reason }}"]}
policy:
  settle: 10s
  plans: {isolate_and_restart: [drain, requeue, exclude, notify], restart: [requeue], stop: [notify]}
"""


@pytest.fixture
def world(write_rules):
    def make(extra="", **kw):
        result = write_rules(RULES + extra)
        assert result.ok, [str(d) for d in result.diagnostics]
        sim = SimulatedCluster(["n1", "n2", "n3", "n4"])
        store, engine, act = acting(result.compiled, sim, **kw)
        return sim, store, engine, act

    return make


def xid(engine, job, node, at=0.0, attempt=0):
    engine.ingest(Fact.make("xid", {"code": 79, "node": node, "job": job, "attempt": attempt}, at, f"kern:{node}:{at}"))


def acting(compiled, sim, **kw):
    """A store and an actuator on one fake clock (the journal's stamps and the actuator's
    timeouts are compared), and an engine that closes incidents into that store."""
    clock = FakeClock()
    store = Store(":memory:", clock=clock)
    return store, Engine(compiled, store, mode="act"), Actuator(store, sim, compiled, clock=clock, **kw)


#: each step of ``drive`` is this long on the fake clock: the actuator's real verify timeout
#: (20 s) and retry backoff (2 s, doubling) pass in a few steps, as they would in production
STEP_S = 10.0


def drive(act, n=12):
    """``n`` steps of the actuator, ``STEP_S`` apart on its clock."""
    for _ in range(n):
        act.step()
        act.clock.advance(STEP_S)


def by_name(store, name):
    return [a for a in store.actions() if a["action"] == name]


def test_an_attempt_restarted_by_someone_else_is_not_requeued_again(world):
    sim, store, engine, act = world()
    job = sim.submit("train", nodes=2)
    xid(engine, job, "n2")
    sim.run(["scontrol", "requeue", job])  # an admin, or Slurm itself, was faster
    engine.finish()
    drive(act)
    (rq,) = by_name(store, "requeue")
    assert rq["status"] == "skipped" and "already restarted" in rq["note"]
    assert sum(h[:2] == ["scontrol", "requeue"] for h in sim.history) == 1  # only the admin's
    assert sim.job(job).attempt == 1


def test_a_new_attempt_that_landed_on_the_bad_node_is_requeued_once(world):
    sim, store, engine, act = world()
    job = sim.submit("train", nodes=2)  # n1, n2
    xid(engine, job, "n2")
    sim.run(["scontrol", "requeue", job])
    sim.tick()  # Slurm started attempt 1 on n1, n2 again (the drain had not happened yet)
    assert sim.job(job).nodes == ("n1", "n2")
    engine.finish()
    drive(act, 20)
    requeues = by_name(store, "requeue")
    assert [r["status"] for r in requeues] == ["skipped", "verified"]
    assert requeues[1]["idem_key"].endswith("@1")
    assert sim.job(job).attempt == 2  # exactly one more


def test_a_no_requeue_job_is_refused_and_the_page_says_so(world):
    sim, store, engine, act = world()
    job = sim.submit("train", nodes=1, requeue=False)
    xid(engine, job, "n1")
    engine.finish()
    drive(act)
    (rq,) = by_name(store, "requeue")
    assert rq["status"] == "skipped" and rq["note"].startswith("refused") and "opted out" in rq["note"]
    assert not any(h[:2] == ["scontrol", "requeue"] for h in sim.history)
    assert by_name(store, "drain")[0]["status"] == "verified"
    page = by_name(store, "notify")[0]["argv"][-1]
    assert "opted out of requeue" in page and "drain n1" in page and "Xid 79 on n1" in page


def test_exclusions_are_merged_with_the_users(world):
    sim, store, engine, act = world()
    job = sim.submit("train", nodes=2, excluded=["n4"])
    xid(engine, job, "n1")
    engine.finish()
    drive(act)
    ex = by_name(store, "exclude")[0]
    assert ex["status"] == "verified" and ex["argv"][-1] == "ExcNodeList=n1,n4"
    assert set(sim.job(job).excluded_nodes) == {"n1", "n4"}


def test_a_required_node_is_never_excluded_the_job_is_held_and_a_person_told(world):
    sim, store, engine, act = world()
    job = sim.submit("train", nodes=1, required=["n1"])
    xid(engine, job, "n1")
    engine.finish()
    drive(act, 20)
    assert "n1" not in sim.job(job).excluded_nodes
    assert by_name(store, "keep_held")[0]["status"] == "verified"
    assert sim.job(job).reason == "JobHeldUser"
    inc = store.incident(engine.closed[0].id)
    assert any(g["guard"] == "required_node" and "requires n1" in g["why"] for g in inc.guards)
    assert any("requires n1" in a["argv"][-1] for a in by_name(store, "notify"))


class Flaky(SimulatedCluster):
    """slurmctld away: every command and query fails until `up` is set."""

    up = True

    def run(self, argv, timeout=30.0):
        if not self.up and argv[0] == "scontrol":
            self.history.append(list(argv))
            return CommandResult(1, "", "slurm_update error: Unable to contact slurm controller (connect failure)")
        return super().run(argv, timeout)

    def nodes(self):
        if not self.up:
            raise SchedulerUnavailable("Unable to contact slurm controller")
        return super().nodes()

    def job(self, job_id):
        if not self.up:
            raise SchedulerUnavailable("Unable to contact slurm controller")
        return super().job(job_id)


def test_a_drain_during_an_outage_is_retried_until_it_takes_and_the_incident_says_so(world, monkeypatch):
    _, store, engine, act = world()
    sim = Flaky(["n1", "n2"])
    act.adapter = sim
    job = sim.submit("train", nodes=1)
    xid(engine, job, "n1")
    engine.finish()
    sim.up = False
    act.step()  # preflight cannot read the node: waits, runs nothing
    assert by_name(store, "drain")[0]["status"] == "planned" and sim.history == []
    act.available = False  # the poller says so: actions wait, the page goes out
    drive(act, 5)
    inc = store.incident(engine.closed[0].id)
    assert any(g["guard"] == "drain_pending" for g in inc.guards)
    pages = [a for a in by_name(store, "notify") if "drain-pending" in a["idem_key"]]
    assert len(pages) == 1 and pages[0]["status"] == "verified" and "waits" in pages[0]["argv"][-1]
    assert by_name(store, "requeue")[0]["status"] == "planned"  # nothing went ahead of the drain
    sim.up, act.available = True, True
    drive(act)
    assert [by_name(store, n)[0]["status"] for n in ("drain", "requeue", "exclude")] == ["verified"] * 3


def test_a_failed_drain_is_retried_by_time_not_by_count(world):
    _, store, engine, act = world(drain_retry_for=3600.0)
    sim = Flaky(["n1", "n2"])
    act.adapter = sim
    job = sim.submit("train", nodes=1)
    xid(engine, job, "n1")
    engine.finish()
    real_nodes = SimulatedCluster.nodes
    sim.nodes = lambda: real_nodes(sim)  # sinfo answers, scontrol update does not
    sim.up = False
    drive(act, 10)
    drain = by_name(store, "drain")[0]
    assert drain["status"] == "failed" and drain["attempts"] >= 4  # more than max_attempts, still not given up
    sim.up = True
    drive(act, 10)
    assert by_name(store, "drain")[0]["status"] == "verified"


class Shared(SimulatedCluster):
    """Two jobs on n1, each with its own GPU; `known` says whether `scontrol show job -d` gives the map."""

    def __init__(self, known):
        super().__init__(["n1", "n2"])
        self.known = known
        self.a = self.submit("a", nodes=1)  # runs on n1
        self._jobs[self.a].nodes = ("n1",)
        self.b = self.submit("b", nodes=1)
        j = self._jobs[self.b]
        self._nodes[j.nodes[0]]["state"] = "idle"
        j.nodes = ("n1",)  # the simulation does not share nodes; Slurm with cons_tres does

    def job_detail(self, job_id):
        from dataclasses import replace

        info = self.job(job_id)
        if info is None or not self.known:
            return info
        return replace(info, detailed=True, gpus=(("n1", (0,) if job_id == self.a else (1,)),))


@pytest.mark.parametrize("known", [True, False])
def test_a_shared_node_requeues_only_the_job_holding_the_faulty_gpu(world, known):
    _, store, engine, act = world()
    sim = Shared(known)
    act.adapter = sim
    # the Xid pinned to job b (assigned last), but NVML says GPU 0, which job a holds
    engine.ingest(Fact.make("xid", {"code": 79, "node": "n1", "gpu": 0, "job": sim.b, "attempt": 0}, 0.0, "nvml:n1:0"))
    engine.finish()
    drive(act, 20)
    requeued = [h[2] for h in sim.history if h[:2] == ["scontrol", "requeue"]]
    inc = store.incident(engine.closed[0].id)
    if known:
        assert requeued == [sim.a]
        assert sim.job(sim.b).state == "RUNNING" and sim.job(sim.b).attempt == 0
    else:
        assert requeued == []  # none requeued blindly
        why = [g["why"] for g in inc.guards if g["guard"] == "shared_node"]
        assert why and sim.a in why[0] and sim.b in why[0]
        told = {a["target"] for a in by_name(store, "notify") if "shared" in a["idem_key"]}
        assert told == {sim.a, sim.b}


@pytest.mark.parametrize("template", ["{{ job }}", "JobId={{ job }}", "jobid={{ job }}"])
def test_the_other_jobs_requeue_is_rendered_for_that_job(world, write_rules, template):
    # a site's own requeue template: the requeue of the job that holds the faulty GPU must name
    # that job in its argv, whatever the element around the id looks like
    result = write_rules(RULES.replace('requeue, "{{ job }}"]', f'requeue, "{template}"]'))
    assert result.ok, [str(d) for d in result.diagnostics]
    sim = Shared(known=True)
    store, engine, act = acting(result.compiled, sim)
    engine.ingest(Fact.make("xid", {"code": 79, "node": "n1", "gpu": 0, "job": sim.b, "attempt": 0}, 0.0, "nvml:n1:0"))
    engine.finish()
    drive(act, 20)
    requeues = by_name(store, "requeue")
    ran = [a for a in requeues if a["status"] == "verified"]
    assert [a["target"] for a in ran] == [sim.a]
    assert ran[0]["argv"][-1] == template.replace("{{ job }}", sim.a)
    assert [h for h in sim.history if h[:2] == ["scontrol", "requeue"]] == [ran[0]["argv"]]
    assert sim.job(sim.a).attempt == 1
    assert sim.job(sim.b).state == "RUNNING" and sim.job(sim.b).attempt == 0


STOP_CANCEL = """
  - id: f.app
    description: traceback
    when: [{as: l, kind: log, where: {matcher: traceback}}]
    then: {fault: {fault_class: app_error}}
"""


@pytest.mark.parametrize(
    ("level", "running", "expected"),
    [
        ("act", True, "verified"),  # the other ranks would wait for the NCCL watchdog: freed at once
        ("recommend", True, "recommended"),  # the shipped default: recommended, not run
        ("act", False, "skipped"),  # the job already ended: nothing to cancel
    ],
)
def test_stop_may_cancel_a_job_whose_ranks_still_run(world, write_rules, level, running, expected):
    book = (
        RULES.replace("rules:\n", "rules:\n" + STOP_CANCEL.lstrip("\n"), 1)
        .replace("stop: [notify]", "stop: [cancel, notify]")
        .replace("actions:\n", 'actions:\n  cancel: {argv: [scancel, "{{ job }}"], verify: job_cancelled}\n', 1)
    )
    result = write_rules(book + "  autonomy: {cancel: %s}\n" % level)
    assert result.ok, [str(d) for d in result.diagnostics]
    sim = SimulatedCluster(["n1", "n2"])
    store, engine, act = acting(result.compiled, sim)
    job = sim.submit("train", nodes=2)
    if not running:
        sim.fail(job)
    engine.ingest(Fact.make("log", {"matcher": "traceback", "job": job, "attempt": 0}, 0, "log:1"))
    engine.finish()
    drive(act)
    (cancel,) = by_name(store, "cancel")
    assert cancel["status"] == expected, cancel
    assert (sim.job(job).state == "CANCELLED") == (expected == "verified")
    assert by_name(store, "notify")[0]["status"] == "verified"
