"""durable_rules 2.0.28: two rulesets in one process, and the second one's join crashes the
process (SIGSEGV in reduceExpressionSequence <- isBetaMatch <- assertFact).

Found by tests/core/test_rete_differential.py (random joins; about 1 run in 6 crashed; the test
now runs a fixed example set). Minimised from the C calls of a crashing run: the first ruleset
is never asserted to, only registered; without it the same facts run cleanly. The outcome
depends on the process's allocations (renaming a rule changes it), so this is a reproducer on
this build, not a proof. Exit status -11 (139 from a shell) is the crash.

    python scripts/repro/durable_two_rulesets.py; echo $?
"""

import durable_rules_engine as C

FIRST = '{"a0": {"all": [{"x": {"$and": [{"kind": "log"}, {"$ex": {"node": 1}}, {"$ex": {"job": 1}}, {"$ex": {"c": 1}}]}}, {"y": {"$and": [{"kind": "xid"}, {"node": {"x": "node"}}, {"job": {"x": "job"}}, {"$lte": {"at": {"$add": {"$l": {"x": "at"}, "$r": 2.0}}}}, {"$gte": {"at": {"$sub": {"$l": {"x": "at"}, "$r": 2.0}}}}, {"$ex": {"node": 1}}, {"$ex": {"job": 1}}, {"$or": [{"$and": [{"$or": [{"b": "z"}, {"b": "z"}]}, {"$or": [{"$nex": {"a": 1}}, {"$and": [{"$neq": {"a": "z"}}, {"$neq": {"a": true}}, {"$neq": {"a": -3}}]}]}, {"$gt": {"b": 2}}]}, {"$or": [{"b": "x"}, {"b": true}]}, {"$or": [{"b": "x"}, {"b": true}]}]}]}}]}}'
SECOND = '{"r0": {"all": [{"x": {"$and": [{"kind": "log"}, {"$or": [{"$or": [{"$nex": {"a": 1}}, {"$neq": {"a": 2}}]}, {"b": "x"}, {"$or": [{"$nex": {"a": 1}}, {"$neq": {"a": false}}]}]}]}}, {"y": {"$and": [{"kind": "xid"}, {"$lte": {"at": {"$add": {"$l": {"x": "at"}, "$r": 2.0}}}}, {"$gte": {"at": {"$sub": {"$l": {"x": "at"}, "$r": 2.0}}}}, {"$nex": {"c": 1}}]}}]}}'
FACTS = [
    '{"job": "9", "id": "a6a4bea537d2ca9e7c47", "sid": "1", "kind": "xid", "at": 0.0}',
    '{"node": "n1", "job": "3", "b": -2, "attempt": 1, "a": "y", "id": "c972199e0b179568472e", "sid": "1", "kind": "xid", "at": 1.0}',
    '{"id": "b2f99d695be4df1043c7", "sid": "1", "kind": "xid", "at": 2.0}',
    '{"a": 0, "b": false, "node": "n5", "id": "d28ade3eafeaf9dc4fa4", "sid": "1", "kind": "xid", "at": 3.0}',
    '{"id": "7be497048ecd57983940", "sid": "1", "kind": "log", "at": 4.0}',
]

C.create_ruleset("a", FIRST)
handle = C.create_ruleset("b", SECOND)
for fact in FACTS:
    try:
        result = C.assert_fact(handle, fact)
        if result and result[0] == 0:
            C.start_action_for_state(handle, result[1])
    except Exception:  # not handled / observed: as the engine's own host does
        pass
print("no crash this time")
