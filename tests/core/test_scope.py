"""Scope (issue 22, item 4): per partition act, recommend or ignore; per job, the comment's
recover:off and recover:max_restarts=N. The partition comes from the scheduler (the simulated
cluster's JobInfo and NodeInfo, as a poll hands them to the engine), never from a log; a node's
actions follow the strictest mode of the partitions it is in; a job never stops the drain of a
node with fatal hardware; an opted-out job's owner is paged with what Recover would have done."""

from __future__ import annotations

import logging

import pytest

from engine.core.incidents import Engine
from engine.core.policy import GuardContext, decide
from engine.core.scope import SchedulerView, scope_of
from engine.facts import Fact
from engine.live.actuator import Actuator
from engine.store import Store
from scheduler_adapters.base import JobInfo
from scheduler_adapters.simulated import SimulatedCluster

RULES = """
matchers:
  - {id: timeout, pattern: 'Watchdog caught collective operation timeout'}
rules:
  - id: f.xid
    description: fatal xid
    when: [{as: x, kind: xid, where: {code: 79}}]
    then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ x.node }}"]}}
  - id: f.timeout
    description: nccl timeout
    when: [{as: l, kind: log, where: {matcher: timeout}}]
    then: {fault: {fault_class: nccl_timeout}}
actions:
  drain: {per: node, argv: [scontrol, update, "NodeName={{ node }}", State=DRAIN, "Reason=incident {{ incident }}"]}
  requeue: {argv: [scontrol, requeue, "{{ job }}"]}
  exclude: {argv: [scontrol, update, "JobId={{ job }}", "ExcNodeList={{ nodes|join(',') }}"]}
  notify: {kind: page, argv: [logger, -t, recover, "incident {{ incident }} job {{ job }}: {{ outcome }}"]}
policy:
  settle: 10s
  isolate: {at_once: [gpu_fell_off_bus]}
  plans: {isolate_and_restart: [drain, requeue, exclude, notify], restart: [requeue, notify], stop: [notify]}
"""
CANARY = "  scope: {default: recommend, partitions: {canary: act, scratch: ignore}}\n"
#: canary: n1, n2; batch: n2, n3, n4 (n2 is in both); scratch: n5
PARTITIONS = {"canary": ("n1", "n2"), "batch": ("n2", "n3", "n4"), "scratch": ("n5",)}


@pytest.fixture
def world(write_rules):
    def make(extra: str = "", mode: str = "act"):
        result = write_rules(RULES + extra)
        assert result.ok, [str(d) for d in result.diagnostics]
        sim = SimulatedCluster(["n1", "n2", "n3", "n4", "n5"], partitions=PARTITIONS)
        store = Store(":memory:")
        engine = Engine(result.compiled, store, mode=mode)
        act = Actuator(store, sim, result.compiled, verify_timeout=0.0, retry_delay=0.0)
        return sim, store, engine, act

    return make


def poll(sim, engine, now=0.0):
    """What live.schedpoll hands the engine on every poll: the scheduler's jobs and nodes."""
    engine.cluster.view.saw_nodes(sim.nodes())
    engine.cluster.view.saw_jobs(sim.jobs(), now)
    for j in sim.jobs():
        attrs = {"job": j.job_id, "attempt": j.attempt, "state": j.state, "nodes": list(j.nodes)}
        engine.ingest(Fact.make("job", attrs, now, "sim:jobs"))


def timeout(engine, job, at):
    attrs = {"matcher": "timeout", "job": job, "attempt": 0}
    engine.ingest(Fact.make("log", attrs, at, f"log:{job}:{at}"))


def xid(engine, node, at):
    engine.ingest(Fact.make("xid", {"code": 79, "node": node}, at, f"kern:{node}:{at}"))


def rows(store, incident=None):
    return [(a["action"], a["target"], a["mode"], a["status"]) for a in store.actions(incident)]


