"""Runs a rulebook's embedded tests: each feeds log lines (and facts) through the real pipeline
(scanner, converter, engine, store in memory) and compares the incidents with what it expects.

An expectation matches one incident; every expectation must match a distinct incident and no
incident may be left over, so ``expect: []`` means "nothing must fire". A rule whose template or
derived fact fails while a test runs fails that test, naming the rule's file:line (the engine
itself only logs such errors and goes on).

A matcher that no test line hits can be silently broken (a wrong escape, a wording that changed):
``run_tests`` records which matchers the tests' lines hit, and ``unexercised_matchers`` names the
others.

Usage::

    tests = select_tests(compiled, ["nccl", "^Xid 79"], only_files={"site/ib.yaml"})
    seen: set[str] = set()
    outcomes = run_tests(compiled, tests=tests, seen=seen)
    junit_xml(outcomes)                     # for CI
    unexercised_matchers(compiled, seen)    # ["site_flap_line", ...]: no test line hit them
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence
from xml.sax.saxutils import quoteattr

from engine.clock import SYSTEM
from engine.facts import Fact
from engine.core.linetime import LineClock, log_zone
from engine.core.rete import ReteNetwork
from engine.core.replay import Input, replay_inputs
from engine.rulebook.compile import CompiledRulebook
from engine.rulebook.model import RuleTest
from engine.store import Store

__all__ = ["run_tests", "TestOutcome", "select_tests", "junit_xml", "outcome_json", "unexercised_matchers"]

#: the matchers whose hits are the rules' evidence; progress lines are sampled and aggregated before
#: the rules see them, and context lines (job id, nodelist) emit no fact
EVIDENCE_EMITS = frozenset({"log", "xid"})


@dataclass
class TestOutcome:
    test: RuleTest
    passed: bool
    problems: list[str] = field(default_factory=list)
    incidents: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    #: "FILE:LINE" of the input lines that gave a fact but carry no time of their own: they are
    #: dated by the line before them (or not at all), which a test should say on purpose
    undated: list[str] = field(default_factory=list)


class _RuleErrors(logging.Handler):
    """Collects what the engine logs when a rule's template or derived fact fails."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.errors: list[tuple[str, str]] = []  # (rule id, message)

    def emit(self, record: logging.LogRecord) -> None:
        msg = str(record.msg)
        if msg.startswith("rule %s") and record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            self.errors.append((str(args[0]), record.getMessage()))
        elif msg.startswith("rule engine refused"):
            self.errors.append(("", record.getMessage()))


def _incident_summary(store: Store, closed) -> dict[str, Any]:
    row = store.require_incident(closed.id)
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


def run_one(
    compiled: CompiledRulebook, test: RuleTest, network: ReteNetwork, seen: set[str] | None = None
) -> TestOutcome:
    """Runs one test; adds to ``seen`` the id of every matcher that one of its lines hit."""
    started = SYSTEM.monotonic()
    handler = _RuleErrors()
    engine_log = logging.getLogger("engine")
    engine_log.addHandler(handler)
    # the engine reports a rule that fails at run time as a WARNING: a process whose logging is
    # set quieter (the demo sets the root logger to ERROR) must not turn that failure into a pass
    level = engine_log.level
    if engine_log.getEffectiveLevel() > logging.WARNING:
        engine_log.setLevel(logging.WARNING)
    try:
        outcome = _run_one(compiled, test, network, seen)
    finally:
        engine_log.removeHandler(handler)
        engine_log.setLevel(level)
    for rule_id, message in handler.errors:
        r = compiled.book.rule(rule_id)
        where = f" ({r.mark})" if r is not None else ""
        message = message.removeprefix(f"rule {rule_id}: ").removeprefix(f"rule {rule_id} ")
        outcome.problems.append(
            f"runtime error in rule {rule_id}{where}: {message}" if rule_id else f"runtime error: {message}"
        )
        outcome.passed = False
    outcome.seconds = SYSTEM.monotonic() - started
    return outcome


def _chunks(data: bytes) -> Callable[[], list[bytes]]:
    """A test input's text as the one chunk a replayed stream reads."""
    return lambda: [data]


def _run_one(compiled: CompiledRulebook, test: RuleTest, network: ReteNetwork, seen: set[str] | None) -> TestOutcome:
    store = Store(":memory:")
    inputs = [Input(i.file, _chunks(i.lines.encode("utf-8")), i.source) for i in test.inputs]
    # a stamp without a year is put in the latest year that is not after today (as a file is
    # placed by its mtime in replay): the lines of a test are in the past of whoever runs it
    today = SYSTEM.wall()
    origins: set[str] = set()
    ctx = dict(test.context)
    facts = []
    try:
        for raw in test.facts:
            facts.append(
                Fact.make(
                    raw.get("kind", "log"), dict(raw.get("attrs", {})), float(raw.get("at", 0)), f"test:{test.name}"
                )
            )
        nodes = ctx.get("nodes") or ()
        result = replay_inputs(
            inputs,
            compiled,
            store,
            job=ctx.get("job"),
            attempt=ctx.get("attempt"),
            nodes=list(nodes),
            extra_facts=facts,
            network=network,
            on_fact=_recorder(seen, facts, origins),
            not_after=today,
        )
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
        problems.append(
            f"unexpected incident: {extra['fault_class']} / {extra['decision']} nodes={extra['nodes']} "
            f"rules={extra['rules']}"
        )
    return TestOutcome(test, not problems, problems, got, undated=_undated(compiled, test, origins, today))


