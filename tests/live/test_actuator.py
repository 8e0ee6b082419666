"""Acting through the journal against the simulated cluster (unit level; the real-Slurm tests
are in tests/slurm): order, verification, crash recovery without repetition, escalation, guards."""

import time

import pytest

from engine.clock import FakeClock

from engine.live.actuator import Actuator
from engine.facts import Fact
from engine.core.incidents import Engine
from engine.store import Store
from scheduler_adapters.base import CommandResult
from scheduler_adapters.simulated import SimulatedCluster

RULES = """
matchers:  # the tests assert their log facts directly; a rule may only name a declared matcher
  - {id: traceback, pattern: 'Traceback \\(most recent call last\\)'}
  - {id: timeout, pattern: 'Watchdog caught collective operation timeout'}
rules:
  - id: f.xid
    description: fatal xid
    when: [{as: x, kind: xid, where: {code: 79}}]
    then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ x.node }}"]}}
  - id: f.app
    description: traceback
    when: [{as: l, kind: log, where: {matcher: traceback}}]
    then: {fault: {fault_class: app_error}}
  - id: f.timeout
    description: nccl timeout
    when: [{as: l, kind: log, where: {matcher: timeout}}]
    then: {fault: {fault_class: nccl_timeout}}
actions:
  drain: {per: node, argv: [scontrol, update, "NodeName={{ node }}", State=DRAIN, "Reason={{ reason }}"]}
  requeue: {argv: [scontrol, requeue, "{{ job }}"]}
  exclude: {argv: [scontrol, update, "JobId={{ job }}", "ExcNodeList={{ nodes|join(',') }}"]}
  notify: {argv: [logger, -t, recover, "incident {{ incident }}: {{ fault_class }} -> {{ decision }}"]}
policy:
  settle: 10s
  plans: {isolate_and_restart: [drain, requeue, exclude], restart: [requeue], stop: [notify]}
"""


@pytest.fixture
def setup(write_rules):
    def make(extra="", mode="act"):
        result = write_rules(RULES + extra)
        assert result.ok, [str(d) for d in result.diagnostics]
        sim = SimulatedCluster(["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"])
        clock = FakeClock()  # one clock for the journal's stamps and the actuator's timeouts
        store = Store(":memory:", clock=clock)
        engine = Engine(result.compiled, store, mode=mode)
        act = Actuator(store, sim, result.compiled, clock=clock)
        return sim, store, engine, act

    return make


def fault_xid(engine, job, node, at, attempt=0):
    engine.ingest(Fact.make("xid", {"code": 79, "node": node, "job": job, "attempt": attempt}, at, f"kern:{node}:{at}"))


#: each step of ``drive`` is this long on the fake clock: the actuator's real verify timeout
#: (20 s) and retry backoff (2 s, doubling) pass in a few steps, as they would in production
STEP_S = 10.0


def drive(act, n=10):
    """``n`` steps of the actuator, ``STEP_S`` apart on its clock."""
    for _ in range(n):
        act.step()
        act.clock.advance(STEP_S)


def test_isolate_and_restart_runs_in_order_and_verifies(setup):
    sim, store, engine, act = setup()
    job = sim.submit("train", nodes=3)
    assert sim.job(job).nodes == ("n1", "n2", "n3")
    fault_xid(engine, job, "n3", 0)
    engine.finish()
    drive(act)
    actions = store.actions()
    assert [(a["action"], a["status"]) for a in actions] == [
        ("drain", "verified"),
        ("requeue", "verified"),
        ("exclude", "verified"),
    ]
    assert [h[:2] for h in sim.history] == [["scontrol", "update"], ["scontrol", "requeue"], ["scontrol", "update"]]
    node = {n.name: n for n in sim.nodes()}["n3"]
    assert node.drained and f"incident {engine.closed[0].id}" in node.reason
    sim.tick()
    j = sim.job(job)
    assert j.state == "RUNNING" and j.attempt == 1 and "n3" not in j.nodes


