"""Runs a rulebook's embedded tests: each feeds log lines (and facts) through the real pipeline
(scanner, converter, engine, store in memory) and compares the incidents with what it expects.

An expectation matches one incident; every expectation must match a distinct incident and no
incident may be left over, so ``expect: []`` means "nothing must fire".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .facts import Fact
from .rete import ReteNetwork
from .replay import Input, replay_inputs
from .rulebook.compile import CompiledRulebook
from .rulebook.model import RuleTest
from .store import Store

__all__ = ["run_tests", "TestOutcome"]


@dataclass
class TestOutcome:
    test: RuleTest
    passed: bool
    problems: list[str] = field(default_factory=list)
    incidents: list[dict[str, Any]] = field(default_factory=list)


def _incident_summary(store: Store, closed) -> dict[str, Any]:
    row = store.incident(closed.id)
    return {
        "id": closed.id,
        "job": row.job,
        "attempt": row.attempt,
        "fault_class": row.fault_class,
        "decision": row.decision,
        "nodes": sorted(row.nodes),
        "rules": store.rules_fired(closed.id),
        "commands": [list(p.argv) for p in closed.plan],
    }


def _mismatch(expect: Mapping[str, Any], got: Mapping[str, Any]) -> list[str]:
    out = []
    for key in ("fault_class", "decision", "job", "attempt"):
        if key in expect and str(expect[key]) != str(got[key]):
            out.append(f"{key}: expected {expect[key]!r}, got {got[key]!r}")
    if "nodes" in expect and sorted(expect["nodes"]) != got["nodes"]:
        out.append(f"nodes: expected {sorted(expect['nodes'])}, got {got['nodes']}")
    for r in expect.get("rules", ()):
        if r not in got["rules"]:
            out.append(f"rule {r} did not fire (fired: {', '.join(got['rules']) or 'none'})")
    for r in expect.get("not_rules", ()):
        if r in got["rules"]:
            out.append(f"rule {r} fired but must not")
    for cmd in expect.get("commands", ()):
        if list(cmd) not in got["commands"]:
            out.append(f"command {list(cmd)} not planned (planned: {got['commands']})")
    return out


def run_one(compiled: CompiledRulebook, test: RuleTest, network: ReteNetwork) -> TestOutcome:
    store = Store(":memory:")
    inputs = [Input(i.file, (lambda b=i.lines.encode("utf-8"): [b]), i.source) for i in test.inputs]
    ctx = dict(test.context)
    facts = []
    try:
        for raw in test.facts:
            facts.append(Fact.make(raw.get("kind", "log"), dict(raw.get("attrs", {})), float(raw.get("at", 0)),
                                   f"test:{test.name}"))
        nodes = ctx.get("nodes") or ()
        result = replay_inputs(inputs, compiled, store, job=ctx.get("job"), attempt=ctx.get("attempt"),
                               nodes=list(nodes), extra_facts=facts, network=network)
    except Exception as exc:  # a test that crashes the pipeline is a failed test, with the reason
        return TestOutcome(test, False, [f"pipeline error: {type(exc).__name__}: {exc}"])
    got = [_incident_summary(store, c) for c in result.incidents]
    store.close()
    problems: list[str] = []
    remaining = list(got)
    for n, expect in enumerate(test.expect, 1):
        best = None
        best_problems: list[str] | None = None
        for cand in remaining:
            p = _mismatch(expect, cand)
            if best_problems is None or len(p) < len(best_problems):
                best, best_problems = cand, p
        if best is None:
            problems.append(f"expectation {n} ({expect.get('fault_class', '?')}): no incident")
            continue
        if best_problems:
            problems.extend(f"expectation {n}: {p}" for p in best_problems)
        remaining.remove(best)
    for extra in remaining:
        problems.append(f"unexpected incident: {extra['fault_class']} / {extra['decision']} nodes={extra['nodes']} "
                        f"rules={extra['rules']}")
    return TestOutcome(test, not problems, problems, got)


def run_tests(compiled: CompiledRulebook, names: Sequence[str] | None = None) -> list[TestOutcome]:
    network = ReteNetwork(compiled)
    tests = [t for t in compiled.book.tests if names is None or t.name in names]
    return [run_one(compiled, t, network) for t in tests]