def _recorder(seen: set[str] | None, given: Sequence[Fact], origins: set[str]) -> Callable[[Fact], None]:
    """An ``on_fact`` for replay that adds to ``seen`` the matcher of every fact a line produced
    (a test's own facts may name a matcher without any line hitting it: they do not count), and
    to ``origins`` where each such fact was read."""
    own = {id(f) for f in given}

    def record(fact: Fact) -> None:
        if id(fact) in own:
            return
        origins.add(fact.origin)
        if seen is not None and "matcher" in fact.attrs:
            seen.add(str(fact.attrs["matcher"]))

    return record


def _undated(compiled: CompiledRulebook, test: RuleTest, origins: set[str], today: float) -> list[str]:
    """The lines of the test's inputs that gave a fact and have no time of their own, read in
    order with the same clock replay reads them with (linetime.py)."""
    out: list[str] = []
    zone = log_zone(compiled.policy.log_timezone)
    for inp in test.inputs:
        dates = LineClock(zone=zone, not_after=today)
        for n, line in enumerate(inp.lines.split("\n"), 1):
            if dates.time(line) is None and f"{inp.file}:{n}" in origins:
                out.append(f"{inp.file}:{n}")
    return out


def select_tests(
    compiled: CompiledRulebook, patterns: Sequence[str] = (), only_files: Iterable[str] | None = None
) -> list[RuleTest]:
    """The tests whose name contains any of ``patterns`` or matches it as a regex (all when
    none), among those written in ``only_files`` when given."""
    files = set(only_files) if only_files is not None else None
    regexes: list[re.Pattern[str] | None] = []
    for p in patterns:
        try:
            regexes.append(re.compile(p, re.IGNORECASE))
        except re.error:
            regexes.append(None)

    def chosen(t: RuleTest) -> bool:
        if files is not None and t.mark.file not in files:
            return False
        if not patterns:
            return True
        return any(
            p.lower() in t.name.lower() or (rx is not None and rx.search(t.name)) for p, rx in zip(patterns, regexes)
        )

    return [t for t in compiled.book.tests if chosen(t)]


def run_tests(
    compiled: CompiledRulebook,
    names: Sequence[str] | None = None,
    tests: Sequence[RuleTest] | None = None,
    seen: set[str] | None = None,
) -> list[TestOutcome]:
    """Runs the tests (all, or those named, or ``tests``); ``seen`` collects the matchers their lines hit."""
    network = ReteNetwork(compiled)
    if tests is None:
        tests = [t for t in compiled.book.tests if names is None or t.name in names]
    return [run_one(compiled, t, network, seen) for t in tests]


def unexercised_matchers(
    compiled: CompiledRulebook, seen: Iterable[str], only_files: Iterable[str] | None = None
) -> list[str]:
    """The enabled evidence matchers (``EVIDENCE_EMITS``) that no test line hit, in rulebook order;
    only those written in ``only_files`` when given."""
    hit = set(seen)
    files = set(only_files) if only_files is not None else None
    return [
        m.id
        for m in compiled.matchers
        if m.enabled and m.emit in EVIDENCE_EMITS and m.id not in hit and (files is None or m.mark.file in files)
    ]


def outcome_json(o: TestOutcome) -> dict[str, Any]:
    return {
        "name": o.test.name,
        "file": o.test.mark.file,
        "line": o.test.mark.line,
        "passed": o.passed,
        "problems": list(o.problems),
        "undated_lines": list(o.undated),
        "seconds": round(o.seconds, 4),
    }


def junit_xml(
    outcomes: Sequence[TestOutcome], disabled: Mapping[str, Any] | None = None, suite: str = "recover rules test"
) -> str:
    """JUnit XML, as CI systems read it: one testcase per rule test, classname = its file."""
    failures = sum(1 for o in outcomes if not o.passed)
    skipped = len(disabled or {})
    total = sum(o.seconds for o in outcomes)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuites tests="{len(outcomes) + skipped}" failures="{failures}" time="{total:.3f}">',
        f'  <testsuite name={quoteattr(suite)} tests="{len(outcomes) + skipped}" failures="{failures}" errors="0" '
        f'skipped="{skipped}" time="{total:.3f}">',
    ]
    for o in outcomes:
        attrs = (
            f"classname={quoteattr(o.test.mark.file)} name={quoteattr(o.test.name)} file={quoteattr(o.test.mark.file)} "
            f'line="{o.test.mark.line}" time="{o.seconds:.3f}"'
        )
        if o.passed:
            out.append(f"    <testcase {attrs}/>")
        else:
            text = "\n".join(o.problems)
            out.append(f"    <testcase {attrs}>")
            out.append(
                f"      <failure message={quoteattr(o.problems[0] if o.problems else 'failed')}>{_xml_text(text)}</failure>"
            )
            out.append("    </testcase>")
    for name, mark in (disabled or {}).items():
        out.append(
            f"    <testcase classname={quoteattr(str(getattr(mark, 'file', '')))} name={quoteattr(name)}>"
            f"<skipped message={quoteattr(f'disabled at {mark}')}/></testcase>"
        )
    out.append("  </testsuite>")
    out.append("</testsuites>")
    return "\n".join(out) + "\n"


def _xml_text(text: str) -> str:
    text = "".join(c for c in text if c in "\t\n" or ord(c) >= 0x20)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