def test_crash_after_start_does_not_repeat_a_done_action(setup):
    sim, store, engine, act = setup()
    job = sim.submit("train", nodes=2)
    fault_xid(engine, job, "n2", 0)
    engine.finish()
    drain = store.actions()[0]
    # the controller ran the drain, then died before journaling the result
    store.update_action(drain["id"], "started", attempt=True)
    sim.run(drain["argv"])
    before = len(sim.history)
    restarted = Actuator(store, sim, act.compiled, clock=act.clock)
    drive(restarted)
    drains = [h for h in sim.history[before:] if "State=DRAIN" in h]
    assert drains == []  # verified as done: not run again
    assert store.actions()[0]["status"] == "verified"
    assert [a["status"] for a in store.actions()] == ["verified", "verified", "verified"]


def test_crash_after_start_runs_an_action_that_did_not_happen(setup):
    sim, store, engine, act = setup()
    job = sim.submit("train", nodes=2)
    fault_xid(engine, job, "n2", 0)
    engine.finish()
    drain = store.actions()[0]
    store.update_action(drain["id"], "started", attempt=True)  # died before running it
    drive(Actuator(store, sim, act.compiled, clock=act.clock))
    assert sum("State=DRAIN" in " ".join(h) for h in sim.history) == 1
    assert store.actions()[0]["status"] == "verified"


class Liar(SimulatedCluster):
    """Says yes to every command and does nothing."""

    def run(self, argv, timeout=30.0):
        self.history.append(list(argv))
        return CommandResult(0, "", "")


def test_unverifiable_action_is_retried_then_escalated(setup, write_rules):
    _, store, engine, act = setup()
    liar = Liar(["n1", "n2"])
    job = liar.submit("train", nodes=2)
    fault_xid(engine, job, "n1", 0)
    engine.finish()
    act.adapter = liar
    drive(act, 20)
    drain = store.actions()[0]
    assert drain["status"] == "escalated" and drain["attempts"] == 3
    assert sum("State=DRAIN" in " ".join(h) for h in liar.history) == 3
    notes = [a for a in store.actions() if a["idem_key"].endswith(":notify-escalation:" + job)]
    assert notes and notes[0]["argv"][0] == "logger"
    guards = store.incident(engine.closed[0].id).guards
    assert any(g["guard"] == "escalated" for g in guards)


def test_app_error_stops_without_requeue(setup):
    sim, store, engine, act = setup()
    job = sim.submit("train", nodes=1)
    sim.fail(job)
    engine.ingest(Fact.make("log", {"matcher": "traceback", "job": job, "attempt": 0}, 0, "log:1"))
    engine.finish()
    drive(act)
    assert [a["action"] for a in store.actions()] == ["notify"]
    assert sim.job(job).state == "FAILED"


def test_retry_budget_stops_requeues(setup):
    sim, store, engine, act = setup("  retry: {max_per_job: 2, max_per_fingerprint: 5, no_progress_attempts: 0}\n")
    job = sim.submit("train", nodes=1)
    for attempt in range(4):
        engine.ingest(
            Fact.make("log", {"matcher": "timeout", "job": job, "attempt": attempt}, attempt * 1000.0, f"log:{attempt}")
        )
        engine.advance(attempt * 1000.0 + 100)
    engine.finish()
    decisions = [c.decision.decision for c in engine.closed]
    assert decisions == ["restart", "restart", "stop", "stop"]
    g = [x for x in engine.closed[2].decision.guards if x["guard"] == "retry_budget"]
    assert g and "already restarted 2 times" in g[0]["why"]


