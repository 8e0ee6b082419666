"""Autonomy per decision kind AND per fault class, plans per fault class, and fatal hardware
recommended at the moment act mode would isolate it (issue 18, item 10).

Without --dry-run, what acts is what the policy grants: a site's own fault class recommends until
the site grants it (`policy.autonomy.classes`), while the shipped classes keep the autonomy they
ship with; a class may name its own plan, so one observe class can page without every other
observe class paging; in monitor mode the at-once isolation is recorded when it would have run."""

from __future__ import annotations

import textwrap

import pytest

from engine.core.incidents import Engine
from engine.core.policy import GuardContext, decide
from engine.facts import Fact
from engine.ops import explain
from engine.rulebook import load_rulebook, require_rulebook
from engine.store import Store

#: a site's own class that restarts (not granted unless a test grants it)
SITE = """\
fault_classes:
  ib_link_flap:
    description: An InfiniBand link of a node of the job went down and up.
    decision: restart
    priority: 60
matchers:
  - {id: ib_flap, source: [job], pattern: 'IB FLAP'}
rules:
  - id: fault.ib_flap
    description: an IB link flapped
    when: [{as: l, kind: log, where: {matcher: ib_flap}}]
    then: {fault: {fault_class: ib_link_flap, reason: link flap}}
"""
#: a site's own class that observes and pages (its own plan)
QUOTA = """\
fault_classes:
  quota_exceeded:
    description: The job's filesystem quota ran out; a person frees space.
    decision: observe
    priority: 20
    plan: [notify]
matchers:
  - {id: quota, source: [job], pattern: 'Disk quota exceeded'}
rules:
  - id: fault.quota
    description: quota exceeded
    when: [{as: l, kind: log, where: {matcher: quota}}]
    then: {fault: {fault_class: quota_exceeded, reason: quota}}
"""


@pytest.fixture
def site(tmp_path):
    """Load the shipped rulebook plus site files (dedented text): the LoadResult."""

    def load(*texts: str):
        paths = []
        for i, text in enumerate(texts):
            p = tmp_path / f"site-{i}.yaml"
            p.write_text(textwrap.dedent(text))
            paths.append(str(p))
        return load_rulebook(paths)

    return load


def _ok(result):
    assert result.ok, [str(d) for d in result.errors]
    return result.compiled


# -- autonomy per fault class ----------------------------------------------------------------------


def test_a_site_class_recommends_until_the_site_grants_it(site):
    compiled = _ok(site(SITE))
    d = decide(compiled, "ib_link_flap", (), "link flap", GuardContext(job="5", attempt=0))
    assert d.decision == "restart"
    assert d.autonomy == "recommend"  # the restart decision kind acts, but this class is not granted
    assert any(g["guard"] == "autonomy" and "ib_link_flap is not granted" in g["why"] for g in d.guards)
    # the same class once the site grants it
    granted = _ok(site(SITE, "policy:\n  autonomy: {classes: {ib_link_flap: act}}\n"))
    d = decide(granted, "ib_link_flap", (), "link flap", GuardContext(job="5", attempt=0))
    assert d.autonomy == "act" and not [g for g in d.guards if g["guard"] == "autonomy"]
    assert "policy.autonomy.classes.ib_link_flap (" in d.mode_why and "site-1.yaml:2:" in d.mode_why


def test_in_act_mode_a_site_class_only_records_recommendations(site):
    compiled = _ok(site(SITE))
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    engine.ingest(Fact.make("job", {"job": "7", "attempt": 0, "state": "RUNNING", "nodes": ["n1"]}, 0.0, "s"))
    engine.ingest(Fact.make("log", {"matcher": "ib_flap", "job": "7", "attempt": 0, "text": "IB FLAP"}, 1.0, "f:1"))
    engine.advance(1000.0)
    (inc,) = store.incidents()
    assert (inc.fault_class, inc.decision, inc.mode) == ("ib_link_flap", "restart", "recommend")
    acts = [(a["action"], a["mode"], a["status"]) for a in store.actions()]
    assert acts == [("requeue", "recommend", "recommended")]


def test_the_shipped_classes_keep_their_shipped_autonomy():
    compiled = require_rulebook()
    for name, fc in compiled.fault_classes.items():
        nodes = ("n1",) if fc.decision == "isolate_and_restart" else ()
        d = decide(compiled, name, nodes, "x", GuardContext())
        assert d.autonomy == "act", (name, d.mode_why)
        assert "granted by policy.autonomy." in d.mode_why and f"policy.autonomy.classes.{name}" in d.mode_why


