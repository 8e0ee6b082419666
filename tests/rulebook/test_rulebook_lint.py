"""The linter: every silent no-op a site engineer can write gives a located error or warning.

One row per case: a site overlay (layered over the shipped rulebook), the code it must produce,
its severity and the line it must point at. A clean overlay must produce nothing, so each row can
fail."""

import time

import pytest

from engine.rulebook import load_rulebook

RULE = """rules:
  - id: site.r
    description: d
    when:
      - {{as: l, kind: log, where: {where}}}
    then:
      symptom: {{name: {symptom}, evidence: "{evidence}"}}
"""
FAULT = """  - id: site.f
    description: d
    when:
      - {{as: s, kind: symptom, where: {{name: {name}}}}}
    then:
      fault: {{fault_class: {fc}, reason: "{reason}"}}
"""


def rule(where="{matcher: nccl_watchdog_timeout}", symptom="site_thing", evidence="{{ l.text }}"):
    return RULE.format(where=where, symptom=symptom, evidence=evidence)


def fault(name="site_thing", fc="nccl_timeout", reason="{{ s.evidence }}"):
    return FAULT.format(name=name, fc=fc, reason=reason)


CASES = {
    # name: (overlay, code, severity, line)
    "where names a matcher that does not exist": (
        rule(where="{matcher: nccl_watchdog_timout}") + fault(),
        "E-REF",
        "error",
        5,
    ),
    "a list item names a misspelled matcher": (
        "lists:\n  site_matchers: [nccl_watchdog_timeout, ncc_ops_failed_or_timed_out]\n"
        + rule(where='{matcher: {in: "@site_matchers"}}')
        + fault(),
        "E-REF",
        "error",
        2,
    ),
    "a matcher no rule uses": (
        "matchers:\n  - {id: site_lonely, source: [job], pattern: 'lonely (?P<worker>\\d+)'}\n",
        "W-UNUSED",
        "warning",
        2,
    ),
    "a misspelled retry setting": ("policy:\n  retry: {max_per_fingreprint: 2}\n", "E-UNKNOWN-KEY", "error", 2),
    "a misspelled blast radius setting": ("policy:\n  blast_radius: {max_drain: 2}\n", "E-UNKNOWN-KEY", "error", 2),
    "a policy section nothing reads": ("policy:\n  throttle: {per_node: 1}\n", "E-UNKNOWN-KEY", "error", 2),
    "a guard setting of the wrong type": ("policy:\n  blast_radius: {max_fraction: lots}\n", "E-VALUE", "error", 2),
    "a template reads an attribute the matched fact never has": (
        rule(evidence="{{ l.worker }}") + fault(),
        "E-ATTR",
        "error",
        7,
    ),
    "a fault template reads a field no rule gives the symptom": (
        rule() + fault(reason="{{ s.worker }}"),
        "E-ATTR",
        "error",
        13,
    ),
    "a condition needs a symptom nothing derives": (rule() + fault(name="site_thnig"), "W-NEVER-FIRES", "warning", 11),
    "a condition tests an attribute the matcher never carries": (
        rule(where="{matcher: nccl_watchdog_timeout, worker: 3}") + fault(),
        "W-NEVER-FIRES",
        "warning",
        5,
    ),
    "a fault class nobody declared": (rule() + fault(fc="ib_link_flap"), "E-VALUE", "error", 13),
    "policy names an undeclared fault class": ("policy:\n  decisions: {ib_link_flap: stop}\n", "E-VALUE", "error", 2),
    "a test expects a rule that does not exist": (
        "tests:\n  - name: t\n    input: [{lines: x}]\n    expect: [{fault_class: unknown, rules: [fault.nope]}]\n",
        "E-REF",
        "error",
        2,
    ),
    "a misspelled key in a fault class": (
        "fault_classes:\n  ib_link_flap: {description: d, decision: restart, priority: 10, retries: 2}\n",
        "E-UNKNOWN-KEY",
        "error",
        2,
    ),
    "a misspelled key in a test expectation": (
        "tests:\n  - name: t\n    input: [{lines: x}]\n    expect: [{fault_clas: unknown}]\n",
        "E-UNKNOWN-KEY",
        "error",
        4,
    ),
    "an action names a verification that does not exist": (
        "actions:\n  drain: {override: true, verify: node_draind}\n",
        "E-REF",
        "error",
        2,
    ),
    "a rule waits for a progress fact, which never reaches rules": (
        "rules:\n  - id: site.p\n    description: d\n    when:\n      - {kind: progress}\n"
        "    then: {symptom: {name: site_progress}}\n",
        "W-NEVER-FIRES",
        "warning",
        5,
    ),
    "a site root cause ranked below the NCCL cascade it causes": (
        "fault_classes:\n  ib_link_flap: {description: d, decision: restart, priority: 20}\n"
        + rule()
        + fault(fc="ib_link_flap"),
        "W-PRIORITY",
        "warning",
        2,
    ),
    "a shared outage window longer than the settle window": (
        "policy:\n  settle: 30s\n  shared_outage: {window: 5m}\n",
        "W-OUTAGE-WINDOW",
        "warning",
        3,
    ),
    "a rule that needs a condition of a disabled matcher": (
        "matchers:\n  - {id: nccl_watchdog_timeout, override: true, enabled: false}\n" + rule() + fault(),
        "W-NEVER-FIRES",
        "warning",
        7,
    ),
}


