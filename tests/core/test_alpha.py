"""Facts judged without the Rete (engine.core.alpha) against durable_rules itself: the same
firings (rule, matched fact), the same ``handled``, fact by fact; the set of facts that must enter
the Rete derived from the rulebook (a site correlation makes its facts enter again); the compiled
tests equal to the reference evaluator."""

from __future__ import annotations

import logging
from textwrap import dedent

import pytest

from engine.core.alpha import compile_test, may_accept
from engine.core.incidents import Engine
from engine.core.rete import ReteNetwork, fact_message
from engine.facts import Fact
from engine.rulebook import require_rulebook
from engine.rulebook.conditions import AllOf, AnyOf, Cmp, Same, evaluate
from engine.store import Store


def _mix(compiled) -> list[Fact]:
    """A log fact of every matcher from two ranks of one job attempt, a symptom of every name a
    rule derives, each from two nodes: what a failing job's lines and their symptoms look like."""
    out = []
    t = 100.0
    for m in compiled.matchers:
        for rank in (0, 1):
            attrs = {"matcher": m.id, "job": "7", "attempt": 0, "node": f"n{rank}", "rank": rank}
            out.append(Fact.make("log", attrs, t, f"l:{m.id}:{rank}"))
            t += 0.5
    names = sorted({str(cr.rule.then_attrs.get("name")) for cr in compiled.rules if cr.rule.then_kind == "symptom"})
    for name in names:
        for node in ("n0", "n1"):
            attrs = {"name": name, "job": "7", "attempt": 0, "node": node, "matcher": "x"}
            out.append(Fact.make("symptom", attrs, t, f"rule:{name}:{node}"))
            t += 0.5
    return out


def _firings(session, fact):
    return [
        (cr.rule.id, {a: {**m, "sid": ""} for a, m in matched.items()}) for cr, matched in session.assert_fact(fact)
    ]


def _other_facts() -> list[Fact]:
    """Facts of every other kind the sources emit, some with values the judge leaves to the Rete."""
    out = []
    for i, code in enumerate((13, 31, 43, 48, 63, 64, 74, 79, 92, 94, 95, 119, 999)):
        out.append(Fact.make("xid", {"code": code, "node": f"n{i % 3}", "job": "7", "attempt": 0}, 10.0 + i, f"k:{i}"))
    # numbers as text and as floats: durable_rules compares "79" > 173 otherwise than the reference
    for i, code in enumerate((79.0, "79", "79.0", 48.0, "abc", 1)):
        out.append(Fact.make("xid", {"code": code, "node": "n4", "job": "8", "attempt": 0}, 30.0 + i, f"k:t{i}"))
    out.append(Fact.make("node", {"node": "n1", "state": "down", "down": True, "drained": False}, 40.0, "s:1"))
    out.append(Fact.make("job", {"job": "7", "attempt": 0, "state": "FAILED", "exit_code": 1}, 41.0, "s:2"))
    out.append(Fact.make("log", {"matcher": "no_such_matcher", "job": "7", "attempt": 0}, 42.0, "l:9"))
    out.append(Fact.make("log", {"matcher": "cuda_oom_more", "job": "7", "attempt": 0, "flag": True}, 43.0, "l:10"))
    out.append(Fact.make("log_end", {"job": "7", "attempt": 0, "tail": "failure"}, 44.0, "l:11"))
    out.append(Fact.make("gpu_counter", {"node": "n1", "gpu": 0, "counter": "ecc_dbe", "delta": 2}, 45.0, "c:1"))
    return out


def test_judged_facts_fire_what_durable_rules_fires():
    compiled = require_rulebook()
    net = ReteNetwork(compiled)
    judged = 0
    for mix in (_mix(compiled), _other_facts()):
        ref, fast = net.session(), net.session(alpha=True)
        try:
            for fact in mix:
                assert _firings(fast, fact) == _firings(ref, fact), fact
                assert fast.handled == ref.handled, fact
        finally:
            judged += fast.judged
            ref.close()
            fast.close()
    # most lines of a failing job never reach durable_rules: each is read by one rule alone
    assert judged > len(compiled.matchers)


