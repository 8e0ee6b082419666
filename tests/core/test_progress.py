"""Hangs (learned and configured bounds) and stragglers, on virtual time."""

import pytest

from engine.facts import Fact
from engine.incidents import Engine
from engine.store import Store

RULES = """
rules:
  - id: f.hang
    description: no progress for longer than the bound
    when: [{as: s, kind: stall}]
    then: {fault: {fault_class: nccl_timeout, reason: "hang: idle {{ s.idle_s }} s (bound {{ s.bound_s }} s)"}}
  - id: f.straggler
    description: a node persistently slower than its peers
    when: [{as: s, kind: slow_node}]
    then: {fault: {fault_class: straggler, nodes: ["{{ s.node }}"]}}
policy:
  settle: 60s
  hang: {factor: 3, min_bound: 30s, min_samples: 3}
  straggler: {factor: 1.5, duration: 120s}
"""


def running(at, job="9", attempt=0):
    return Fact.make("job", {"job": job, "attempt": attempt, "state": "RUNNING"}, at, "slurm")


def prog(at, step, job="9", attempt=0, **kw):
    return Fact.make("progress", {"job": job, "attempt": attempt, "step": step, **kw}, at, f"log:{step}")


@pytest.fixture
def make_engine(write_rules):
    def make(extra=""):
        result = write_rules(RULES + extra)
        assert result.ok, [str(d) for d in result.diagnostics]
        return Engine(result.compiled, Store(":memory:"))
    return make


def test_learned_bound_is_a_multiple_of_the_longest_interval(make_engine):
    e = make_engine()
    e.ingest(running(0))
    for i in range(6):
        e.ingest(prog(i * 20.0, i))  # 20 s steps -> bound 3 x 20 = 60 s
    last = 100.0
    e.advance(last + 59)
    assert not e.open and not e.closed
    e.advance(last + 61)
    assert len(e.open) == 1
    e.finish()
    inc = e.closed[0]
    assert inc.decision.fault_class == "nccl_timeout"
    assert "bound 60" in e.store.incident(inc.id).reason


def test_no_hang_before_enough_intervals_are_known(make_engine):
    e = make_engine()
    e.ingest(running(0))
    e.ingest(prog(0, 1))
    e.ingest(prog(10, 2))
    e.advance(10000)
    assert not e.open and not e.closed


def test_configured_bound_and_finished_jobs(make_engine):
    e = make_engine()
    e.tracker.hang["bound"] = 100.0
    e.ingest(running(0))
    e.ingest(prog(0, 1))
    e.ingest(Fact.make("job", {"job": "9", "attempt": 0, "state": "COMPLETED"}, 50, "slurm"))
    e.advance(1000)
    assert not e.open and not e.closed  # a finished job's silence is no hang


def test_a_stall_is_reported_once_per_silence(make_engine):
    e = make_engine()
    e.tracker.hang["bound"] = 100.0
    e.ingest(running(0))
    e.ingest(prog(0, 1))
    for t in (150, 200, 250):
        e.advance(t)
    assert e.stats["derived"] == 1
    e.ingest(prog(300, 2))  # progress resumes, then stops again
    e.advance(420)
    # the same conclusion for the same attempt within the cascade window: one fault, counted twice
    assert e.stats["derived"] + e.stats["rederived"] == 2


def test_straggler_names_the_slow_node(make_engine):
    e = make_engine()
    for step in range(40):
        t = step * 10.0
        for node in ("n1", "n2", "n3", "n4"):
            st = 2.0 if node == "n3" else 1.0
            e.ingest(prog(t, step, node=node, step_time=st))
    e.finish()
    assert [(c.decision.fault_class, c.decision.nodes) for c in e.closed] == [("straggler", ("n3",))]


def test_a_short_slowdown_is_not_a_straggler(make_engine):
    e = make_engine()
    for step in range(40):
        t = step * 10.0
        for node in ("n1", "n2", "n3"):
            st = 2.0 if (node == "n3" and 10 <= step < 15) else 1.0
            e.ingest(prog(t, step, node=node, step_time=st))
    e.finish()
    assert e.closed == []