def _load(tmp_path, text):
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return load_rulebook([path], tests=True)  # (what `recover rules check` reads: tests included)


@pytest.mark.parametrize("name", list(CASES))
def test_each_silent_no_op_is_reported_where_it_is_written(tmp_path, name):
    text, code, severity, line = CASES[name]
    result = _load(tmp_path, text)
    hits = [d for d in result.diagnostics if d.code == code and d.mark.file.endswith("site.yaml")]
    assert hits, [str(d) for d in result.diagnostics]
    assert hits[0].severity == severity
    assert hits[0].mark.line == line, [str(d) for d in hits]
    assert result.ok == (severity == "warning"), [str(d) for d in result.errors]


def test_a_correct_overlay_is_clean(tmp_path):
    result = _load(
        tmp_path, rule() + fault() + "policy:\n  retry: {max_per_fingerprint: 2}\n  blast_radius: {max_drains: 2}\n"
    )
    assert result.ok and list(result.diagnostics) == []


def test_a_guarded_attribute_is_not_an_error(tmp_path):
    result = _load(tmp_path, rule(evidence="{{ l.worker | default('') }}") + fault())
    assert result.ok and list(result.diagnostics) == []


def test_the_shipped_rulebook_is_clean_under_strict():
    result = load_rulebook([])
    assert result.ok
    assert [str(d) for d in result.diagnostics] == []


def test_an_alias_bomb_is_refused_at_once_with_its_position(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 13):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    started = time.perf_counter()
    result = load_rulebook([path], defaults=False)  # the time of the bomb, not of the shipped rulebook
    elapsed = time.perf_counter() - started
    bomb = [d for d in result.errors if d.code == "E-YAML" and "alias" in d.message]
    assert bomb and bomb[0].mark.line == 6, [str(d) for d in result.diagnostics]  # a5: 9**6 > 200,000 nodes
    # refused before it is expanded: expanded, its 9**13 nodes would take hours, not seconds (how
    # fast the refusal is, is no business of a test on a loaded machine)
    assert elapsed < 30.0, elapsed


def test_modest_aliases_still_work(tmp_path):
    text = "lists:\n  a: &xs [1, 2]\nrules: []\n"
    result = _load(tmp_path, text + "matchers: []\n")
    assert not [d for d in result.errors if d.code == "E-YAML"]


def test_strict_turns_warnings_into_a_failed_check(tmp_path):
    from typer.testing import CliRunner

    from engine.cli import app

    path = tmp_path / "site.yaml"
    path.write_text(CASES["a matcher no rule uses"][0])
    runner = CliRunner()
    plain = runner.invoke(app, ["rules", "check", str(path)])
    strict = runner.invoke(app, ["rules", "check", "--strict", str(path)])
    assert plain.exit_code == 0 and "W-UNUSED" in plain.output
    assert strict.exit_code == 1 and "W-UNUSED" in strict.output
    assert runner.invoke(app, ["rules", "check", "--strict"]).exit_code == 0  # the shipped rulebook