def test_a_decision_kind_set_to_recommend_still_wins_over_a_granted_class(site):
    compiled = _ok(site("policy:\n  autonomy: {stop: recommend}\n"))
    d = decide(compiled, "cuda_oom", (), "oom", GuardContext(job="5", attempt=0))
    assert d.decision == "stop" and d.autonomy == "recommend"
    assert any("policy.autonomy.stop" in g["why"] and "is recommend" in g["why"] for g in d.guards)


def test_a_site_grant_keeps_the_shipped_grants_and_can_take_one_back(site):
    compiled = _ok(site(SITE, "policy:\n  autonomy: {classes: {ib_link_flap: act, nccl_timeout: recommend}}\n"))
    classes = compiled.policy["autonomy"]["classes"]
    assert classes["ib_link_flap"] == "act" and classes["gpu_fell_off_bus"] == "act"  # merged, not replaced
    assert decide(compiled, "nccl_timeout", (), "x", GuardContext()).autonomy == "recommend"
    assert decide(compiled, "node_failure", ("n1",), "x", GuardContext()).autonomy == "act"


def test_an_unknown_class_in_autonomy_is_an_error_at_its_file_line_col(site, tmp_path):
    result = site(SITE, "policy:\n  autonomy:\n    classes:\n      ib_link_flap: act\n      ib_lnk_flap: act\n")
    assert not result.ok
    (err,) = result.errors
    assert err.code == "E-VALUE" and "unknown fault class 'ib_lnk_flap'" in err.message
    assert (err.mark.file, err.mark.line) == (str(tmp_path / "site-1.yaml"), 5)
    bad = site("policy:\n  autonomy: {classes: {cuda_oom: yes-please}}\n")
    assert [e.code for e in bad.errors] == ["E-VALUE"] and "yes-please" in bad.errors[0].message


def test_in_monitor_mode_the_mode_says_what_act_mode_would_do(site):
    compiled = _ok(site(SITE))
    d = decide(compiled, "nccl_timeout", (), "x", GuardContext(forced_mode="recommend"))
    assert d.autonomy == "recommend"
    assert d.mode_why.startswith("monitor mode (--dry-run)") and "in act mode: act, granted by" in d.mode_why
    d = decide(compiled, "ib_link_flap", (), "x", GuardContext(forced_mode="recommend"))
    assert "in act mode: recommend" in d.mode_why and "not granted" in d.mode_why


def test_explain_prints_the_mode_and_the_keys_that_gave_it(site):
    compiled = _ok(site(SITE))
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    for job, line, matcher in (("7", "IB FLAP", "ib_flap"), ("8", "NCCL watchdog", None)):
        engine.ingest(Fact.make("job", {"job": job, "attempt": 0, "state": "RUNNING", "nodes": ["n1"]}, 0.0, "s"))
        if matcher:
            engine.ingest(Fact.make("log", {"matcher": matcher, "job": job, "attempt": 0, "text": line}, 1.0, "f:1"))
    engine.ingest(Fact.make("job", {"job": "8", "attempt": 0, "state": "FAILED", "nodes": ["n1"]}, 2.0, "s"))
    engine.advance(1000.0)
    by_job = {i.job: i for i in store.incidents()}
    flap = explain.render_text(explain.build(store, by_job["7"].id))
    assert "  mode:     recommend: fault class ib_link_flap is not granted in policy.autonomy.classes" in flap
    unknown = explain.render_text(explain.build(store, by_job["8"].id))
    assert "  mode:     act: granted by policy.autonomy.stop (rules/50-policy.yaml:" in unknown
    assert "policy.autonomy.classes.unknown (rules/50-policy.yaml:" in unknown
    assert explain.build(store, by_job["7"].id)["incident"]["mode_why"].startswith("fault class ib_link_flap")


# -- plans per fault class -------------------------------------------------------------------------


def test_a_class_plan_pages_for_that_class_and_no_other_observe_class(site):
    compiled = _ok(site(QUOTA, "policy:\n  autonomy: {classes: {quota_exceeded: act}}\n"))
    quota = decide(compiled, "quota_exceeded", (), "quota", GuardContext(job="5", attempt=0))
    limit = decide(compiled, "job_time_limit", (), "time limit", GuardContext(job="6", attempt=0))
    assert (quota.decision, quota.plan, quota.autonomy) == ("observe", ("notify",), "act")
    assert (limit.decision, limit.plan) == ("observe", ())  # the observe plan as shipped: nobody paged
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    engine.ingest(Fact.make("job", {"job": "5", "attempt": 0, "state": "RUNNING", "nodes": ["n1"]}, 0.0, "s"))
    engine.ingest(
        Fact.make("log", {"matcher": "quota", "job": "5", "attempt": 0, "text": "Disk quota exceeded"}, 1.0, "f:1")
    )
    engine.advance(1000.0)
    assert [(a["action"], a["target"], a["mode"], a["status"]) for a in store.actions()] == [
        ("notify", "5", "act", "planned")
    ]