def test_a_fact_a_correlation_may_read_enters_the_rete():
    compiled = require_rulebook()
    alpha = ReteNetwork(compiled).alpha
    # f2_launcher_hangup lines are joined with the log's end (symptom.f2_terminated_no_cause_log_ends)
    joined = Fact.make("log", {"matcher": "f2_launcher_hangup", "job": "3", "attempt": 0}, 1.0, "l:1")
    alone = Fact.make("log", {"matcher": "cuda_oom_more", "job": "3", "attempt": 0}, 1.0, "l:2")
    assert alpha.correlated(fact_message(joined, "1"))
    assert alpha.judge(fact_message(joined, "1")) is None
    assert not alpha.correlated(fact_message(alone, "1"))
    assert alpha.judge(fact_message(alone, "1")) is not None
    # a value the two might judge apart goes to durable_rules
    odd = Fact.make("log", {"matcher": "cuda_oom_more", "job": "3", "attempt": 0, "flag": True}, 1.0, "l:3")
    assert alpha.judge(fact_message(odd, "1")) is None


SITE = """
rules:
  - id: site.oom_then_nan
    description: a CUDA OOM line and a NaN loss line in one job attempt
    when:
      - {as: a, kind: log, where: {matcher: cuda_oom_more}}
      - {as: b, kind: log, where: {matcher: nan_loss_detected}}
    join: [job, attempt]
    within: 600s
    then:
      symptom: {name: site_oom_then_nan, job: "{{ a.job }}", attempt: "{{ a.attempt }}"}
"""


def test_a_site_rule_that_correlates_a_fact_makes_it_enter_the_rete(tmp_path):
    """``cuda_oom_more`` is judged in Python with the shipped rules; a site file that correlates it
    makes it enter the Rete again (derived from the compiled rulebook), and the correlation fires."""
    shipped = ReteNetwork(require_rulebook())
    oom = Fact.make("log", {"matcher": "cuda_oom_more", "job": "5", "attempt": 0, "node": "n1"}, 100.0, "l:1")
    assert shipped.alpha.judge(fact_message(oom, "1")) is not None
    if not any(m.id == "nan_loss_detected" for m in require_rulebook().matchers):
        pytest.skip("the shipped rulebook has no nan_loss_detected matcher")  # pragma: no cover
    site = tmp_path / "site.yaml"
    site.write_text(dedent(SITE))
    compiled = require_rulebook([site])
    net = ReteNetwork(compiled)
    assert net.alpha.correlated(fact_message(oom, "1"))
    assert net.alpha.judge(fact_message(oom, "1")) is None
    nan = Fact.make("log", {"matcher": "nan_loss_detected", "job": "5", "attempt": 0, "node": "n2"}, 110.0, "l:2")
    logging.disable(logging.WARNING)
    try:
        eng = Engine(compiled, Store(":memory:"), network=net)
        eng.ingest(oom)
        eng.ingest(nan)
        names = {f.get("name") for f in (live.fact for live in eng.live.values()) if f.kind == "symptom"}
        eng.close()
    finally:
        logging.disable(logging.NOTSET)
    assert "site_oom_then_nan" in names


def _trees(compiled):
    for cr in compiled.rules:
        yield from cr.trees


def test_compiled_tests_equal_the_reference_evaluator():
    compiled = require_rulebook()
    msgs = [fact_message(f, "1") for f in _mix(compiled)[::7] + _other_facts()]
    msgs += [{"kind": "log", "matcher": "x", "exception": None}, {"kind": "symptom", "name": "nccl_timeout"}]
    extra = [
        AllOf((Cmp("a", "ne", "x"), Cmp("b", "gt", 2), Cmp("c", "exists", False))),
        AnyOf((Cmp("a", "in", ("x", 3)), Cmp("b", "not_in", (1,)), Same("a", "o", "a"))),
    ]
    msgs += [{"a": "x", "b": 3}, {"a": 3, "c": 1}, {"b": 1}, {"a": "y", "b": 2.5}]
    checked = 0
    for tree in [*_trees(compiled), *extra]:
        exact, may = compile_test(tree, False), compile_test(tree, True)
        for msg in msgs:
            assert exact(msg) == evaluate(tree, msg), (tree, msg)
            assert may(msg) == may_accept(tree, msg), (tree, msg)
            checked += 1
    assert checked > 5000