def test_a_canary_partition_acts_while_the_rest_recommends_in_one_run(world):
    sim, store, engine, act = world(CANARY)
    canary = sim.submit("train", nodes=1, partition="canary")
    batch = sim.submit("train", nodes=1, partition="batch")
    assert sim.job(canary).nodes == ("n1",) and sim.job(batch).nodes == ("n2",)
    poll(sim, engine)
    timeout(engine, canary, 1.0)
    timeout(engine, batch, 1.0)
    engine.finish()
    by_job = {c.job: c for c in engine.closed}
    assert rows(store, by_job[canary].id) == [
        ("requeue", canary, "act", "planned"),
        ("notify", canary, "act", "planned"),
    ]
    assert rows(store, by_job[batch].id) == [
        ("requeue", batch, "recommend", "recommended"),
        ("notify", batch, "recommend", "recommended"),
    ]
    guards = store.incident(by_job[batch].id).guards
    assert {"guard": "scope", "why": "partition batch is recommend (policy.scope.default): recommend only"} in guards
    for _ in range(5):
        act.step()
    assert sim.job(canary).attempt == 1 and sim.job(batch).attempt == 0  # only the canary's job was requeued


def test_an_ignored_partition_is_recorded_and_nothing_is_planned(world):
    sim, store, engine, _ = world(CANARY)
    job = sim.submit("train", nodes=1, partition="scratch")
    poll(sim, engine)
    timeout(engine, job, 1.0)
    engine.finish()
    closed = engine.closed[0]
    assert (closed.job, closed.decision.autonomy, rows(store)) == (job, "observe", [])
    assert any(g["guard"] == "scope" and "scratch is ignore" in g["why"] for g in store.incident(closed.id).guards)


def test_a_node_in_two_partitions_gets_the_strictest_mode_for_its_drain(world):
    """n2 is in canary (act) and batch (recommend): a fatal Xid there under a canary job drains it
    only as a recommendation (draining it takes it out of batch too), while the canary job's own
    requeue and exclusion act."""
    sim, store, engine, _ = world(CANARY)
    job = sim.submit("train", nodes=2, partition="canary")
    assert sim.job(job).nodes == ("n1", "n2")
    poll(sim, engine)
    xid(engine, "n2", 1.0)
    engine.finish()
    assert rows(store) == [
        ("drain", "n2", "recommend", "recommended"),
        ("requeue", job, "act", "planned"),
        ("exclude", job, "act", "planned"),
        ("notify", job, "act", "planned"),
    ]
    drain = store.actions()[0]
    assert "it is in partitions batch (recommend), canary (act): the strictest, recommend" in drain["note"]


def test_recover_off_keeps_the_drain_and_pages_what_would_have_been_done(world):
    sim, store, engine, act = world()  # the shipped scope: act everywhere
    job = sim.submit("train", nodes=2, partition="batch", comment="exp-7 recover:off")
    poll(sim, engine)
    xid(engine, "n2", 1.0)
    # at once: the drain is the site's and acts; the job's own actions are only recommended
    assert rows(store) == [
        ("drain", "n2", "act", "planned"),
        ("requeue", job, "recommend", "recommended"),
        ("exclude", job, "recommend", "recommended"),
    ]
    engine.finish()
    for _ in range(6):
        act.step()
    assert rows(store) == [
        ("drain", "n2", "act", "verified"),
        ("requeue", job, "recommend", "recommended"),
        ("exclude", job, "recommend", "recommended"),
        ("notify", job, "act", "verified"),
    ]
    assert {n.name: n for n in sim.nodes()}["n2"].drained
    j = sim.job(job)
    assert j.attempt == 0 and not j.excluded_nodes  # not requeued, not excluded
    page = " ".join(store.actions()[-1]["argv"])
    assert (
        f"scope: job {job} opted out (its comment says recover:off): recommended, not run: requeue {job}, exclude {job}"
        in page
    )
    assert "done: drain n2" in page


def test_a_comment_turning_off_after_the_plan_is_honoured_before_the_command(world):
    """The preflight reads the job's comment and partition as the scheduler has them now."""
    sim, store, engine, act = world()
    job = sim.submit("train", nodes=2, partition="batch")
    poll(sim, engine)
    xid(engine, "n2", 1.0)
    sim._jobs[job].comment = "recover:off"  # the owner ran scontrol update Comment=recover:off
    engine.finish()
    for _ in range(6):
        act.step()
    status = {a["action"]: (a["status"], a["note"]) for a in store.actions()}
    assert status["drain"][0] == "verified"
    assert status["requeue"] == ("skipped", f"refused: job {job} opted out (its comment says recover:off): not run")
    assert sim.job(job).attempt == 0
    assert "refused: requeue" in " ".join(store.actions()[-1]["argv"])  # the page says so


