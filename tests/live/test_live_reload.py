"""recover run: a reload whose rules need a new durable_rules ruleset restarts the controller in
place (same pid, nothing read twice or lost, open incidents carried on); one that durable_rules
refuses is rejected and the running process kept; one that keeps the rules' conditions swaps
in place without a restart."""

from __future__ import annotations

import re
import signal

from engine.live.launch import READY

from .conftest import RULES, append, assert_exactly_once, evts, wait_for

RESTART = "rulebook changed: restarting in place to load it"
NEW_MATCHER = "  - {id: new, pattern: 'NEW (?P<n>\\d+)', types: {n: int}}\n"
NEW_RULE = (
    "  - {id: s.new, description: new, when: [{as: e, kind: log, where: {matcher: new}}], "
    "then: {symptom: {name: new}}}\n"
)
#: valid to Recover, refused by durable_rules ("Could not create ruleset, error code: 202")
REFUSED_RULE = (
    "  - {id: s.never, description: never, when: [{as: e, kind: log, where: {matcher: evt, n: {gt: .inf}}}], "
    "then: {symptom: {name: never}}}\n"
)


def _base(live, settle: str = "1s") -> str:
    text = RULES.replace("MARKER", str(live.markers)).replace("settle: 1s", f"settle: {settle}")
    live.rules.write_text(text)
    return text


def _add(text: str, matcher: str = "", rule: str = "") -> str:
    return text.replace("matchers:\n", "matchers:\n" + matcher, 1).replace("rules:\n", "rules:\n" + rule, 1)


def _new_facts(live) -> list[int]:
    return sorted(a["n"] for a, _, _ in live.log_facts() if a.get("matcher") == "new")


def test_new_rules_restart_in_place_and_lose_or_repeat_nothing(live):
    base = _base(live, settle="120s")  # the incident stays open across the restart
    live.start(metrics=True)
    pid = live.proc.pid
    log = live.logs / "slurm-211.out"
    append(log, evts(0, 20))
    live.wait_evts(set(range(20)))
    [(incident, status)] = live.query("SELECT id, status FROM incidents")
    assert status == "open"
    live.rules.write_text(_add(base, NEW_MATCHER, NEW_RULE))  # noticed by itself (SIGHUP: test_live_control)
    append(log, evts(20, 200))  # while it restarts: read by one process or the other, once
    live.wait_reloaded()
    append(log, "NEW 7\n" + evts(200, 220))
    wait_for(lambda: _new_facts(live), 30, what="the new rule to fire")
    live.wait_evts(set(range(220)))
    marks = live.drain(log)
    assert _new_facts(live) == [7]
    assert_exactly_once(live.evt_numbers(), set(range(220)) | marks)
    out = live.output()
    said = re.search(re.escape(RESTART) + r" \(pid (\d+) kept\)", out)
    assert said and int(said.group(1)) == pid, out[-3000:]
    assert live.alive() and live.proc.pid == pid  # the process started here never exited
    assert out.count(READY) == 2 and out.count("recover run: stopping") == 1
    assert said.start() < out.index("recover run: stopping") < out.rindex(READY) < out.index("rulebook reloaded")
    assert "rulebook reloaded: 6 rules, 3 matchers" in out
    assert live.metric("recover_rulebook_reloads_total", result="ok") == 1  # counted once, by the new process
    # the incident open before the restart is the one the later lines joined; it is still open
    assert live.query("SELECT id, status FROM incidents") == [(incident, "open")]
    joined = {a["n"] for a, _, _ in live.log_facts() if a.get("matcher") == "evt"}
    assert live.query("SELECT DISTINCT incident FROM facts") == [(incident,)] and {0, 219} <= joined
    live.signal(signal.SIGHUP)  # the same rules again: swapped in place, no second restart
    live.wait_reloaded(2)
    assert live.output().count(RESTART) == 1 and live.alive()
    assert live.stop() < 5


def test_rules_durable_rules_refuses_are_rejected_and_the_process_kept(live):
    base = _base(live)
    live.start(metrics=True)
    log = live.logs / "slurm-212.out"
    append(log, evts(0, 3))
    live.wait_evts({0, 1, 2})
    live.rules.write_text(_add(base, NEW_MATCHER, REFUSED_RULE + NEW_RULE))
    wait_for(lambda: "rulebook reload rejected" in live.output(), 30, what="the rejection")
    out = live.output()
    assert "the rule engine refused it (tried in a child process): durable_rules refused the ruleset" in out, out[
        -3000:
    ]
    assert RESTART not in out and out.count(READY) == 1 and live.alive()
    # (counted after its line is logged)
    wait_for(lambda: live.metric("recover_rulebook_reloads_total", result="rejected") == 1, 10, what="the count")
    assert live.metric("recover_rulebook_reloads_total", result="ok") == 0
    append(log, "NEW 1\n" + evts(3, 6))  # the old rulebook still runs: no `new` matcher
    live.wait_evts(set(range(6)))  # read after the NEW line before them
    marks = live.drain(log)
    assert _new_facts(live) == []
    assert_exactly_once(live.evt_numbers(), set(range(6)) | marks)


def test_a_comment_or_a_matcher_edit_reloads_without_a_restart(live):
    base = _base(live)
    live.start(metrics=True)
    log = live.logs / "slurm-213.out"
    append(log, evts(0, 2))
    live.wait_evts({0, 1})
    live.rules.write_text(base + "# a comment\n")
    live.wait_reloaded(1)
    # a matcher's pattern: its facts change, the rules' conditions do not
    live.rules.write_text(base.replace("pattern: 'EVT (?P<n>", "pattern: '(?:EVT|EVENT) (?P<n>"))
    live.wait_reloaded(2)
    append(log, evts(2, 4) + evts(4, 6).replace("EVT", "EVENT"))
    live.wait_evts(set(range(6)))
    marks = live.drain(log)
    assert_exactly_once(live.evt_numbers(), set(range(6)) | marks)
    out = live.output()
    assert RESTART not in out and out.count(READY) == 1 and "recover run: stopping" not in out
    assert live.metric("recover_rulebook_reloads_total", result="ok") == 2 and live.alive()
