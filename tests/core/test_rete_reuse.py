"""Which rulebook edits compile to a durable_rules ruleset this process already holds (reused: a
reload swaps engines in place) and which to a new one (a second ruleset in one process crashes
durable_rules 2.0.28, so the controller restarts to load it). Only the rules' conditions go
into the ruleset: matchers, what a rule derives, actions and policy do not."""

from __future__ import annotations

import pytest

from engine.core.rete import ReteNetwork, is_registered
from tests.helpers import fresh_rules, with_rule

NEW_RULE = """
  - id: s.other
    description: another
    when: [{as: e, kind: log, where: {matcher: evt, n: other}}]
    then: {symptom: {name: other}}
"""


@pytest.mark.parametrize(
    "edit, new_ruleset",
    [
        (lambda t: t + "# a comment\n", False),
        (lambda t: t.replace("'EVT (?P<n>", "'EVENT (?P<n>"), False),  # a matcher's pattern
        (lambda t: t.replace("matchers:\n", "matchers:\n  - {id: more, pattern: 'MORE'}\n"), False),
        (lambda t: t.replace("description: an event line", "description: edited"), False),
        (lambda t: t.replace("{symptom: {name: evt}}", "{symptom: {name: evt, severity: warning}}"), False),
        (lambda t: t.replace("settle: 1s", "settle: 9s"), False),
        (lambda t: t.replace("matcher: evt, n:", "matcher: evt, text:"), True),  # a condition
        (lambda t: with_rule(t, NEW_RULE), True),
    ],
    ids=["comment", "pattern", "new-matcher", "description", "then", "policy", "condition", "new-rule"],
)
def test_only_a_change_of_conditions_needs_a_new_ruleset(write_rules, edit, new_ruleset):
    base = fresh_rules()
    first = write_rules(base)
    assert first.ok, first.errors
    assert not is_registered(first.compiled)
    assert not ReteNetwork(first.compiled).reused
    assert is_registered(first.compiled)
    edited = write_rules(edit(base))
    assert edited.ok, edited.errors
    assert is_registered(edited.compiled) is not new_ruleset
    if not new_ruleset:  # registering nothing new (a new one is never registered here: see above)
        assert ReteNetwork(edited.compiled).reused
