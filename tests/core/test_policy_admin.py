"""Policy as a careful Slurm admin sets it (issue 10): unknown failures stop unless a site grants
restarts; a DOWN node still gets DRAIN; fatal hardware is isolated before the incident settles."""

import pytest

from engine.facts import Fact
from engine.core.incidents import Engine
from engine.core.policy import GuardContext, decide
from engine.store import Store

RULES = """
rules:
  - id: f.xid
    description: fatal xid
    when: [{as: x, kind: xid, where: {code: 79}}]
    then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ x.node }}"]}}
actions:
  drain: {per: node, argv: [scontrol, update, "NodeName={{ node }}", State=DRAIN, "Reason={{ reason }}"]}
  requeue: {argv: [scontrol, requeue, "{{ job }}"]}
  notify: {argv: [logger, -t, recover, "incident {{ incident }}: {{ outcome }}"]}
policy:
  settle: 2m
  plans: {isolate_and_restart: [drain, requeue, notify], restart: [requeue], stop: [notify]}
"""


@pytest.fixture
def book(write_rules):
    def make(extra=""):
        result = write_rules(RULES + extra)
        assert result.ok, [str(d) for d in result.diagnostics]
        return result.compiled

    return make


@pytest.mark.parametrize(
    ("budget", "history", "expected"),
    [
        (0, 0, "stop"),  # as shipped for unknown
        (2, 1, "restart"),  # a site granted two
        (2, 2, "stop"),
        (5, 3, "restart"),
    ],
)
def test_per_class_retry_budget(write_rules, budget, history, expected):
    site = f"fault_classes: {{unknown: {{override: true, retry: {budget}}}}}\n"
    result = write_rules(
        site + "policy:\n  retry: {max_per_job: 9, max_per_fingerprint: 9, no_progress_attempts: 0}\n", defaults=True
    )
    assert result.ok, [str(d) for d in result.diagnostics]
    compiled = result.compiled
    past = [
        {"attempt": i, "decision": "restart", "fault_class": "unknown", "fingerprint": f"x{i}", "closed_at": 0.0}
        for i in range(history)
    ]
    d = decide(
        compiled, "unknown", (), "no rule could tell", GuardContext(job="5", attempt=history, history=past, now=1.0)
    )
    assert d.decision == expected
    if expected == "stop":
        assert any(g["guard"] == "retry_budget" and "unknown" in g["why"] for g in d.guards)


def test_a_down_node_is_still_drained_a_drained_one_is_not(book):
    compiled = book()
    ctx = GuardContext(
        job="5", attempt=0, node_states={"n1": {"down": True, "drained": False}, "n2": {"down": False, "drained": True}}
    )
    d = decide(compiled, "node_failure", ("n1", "n2"), "x", ctx)
    assert ("drain", "n1") not in d.skip_targets and ("drain", "n2") in d.skip_targets


def test_fatal_hardware_is_journaled_at_once_and_the_close_adds_only_the_page(book):
    compiled = book("  isolate: {at_once: [gpu_fell_off_bus]}\n")
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    engine.ingest(Fact.make("job", {"job": "7", "attempt": 0, "state": "RUNNING", "nodes": ["n1", "n2"]}, 0.0, "s"))
    engine.ingest(Fact.make("xid", {"code": 79, "node": "n2"}, 1.0, "kern:n2"))
    early = [(a["action"], a["target"], a["status"]) for a in store.actions()]
    assert early == [("drain", "n2", "planned"), ("requeue", "7", "planned")]  # before any settle
    assert store.incident(store.actions()[0]["incident"]).status == "open"
    engine.advance(200.0)
    assert [(a["action"], a["target"]) for a in store.actions()] == [("drain", "n2"), ("requeue", "7"), ("notify", "7")]


def test_not_at_once_past_the_blast_radius_and_only_recommended_at_once_in_dry_run(book):
    compiled = book("  isolate: {at_once: [gpu_fell_off_bus]}\n  blast_radius: {max_drains: 1, max_fraction: 1.0}\n")
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    for i, node in enumerate(("n1", "n2")):
        engine.ingest(Fact.make("xid", {"code": 79, "node": node}, float(i), f"kern:{node}"))
    assert [a["target"] for a in store.actions() if a["action"] == "drain"] == ["n1"]
    dry = Engine(compiled, Store(":memory:"), mode="recommend")
    dry.ingest(Fact.make("xid", {"code": 79, "node": "n1"}, 0.0, "kern:n1"))
    # monitor mode: recorded when act mode would have drained it, as a recommendation only
    assert [(a["action"], a["mode"], a["status"]) for a in dry.store.actions()] == [
        ("drain", "recommend", "recommended")
    ]


@pytest.mark.parametrize(
    ("window", "later", "drained_again"),
    [
        ("48h", 25 * 3600.0, False),  # the site's 48 h: the first drain still counts a day later
        ("48h", 49 * 3600.0, True),  # past the window it no longer does
        ("1h", 25 * 3600.0, True),  # the control: a short window forgets it
    ],
)
def test_the_blast_radius_window_is_the_sites_not_24_h(book, window, later, drained_again):
    compiled = book(f"  blast_radius: {{max_drains: 1, max_fraction: 1.0, window: {window}}}\n")
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    engine.ingest(Fact.make("xid", {"code": 79, "node": "n1"}, 0.0, "kern:n1"))
    engine.advance(200.0)
    engine.ingest(Fact.make("xid", {"code": 79, "node": "n2"}, later, "kern:n2"))
    engine.advance(later + 200.0)
    drains = [a["target"] for a in store.actions() if a["action"] == "drain"]
    assert drains == (["n1", "n2"] if drained_again else ["n1"])
    last = store.incident(store.actions()[-1]["incident"])
    assert any(g["guard"] == "blast_radius" for g in last.guards) is not drained_again