def test_a_partition_that_changed_to_recommend_is_not_acted_on(world):
    sim, store, engine, act = world(CANARY)
    job = sim.submit("train", nodes=1, partition="canary")
    poll(sim, engine)
    timeout(engine, job, 1.0)
    sim._jobs[job].partition = "batch"  # scontrol update Partition= before the command ran
    engine.finish()
    for _ in range(4):
        act.step()
    requeue = store.actions()[0]
    assert (requeue["status"], requeue["note"]) == (
        "recommended",
        "partition batch is recommend (policy.scope.default): not run",
    )
    assert sim.job(job).attempt == 0


@pytest.mark.parametrize(
    ("comment", "restarts", "decision", "says"),
    [
        ("recover:max_restarts=1", 1, "stop", "its comment asks at most 1 (recover:max_restarts=1; the site allows 5"),
        ("recover:max_restarts=0", 0, "stop", "its comment asks at most 0"),
        ("recover:max_restarts=2", 1, "restart", None),
        ("recover:max_restarts=99", 4, "restart", None),  # never raises the site's 5
        ("recover:max_restarts=99", 5, "stop", "(budget 5 per"),
        ("recover:max_restarts=999999999999", 1, "restart", "comment is ignored"),  # the site's apply
    ],
)
def test_max_restarts_lowers_the_sites_budget_never_raises_it(write_rules, comment, restarts, decision, says):
    compiled = write_rules(RULES + "  retry: {no_progress_attempts: 0}\n").compiled
    view = SchedulerView()
    view.saw_jobs([_job("7", comment)], 0.0)
    history = [
        {"attempt": i, "decision": "restart", "fault_class": "nccl_timeout", "closed_at": 0.0} for i in range(restarts)
    ]
    ctx = GuardContext(
        job="7", attempt=restarts, history=history, now=1.0, scope=scope_of(compiled.policy.scope, view, "7")
    )
    d = decide(compiled, "nccl_timeout", (), "timeout", ctx)
    assert d.decision == decision
    whys = " / ".join(g["why"] for g in d.guards)
    if says is None:
        assert not d.guards, d.guards
    else:
        assert says in whys, whys


def test_the_comment_is_not_read_where_the_site_says_so(write_rules):
    compiled = write_rules(RULES + "  scope: {job_comment: false}\n").compiled
    view = SchedulerView()
    view.saw_jobs([_job("7", "recover:off recover:max_restarts=0")], 0.0)
    sc = scope_of(compiled.policy.scope, view, "7")
    assert not sc.directives.any
    assert sc.row_mode("job", False, "7", "act") == ("act", None)


def test_a_bad_comment_is_logged_once_per_job_and_rate_limited(caplog):
    view = SchedulerView()
    with caplog.at_level(logging.DEBUG, logger="engine.core.scope"):
        for t in range(3):  # every poll lists them again: said once
            view.saw_jobs([_job(str(i), "recover:off;rm -rf /") for i in range(30)], float(t))
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 10  # WARN_PER_MINUTE; the rest at debug level
    assert len([r for r in caplog.records if r.levelno == logging.DEBUG]) == 20
    assert "job 0: its comment is ignored as a whole" in warned[0].getMessage()
    assert view.ignored_comments == 30


def test_a_job_the_scheduler_never_listed_has_the_default_mode(write_rules):
    compiled = write_rules(RULES + CANARY).compiled
    sc = scope_of(compiled.policy.scope, SchedulerView(), "99", ("n9",))
    assert (sc.job_mode, sc.node("n9")[0]) == ("recommend", "recommend")


def _job(job_id: str, comment: str, partition: str = "debug"):
    return JobInfo(job_id=job_id, attempt=0, state="RUNNING", partition=partition, comment=comment)


@pytest.mark.parametrize(
    ("scope", "says"),
    [
        ("{default: maybe}", "policy.scope.default must be act, recommend or ignore"),
        ("{partitions: {canary: observe}}", "policy.scope.partitions.canary must be act, recommend or ignore"),
        ("{job_comment: perhaps}", "policy.scope.job_comment must be"),
        ("{allow: [canary]}", "allow"),
    ],
)
def test_a_bad_scope_in_a_rulebook_is_a_load_error(write_rules, scope, says):
    result = write_rules(RULES + f"  scope: {scope}\n")
    assert not result.ok
    assert any(says in str(d) for d in result.errors), [str(d) for d in result.errors]
