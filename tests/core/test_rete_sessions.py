"""durable_rules keeps at most 1,024 sessions per ruleset and never frees one: the 1,025th
session's facts were refused and the process then crashed (SIGSEGV). Every engine of a replay, a
rules test, a corpus case or a controller's reload or store recovery takes a session, so closed
sessions hand their (emptied) sid on, and running out is a clear error."""

from __future__ import annotations

import uuid

import pytest

from engine.core.incidents import Engine
from engine.core.replay import Input, replay_inputs
from engine.core.rete import SESSION_LIMIT, ReteError, ReteNetwork
from engine.facts import Fact
from engine.rulebook import load_rulebook
from engine.store import Store


def _own_rulebook():
    """A rulebook whose ruleset no other test registers (a fresh matcher name in its join), so
    that this test's sessions are its own."""
    tag = "m" + uuid.uuid4().hex[:12]
    text = f"""
matchers:
  - {{id: {tag}_a, pattern: 'ALPHA (?P<n>\\d+)', types: {{n: int}}}}
  - {{id: {tag}_b, pattern: 'BETA (?P<n>\\d+)', types: {{n: int}}}}
rules:
  - id: s.{tag}
    description: an ALPHA then a BETA of the same job
    when:
      - {{as: a, kind: log, where: {{matcher: {tag}_a}}}}
      - {{as: b, kind: log, where: {{matcher: {tag}_b}}}}
    then: {{fault: {{fault_class: unknown, priority: 5}}}}
"""
    result = load_rulebook(defaults=False, overlays=[("own.yaml", text)])
    assert result.ok, result.errors
    return tag, result.compiled


def _fact(tag: str, which: str, job: str, at: float) -> Fact:
    return Fact.make("log", {"matcher": f"{tag}_{which}", "job": job, "attempt": 0}, at, f"t:{job}:{which}:{at}")


def test_closed_sessions_hand_on_their_sid_past_the_limit():
    tag, compiled = _own_rulebook()
    net = ReteNetwork(compiled)
    sids = set()
    for i in range(SESSION_LIMIT + 200):
        s = net.session()
        sids.add(s.sid)
        assert s.assert_fact(_fact(tag, "a", str(i), 1.0)) == []
        fired = s.assert_fact(_fact(tag, "b", str(i), 2.0))
        assert [cr.rule.id for cr, _ in fired] == [f"s.{tag}"], f"session {i} did not correlate"
        s.close()
    assert len(sids) == 1  # one sid, handed on each time


def test_a_handed_on_sid_holds_nothing_of_its_last_session():
    tag, compiled = _own_rulebook()
    net = ReteNetwork(compiled)
    first = net.session()
    first.assert_fact(_fact(tag, "a", "7", 1.0))  # half of a join, waiting
    first.close()
    second = net.session()
    assert second.sid == first.sid
    # the waiting ALPHA of the closed session must not complete the join
    assert second.assert_fact(_fact(tag, "b", "7", 2.0)) == []
    fired = second.assert_fact(_fact(tag, "a", "7", 3.0))
    assert [cr.rule.id for cr, _ in fired] == [f"s.{tag}"]
    second.close()


def test_running_out_of_sessions_is_a_clear_error_not_a_refused_fact():
    tag, compiled = _own_rulebook()
    net = ReteNetwork(compiled)
    held = [net.session() for _ in range(SESSION_LIMIT)]
    with pytest.raises(ReteError, match="sessions of one rulebook"):
        net.session()
    # the open ones still work, and closing one makes room
    fired = held[-1].assert_fact(_fact(tag, "a", "1", 1.0)) + held[-1].assert_fact(_fact(tag, "b", "1", 2.0))
    assert len(fired) == 1
    held[0].close()
    again = net.session()
    assert again.sid == held[0].sid


def test_an_engine_closed_hands_on_its_session_and_replay_closes_its_own():
    tag, compiled = _own_rulebook()
    net = ReteNetwork(compiled)
    eng = Engine(compiled, Store(":memory:"), network=net)
    eng.ingest(_fact(tag, "a", "3", 1.0))
    sid = eng.session.sid
    eng.finish()
    eng.close()
    eng.close()  # twice is harmless
    data = b"ALPHA 1\nBETA 2\n"
    for _ in range(SESSION_LIMIT + 50):  # more replays than the ruleset has sessions
        store = Store(":memory:")
        result = replay_inputs([Input("slurm-55.out", lambda: [data], "job")], compiled, store, network=net)
        assert [store.incident(i.id).fault_class for i in result.incidents] == ["unknown"]
        store.close()
    assert net.session().sid == sid
