"""The incident engine on virtual time: correlation, cascades, floods, timers, absences, layering."""

import pytest

from engine.facts import Fact
from engine.core.incidents import Engine
from engine.store import Store

BASE = """
matchers:
  - {id: boom, pattern: 'BOOM (?P<what>\\w+)'}
  - {id: timeout, pattern: 'Watchdog caught collective operation timeout'}  # its facts are asserted directly
rules:
  - id: s.xid
    description: fatal xid
    when: [{as: x, kind: xid, where: {code: {in: [79, 48]}}}]
    then: {symptom: {name: gpu_fatal, code: "{{ x.code }}"}}
  - id: s.timeout
    description: timeout
    when: [{as: l, kind: log, where: {matcher: timeout}}]
    then: {symptom: {name: nccl_timeout}}
  - id: f.timeout
    description: timeout alone
    when: [{as: s, kind: symptom, where: {name: nccl_timeout}}]
    then: {fault: {fault_class: nccl_timeout}}
  - id: f.gpu
    description: gpu
    when: [{as: x, kind: symptom, where: {name: gpu_fatal}}]
    then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ x.node }}"]}}
  - id: f.corr
    description: timeout after a fatal xid on a node of the job
    when:
      - {as: x, kind: symptom, where: {name: gpu_fatal}}
      - {as: t, kind: symptom, where: {name: nccl_timeout}}
    within: 10m
    then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ x.node }}"], priority: 120}}
  - id: s.hot
    description: thermal throttling that lasts
    when: [{as: g, kind: gpu_state, where: {signal: hw_thermal, active: true}}]
    join: []
    for: 5m
    then: {symptom: {name: throttled, severity: warning}}
  - id: f.hang
    description: a running job printed no progress for 30 minutes
    when:
      - {as: j, kind: job, where: {state: RUNNING}}
      - {kind: progress, absent_for: 30m}
    then: {fault: {fault_class: nccl_timeout, reason: hang}}
policy:
  settle: 2m
"""


@pytest.fixture
def engine(write_rules):
    result = write_rules(BASE)
    assert result.ok, [str(d) for d in result.diagnostics]
    store = Store(":memory:")
    return Engine(result.compiled, store)


def log(at, job="7", attempt=0, node=None, matcher="timeout", **kw):
    attrs = {"matcher": matcher, "job": job, "attempt": attempt, **kw}
    if node:
        attrs["node"] = node
    return Fact.make("log", attrs, at, f"job.log:{int(at)}")


def xid(at, code, node, job="7", attempt=0):
    return Fact.make("xid", {"code": code, "node": node, "job": job, "attempt": attempt}, at, f"kern:{node}")


def classes(engine):
    return [(c.decision.fault_class, c.decision.decision, c.decision.nodes) for c in engine.closed]


def test_timeout_after_xid_is_a_gpu_fault_on_that_node(engine):
    engine.ingest(xid(100, 79, "n3"))
    engine.ingest(log(160, rank=0))
    engine.finish()
    assert classes(engine) == [("gpu_fell_off_bus", "isolate_and_restart", ("n3",))]
    assert "f.corr" in engine.store.rules_fired(engine.closed[0].id)


def test_timeout_alone_restarts_and_names_no_node(engine):
    engine.ingest(log(160, rank=0))
    engine.finish()
    assert classes(engine) == [("nccl_timeout", "restart", ())]


def test_xid_long_before_is_not_correlated_but_still_wins_in_same_incident_only_if_settled_together(engine):
    engine.ingest(xid(0, 79, "n3"))
    engine.ingest(log(3600, rank=0))  # an hour later: the first incident has settled and closed
    engine.finish()
    assert classes(engine) == [("gpu_fell_off_bus", "isolate_and_restart", ("n3",)), ("nccl_timeout", "restart", ())]


def test_cascade_of_rank_errors_is_one_incident(engine):
    for rank in range(64):
        engine.ingest(log(100 + rank * 0.1, rank=rank))
    engine.finish()
    assert len(engine.closed) == 1