def test_a_guard_that_changes_the_decision_runs_that_decisions_plan(site):
    own = """\
    fault_classes:
      lustre_ost_down:
        description: A Lustre OST went away under the job.
        decision: restart
        priority: 60
        plan: [requeue, notify]
    policy:
      autonomy: {classes: {lustre_ost_down: act}}
    """
    compiled = _ok(site(own))
    fresh = decide(compiled, "lustre_ost_down", (), "ost", GuardContext(job="5", attempt=0))
    assert fresh.plan == ("requeue", "notify")
    past = [
        {"attempt": i, "decision": "restart", "fault_class": "lustre_ost_down", "fingerprint": "f", "closed_at": 0.0}
        for i in range(5)
    ]
    spent = decide(compiled, "lustre_ost_down", (), "ost", GuardContext(job="5", attempt=5, history=past, now=1.0))
    assert spent.decision == "stop" and spent.plan == tuple(compiled.policy["plans"]["stop"])


def test_a_class_plan_naming_an_unknown_action_is_an_error(site):
    result = site(QUOTA.replace("plan: [notify]", "plan: [page_oncall]"))
    assert not result.ok
    (err,) = result.errors
    assert err.code == "E-REF" and "quota_exceeded" in err.message and "page_oncall" in err.message
    assert err.mark.file.endswith("site-0.yaml") and err.mark.line > 0
    typed = site(QUOTA.replace("plan: [notify]", "plan: notify"))
    assert [e.code for e in typed.errors] == ["E-TYPE"]


# -- fatal hardware at once, in monitor mode ------------------------------------------------------

XID = """\
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
  isolate: {at_once: [gpu_fell_off_bus]}
"""


def _xid_engine(write_rules, mode: str, extra: str = "") -> tuple[Engine, Store]:
    result = write_rules(XID + extra)
    assert result.ok, [str(d) for d in result.errors]
    store = Store(":memory:")
    engine = Engine(result.compiled, store, mode=mode)
    engine.ingest(Fact.make("job", {"job": "7", "attempt": 0, "state": "RUNNING", "nodes": ["n1", "n2"]}, 0.0, "s"))
    engine.ingest(Fact.make("xid", {"code": 79, "node": "n2"}, 1.0, "kern:n2"))
    return engine, store


def test_monitor_mode_recommends_the_isolation_when_act_mode_would_run_it(write_rules):
    engine, store = _xid_engine(write_rules, "recommend")
    early = [(a["action"], a["target"], a["mode"], a["status"]) for a in store.actions()]
    assert early == [("drain", "n2", "recommend", "recommended"), ("requeue", "7", "recommend", "recommended")]
    assert store.incident(store.actions()[0]["incident"]).status == "open"  # before any settle
    assert all("act mode would run it now" in a["note"] for a in store.actions())
    engine.advance(200.0)
    # the close adds only the page, and what act mode would have run at once is the same list
    assert [(a["action"], a["status"]) for a in store.actions()] == [
        ("drain", "recommended"),
        ("requeue", "recommended"),
        ("notify", "recommended"),
    ]
    acted, act_store = _xid_engine(write_rules, "act")
    assert [(a["action"], a["target"]) for a in act_store.actions()] == [(a, t) for a, t, _, _ in early]


def test_act_mode_recommends_at_once_for_a_class_not_granted(write_rules):
    # a site's own fatal class, isolated at once, that the site has not granted act
    site_class = """\
    fault_classes:
      gpu_site_fatal:
        description: The site's own fatal GPU signal.
        decision: isolate_and_restart
        priority: 99
    """
    xid = XID.replace("gpu_fell_off_bus", "gpu_site_fatal")
    result = write_rules(site_class, xid)
    assert result.ok, [str(d) for d in result.errors]
    store = Store(":memory:")
    engine = Engine(result.compiled, store, mode="act")
    engine.ingest(Fact.make("xid", {"code": 79, "node": "n2"}, 1.0, "kern:n2"))
    assert [(a["action"], a["mode"], a["status"]) for a in store.actions()] == [("drain", "recommend", "recommended")]
    engine.advance(200.0)
    assert {a["status"] for a in store.actions()} == {"recommended"}  # nothing for the actuator to run
