"""The actuator reads the scheduler through one snapshot per step (issue 24, item 4): every read
of a step (verifiers, preflight) happens inside the adapter's ``snapshot()``, opened once per
step; an adapter without one is read as before."""

from __future__ import annotations

import contextlib

from engine.clock import FakeClock
from engine.core.incidents import Engine
from engine.facts import Fact
from engine.live.actuator import Actuator
from engine.store import Store
from scheduler_adapters.simulated import SimulatedCluster

RULES = """
rules:
  - id: f.xid
    description: fatal xid
    when: [{as: x, kind: xid, where: {code: 79}}]
    then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ x.node }}"]}}
actions:
  drain: {per: node, argv: [scontrol, update, "NodeName={{ node }}", State=DRAIN, "Reason={{ reason }}"]}
  requeue: {argv: [scontrol, requeue, "{{ job }}"]}
  exclude: {argv: [scontrol, update, "JobId={{ job }}", "ExcNodeList={{ nodes|join(',') }}"]}
policy:
  settle: 10s
  plans: {isolate_and_restart: [drain, requeue, exclude]}
"""


class Snapshotting(SimulatedCluster):
    """The simulation with a snapshot: counts the blocks and any read made outside one."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.opened = self.outside = 0
        self._inside = False

    @contextlib.contextmanager
    def snapshot(self):
        self.opened += 1
        self._inside = True
        try:
            yield
        finally:
            self._inside = False

    def _read(self) -> None:
        if not self._inside:
            self.outside += 1

    def jobs(self):
        self._read()
        return super().jobs()

    def job(self, job_id):
        self._read()
        return super().job(job_id)

    def nodes(self):
        self._read()
        return super().nodes()


def _run(write_rules, sim) -> tuple[Store, list]:
    result = write_rules(RULES)
    assert result.ok, [str(d) for d in result.diagnostics]
    clock = FakeClock()
    store = Store(":memory:", clock=clock)
    engine = Engine(result.compiled, store, mode="act")
    act = Actuator(store, sim, result.compiled, clock=clock)
    job = sim.submit("train", nodes=3)
    engine.ingest(Fact.make("xid", {"code": 79, "node": "n3", "job": job, "attempt": 0}, 0, "kern:n3:0"))
    engine.finish()
    for _ in range(8):
        act.step()
        clock.advance(10.0)
    return store, [(a["action"], a["status"]) for a in store.actions()]


def test_every_read_of_a_step_is_inside_one_snapshot(write_rules):
    sim = Snapshotting(["n1", "n2", "n3", "n4"])
    _, done = _run(write_rules, sim)
    assert done == [("drain", "verified"), ("requeue", "verified"), ("exclude", "verified")]
    assert sim.opened == 8  # one per step
    assert sim.outside == 0


def test_an_adapter_without_a_snapshot_acts_the_same(write_rules):
    _, done = _run(write_rules, SimulatedCluster(["n1", "n2", "n3", "n4"]))
    assert done == [("drain", "verified"), ("requeue", "verified"), ("exclude", "verified")]