def test_identical_flood_is_one_fact_with_a_count(engine):
    for i in range(1000):
        engine.ingest(
            Fact.make(
                "log",
                {"matcher": "timeout", "job": "7", "attempt": 0, "text": f"line {i}"},
                100 + i * 0.01,
                f"job.log:{i}",
            )
        )
    engine.finish()
    assert engine.stats["flooded"] == 999
    facts = engine.store.facts(engine.closed[0].id)
    logs = [(f, c) for f, c, _ in facts if f.kind == "log"]
    assert len(logs) == 1 and logs[0][1] == 1000


def test_attempts_are_separate_incidents(engine):
    engine.ingest(log(100, attempt=0))
    engine.ingest(log(101, attempt=1))
    engine.finish()
    assert sorted((c.job, c.attempt) for c in engine.closed) == [("7", 0), ("7", 1)]


def test_for_fires_only_if_the_state_holds(engine):
    on = Fact.make("gpu_state", {"node": "n1", "gpu": 0, "signal": "hw_thermal", "active": True}, 0, "nvml")
    off = Fact.make("gpu_state", {"node": "n1", "gpu": 0, "signal": "hw_thermal", "active": False}, 60, "nvml")
    engine.ingest(on)
    engine.ingest(off)  # replaces the state before 5 minutes pass
    engine.advance(1000)
    assert engine.stats["derived"] == 0
    engine.ingest(
        Fact.make("gpu_state", {"node": "n1", "gpu": 0, "signal": "hw_thermal", "active": True}, 2000, "nvml")
    )
    engine.advance(2000 + 301)
    assert engine.stats["derived"] == 1  # the warning symptom (it opens no incident on its own)
    assert engine.closed == []


def test_absence_of_progress_is_a_hang(engine):
    engine.ingest(Fact.make("job", {"job": "7", "attempt": 0, "state": "RUNNING"}, 0, "slurm"))
    for t in range(0, 600, 60):
        engine.ingest(Fact.make("progress", {"job": "7", "attempt": 0, "step": t}, t, "job.log"))
    engine.advance(540 + 1799)
    assert engine.closed == [] and not engine.open
    engine.advance(540 + 1801)
    engine.advance(540 + 1801 + 200)
    assert classes(engine) == [("nccl_timeout", "restart", ())]


def test_progress_of_another_job_does_not_cancel_the_hang(engine):
    engine.ingest(Fact.make("job", {"job": "7", "attempt": 0, "state": "RUNNING"}, 0, "slurm"))
    for t in range(0, 3000, 60):
        engine.ingest(Fact.make("progress", {"job": "8", "attempt": 0, "step": t}, t, "other.log"))
    engine.advance(4000)
    assert [c.job for c in engine.closed] == ["7"]


def test_hang_watch_ends_when_the_job_stops_running(engine):
    engine.ingest(Fact.make("job", {"job": "7", "attempt": 0, "state": "RUNNING"}, 0, "slurm"))
    engine.ingest(Fact.make("job", {"job": "7", "attempt": 0, "state": "COMPLETED"}, 100, "slurm"))
    engine.advance(10000)
    assert engine.closed == []


def test_facts_are_retracted_when_incidents_close(engine):
    for i in range(50):
        engine.ingest(log(i * 1000.0, job=str(i)))
    engine.finish()
    assert len(engine.closed) == 50
    assert len(engine.session) == 0


def test_layering_append_and_replace(write_rules):
    site = """
lists:
  codes: {override: append, items: [95]}
rules:
  - id: r
    override: {when: replace}
    when: [{kind: xid, where: {code: {in: "@codes"}}}]
"""
    shipped = """
lists:
  codes: [79]
rules:
  - id: r
    description: shipped
    when: [{kind: xid, where: {code: 1}}]
    then: {symptom: {name: s}}
"""
    result = write_rules(shipped, site)
    assert result.ok, [str(d) for d in result.diagnostics]
    book = result.compiled.book
    assert book.lists["codes"] == (79, 95)
    rule = book.rule("r")
    assert rule.description == "shipped" and rule.then_attrs["name"] == "s"
    assert rule.mark.file.endswith("01-rules.yaml")
    assert len(book.origins[("rules", "r")]) == 2


def test_redefinition_without_override_is_an_error(write_rules):
    text = "rules:\n  - {id: r, description: d, when: [{kind: log}], then: {symptom: {name: s}}}\n"
    result = write_rules(text, text)
    assert [d.code for d in result.errors] == ["E-DUP-ID"]
    assert "already defined at" in result.errors[0].message
