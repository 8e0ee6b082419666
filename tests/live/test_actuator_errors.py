"""What the actuator does when something goes wrong that is not a command failing (issue 18):
its own bug is an error said once and an escalated action, never "the scheduler could not tell";
a scheduler that really cannot tell is waited for, but not for ever, and said so once in a while,
not on every step."""

import logging
from types import SimpleNamespace

import pytest

from engine.clock import FakeClock
from engine.core.incidents import Engine
from engine.facts import Fact
from engine.live.actuator import Actuator
from engine.store import Store
from scheduler_adapters.base import SchedulerUnavailable
from scheduler_adapters.simulated import SimulatedCluster

RULES = """
rules:
  - id: f.xid
    description: fatal xid
    when: [{as: x, kind: xid, where: {code: 79}}]
    then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ x.node }}"], reason: "Xid 79 on {{ x.node }}"}}
actions:
  drain: {per: node, argv: [scontrol, update, "NodeName={{ node }}", State=DRAIN, "Reason={{ reason }}"]}
  requeue: {argv: [scontrol, requeue, "{{ job }}"]}
  notify: {argv: [logger, -t, recover, "incident {{ incident }}: {{ outcome }}"]}
policy:
  settle: 10s
  plans: {isolate_and_restart: [drain, requeue, notify], stop: [notify]}
"""
ACTUATOR = "engine.live.actuator"


@pytest.fixture
def world(write_rules):
    def make(sim, clock=None, **kw):
        result = write_rules(RULES)
        assert result.ok, [str(d) for d in result.diagnostics]
        clock = clock or FakeClock()  # the journal's stamps and the actuator's timeouts: one clock
        store = Store(":memory:", clock=clock)
        engine = Engine(result.compiled, store, mode="act")
        act = Actuator(store, sim, result.compiled, clock=clock, **kw)
        job = sim.submit("train", nodes=1)
        engine.ingest(Fact.make("xid", {"code": 79, "node": "n1", "job": job, "attempt": 0}, 0.0, "kern:n1"))
        engine.finish()
        return store, act, job

    return make


def by_name(store, name):
    return [a for a in store.actions() if a["action"] == name]


class NodesWithoutReason(SimulatedCluster):
    """An adapter bug: its nodes lack ``reason``, which the drain's verifier reads."""

    def nodes(self):
        return [SimpleNamespace(name=n.name, state=n.state, drained=n.drained) for n in super().nodes()]


class JobDetailBug(SimulatedCluster):
    """An adapter bug in the live read the requeue's preflight makes."""

    def job_detail(self, job_id):
        raise KeyError("gres")


@pytest.mark.parametrize(
    ("adapter", "action", "error"),
    [(NodesWithoutReason, "drain", "AttributeError"), (JobDetailBug, "requeue", "KeyError")],
)
def test_a_bug_is_an_escalated_action_logged_once_not_a_wedged_plan(world, caplog, adapter, action, error):
    sim = adapter(["n1", "n2"])
    store, act, job = world(sim)
    with caplog.at_level(logging.WARNING, logger=ACTUATOR):
        for _ in range(50):
            act.step()
    (broken,) = by_name(store, action)
    assert broken["status"] == "escalated" and f"internal error ({error}" in broken["note"]
    bugs = [r for r in caplog.records if r.name == ACTUATOR and r.levelno == logging.ERROR and r.exc_info]
    assert len(bugs) == 1 and f"action {broken['id']}" in bugs[0].getMessage()
    assert bugs[0].exc_info[0].__name__ == error
    assert not [r for r in caplog.records if "could not tell" in r.getMessage()]  # not the scheduler's fault
    # a person is told, and the rest of the plan is no longer held behind it
    page = [a for a in by_name(store, "notify") if "notify-escalation" in a["idem_key"]]
    assert page and page[0]["status"] == "verified" and "internal error" in page[0]["argv"][-1]
    rest = {a["status"] for a in store.actions() if a["id"] != broken["id"]}
    assert rest == {"verified"}


class NoJobAnswer(SimulatedCluster):
    """sinfo answers, but every job query times out (slurmctld overloaded, say)."""

    def job(self, job_id):
        raise SchedulerUnavailable("squeue timed out after 30 s")


def test_a_scheduler_that_keeps_answering_unknown_escalates_after_drain_retry_for(world):
    clock = FakeClock()
    sim = NoJobAnswer(["n1", "n2"])
    store, act, job = world(sim, drain_retry_for=600.0, clock=clock)
    act.step()  # the drain runs
    act.step()  # ... and is verified; the requeue's preflight cannot read the job: the first unknown
    assert by_name(store, "drain")[0]["status"] == "verified"
    for _ in range(59):  # ten seconds a step: 590 s of nothing but "unknown"
        clock.advance(10.0)
        act.step()
    assert by_name(store, "requeue")[0]["status"] == "planned"  # waits: could not tell is not "not done"
    clock.advance(10.0)
    act.step()  # 600 s after the first
    (rq,) = by_name(store, "requeue")
    assert rq["status"] == "escalated" and "could not tell its state for 600 s" in rq["note"], rq
    assert not [h for h in sim.history if h[:2] == ["scontrol", "requeue"]]  # never run on a guess
    assert any("notify-escalation" in a["idem_key"] for a in by_name(store, "notify"))


def test_the_waiting_warning_is_rate_limited(world, caplog):
    clock = FakeClock()
    sim = NoJobAnswer(["n1", "n2"])
    store, act, job = world(sim, drain_retry_for=600.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger=ACTUATOR):
        for _ in range(200):  # 200 steps in 20 s: the controller's loop ticks about 5 times a second
            act.step()
            clock.advance(0.1)
    waits = [r for r in caplog.records if "could not tell" in r.getMessage()]
    assert len(waits) == 1, len(waits)
    assert by_name(store, "requeue")[0]["status"] == "planned"