def test_no_progress_across_attempts_stops(setup):
    sim, store, engine, act = setup("  retry: {no_progress_attempts: 2}\n")
    job = sim.submit("train", nodes=1)
    for attempt in range(3):
        t = attempt * 1000.0
        engine.ingest(Fact.make("progress", {"job": job, "attempt": attempt, "checkpoint": 500}, t, f"log:{attempt}:c"))
        engine.ingest(Fact.make("log", {"matcher": "timeout", "job": job, "attempt": attempt}, t + 1, f"log:{attempt}"))
        engine.advance(t + 100)
    engine.finish()
    assert [c.decision.decision for c in engine.closed] == ["restart", "restart", "stop"]
    assert "no progress across 2 attempts" in engine.closed[2].decision.guards[0]["why"]


def test_progress_keeps_restarting(setup):
    sim, store, engine, act = setup("  retry: {no_progress_attempts: 2}\n")
    job = sim.submit("train", nodes=1)
    for attempt in range(3):
        t = attempt * 1000.0
        engine.ingest(
            Fact.make(
                "progress", {"job": job, "attempt": attempt, "checkpoint": 500 * (attempt + 1)}, t, f"c:{attempt}"
            )
        )
        engine.ingest(Fact.make("log", {"matcher": "timeout", "job": job, "attempt": attempt}, t + 1, f"log:{attempt}"))
        engine.advance(t + 100)
    engine.finish()
    assert [c.decision.decision for c in engine.closed] == ["restart"] * 3


def test_blast_radius_stops_draining_and_notifies(setup):
    sim, store, engine, act = setup("  blast_radius: {max_drains: 3, max_fraction: 1.0, window: 1h}\n")
    for i in range(1, 7):
        job = sim.submit(f"j{i}", nodes=1)
        fault_xid(engine, job, f"n{i}", float(i))
    engine.finish()
    drive(act, 30)
    drained = [n.name for n in sim.nodes() if n.drained]
    assert len(drained) == 3
    stopped = [c for c in engine.closed if c.decision.decision == "observe"]
    assert len(stopped) == 3
    assert all(any(g["guard"] == "blast_radius" for g in c.decision.guards) for c in stopped)
    assert all([p.name for p in c.plan] == ["notify"] for c in stopped)


def test_silenced_node_is_only_recorded(setup):
    sim, store, engine, act = setup()
    store.add_silence("n2", time.time() + 3600, "maintenance", "ops", start=0)  # the engine runs on virtual time 0..
    job = sim.submit("train", nodes=2)
    fault_xid(engine, job, "n2", 0)
    engine.finish()
    c = engine.closed[0]
    assert c.decision.decision == "observe" and any(g["guard"] == "silence" for g in c.decision.guards)
    assert store.actions() == []


def test_already_drained_node_is_not_drained_again(setup):
    sim, store, engine, act = setup()
    job = sim.submit("train", nodes=2)
    engine.ingest(Fact.make("node", {"node": "n2", "state": "drained", "drained": True, "down": False}, 0, "slurm"))
    fault_xid(engine, job, "n2", 1)
    engine.finish()
    assert [a["action"] for a in store.actions()] == ["requeue", "exclude"]
    assert any(g["guard"] == "inhibit" for g in engine.closed[0].decision.guards)


def test_autonomy_lets_requeues_act_while_drains_only_recommend(setup):
    sim, store, engine, act = setup("  autonomy: {isolate_and_restart: recommend, restart: act}\n")
    j1 = sim.submit("a", nodes=1)
    fault_xid(engine, j1, "n1", 0)
    j2 = sim.submit("b", nodes=1)
    engine.ingest(Fact.make("log", {"matcher": "timeout", "job": j2, "attempt": 0}, 1, "log:1"))
    engine.finish()
    modes = {(a["action"], a["mode"], a["status"]) for a in store.actions()}
    assert ("drain", "recommend", "recommended") in modes
    assert ("requeue", "act", "planned") in modes


def test_dry_run_never_plans_to_act(setup):
    sim, store, engine, act = setup(mode="recommend")
    job = sim.submit("train", nodes=2)
    fault_xid(engine, job, "n2", 0)
    engine.finish()
    drive(act)
    assert {a["mode"] for a in store.actions()} == {"recommend"}
    assert sim.history == []
