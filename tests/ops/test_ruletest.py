"""`recover rules test` as CI uses it: selection like pytest's -k, an empty selection fails, a rule
that breaks at run time fails its test with the rule's file:line, site-only runs, superseded and
disabled shipped tests, JUnit and JSON output."""

import json
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from engine.cli import app

SITE = """
fault_classes:
  site_flap: {description: a flap, decision: restart, priority: 60}
matchers:
  - {id: site_a, source: [job], pattern: 'SITE-A worker (?P<worker>\\d+) died'}
  - {id: site_b, source: [job], pattern: 'SITE-B died'}
rules:
  - id: site.fault
    description: either line is a flap; only SITE-A says which worker
    when: [{as: l, kind: log, where: {matcher: {in: [site_a, site_b]}}}]
    then: {fault: {fault_class: site_flap, reason: "worker {{ l.worker }} died"}}
tests:
  - name: site - worker line
    input: [{file: slurm-7.out, source: job, lines: "SITE-A worker 3 died\\n"}]
    expect: [{fault_class: site_flap}]
  - name: site - anonymous line
    input: [{file: slurm-8.out, source: job, lines: "SITE-B died\\n"}]
    expect: [{fault_class: site_flap}]
  - name: Xid 63 alone (a row remap recorded) does not isolate
    override: true
    enabled: false
"""


@pytest.fixture
def site(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(SITE)
    return str(path)


def run(*args):
    return CliRunner().invoke(app, ["rules", "test", *args])


def test_a_template_that_fails_at_run_time_fails_the_test_with_the_rules_position(site):
    check = CliRunner().invoke(app, ["rules", "check", site])
    assert check.exit_code == 0 and "W-ATTR" in check.output  # check warns; only the run can tell
    result = run(site, "--site-only")
    assert result.exit_code == 1, result.output
    assert "FAIL site - anonymous line" in result.output
    assert "runtime error in rule site.fault (" in result.output and "site.yaml:8:5)" in result.output
    assert "FAIL site - worker line" not in result.output
    assert "1 passed, 1 failed, 1 disabled" in result.output


@pytest.mark.parametrize(
    "expr,selected",
    [
        ("worker", ["site - worker line"]),  # a substring
        ("WORKER", ["site - worker line"]),  # case-insensitive
        ("^site - (worker|anonymous)", ["site - worker line", "site - anonymous line"]),  # a regex
        ("line$", ["site - worker line", "site - anonymous line"]),
    ],
)
def test_k_takes_a_substring_or_a_regex(site, expr, selected):
    result = run(site, "--site-only", "-k", expr, "--json")
    names = [json.loads(line)["name"] for line in result.stdout.splitlines() if '"problems"' in line]
    assert sorted(names) == sorted(selected)


def test_selecting_nothing_fails(site):
    result = run(site, "-k", "no such test")
    assert result.exit_code == 1 and "no test selected" in result.output
    assert run(site, "--no-defaults", "--site-only", "-k", "Xid 63").exit_code == 1  # disabled: nothing left


def test_site_only_runs_only_the_given_files(site):
    result = run(site, "--site-only", "--json")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["file"] for r in rows[:-1]} == {site}
    assert rows[-1]["selected"] == 2 and rows[-1]["disabled"] == [
        "Xid 63 alone (a row remap recorded) does not isolate"
    ]


def test_junit_output(site, tmp_path):
    out = tmp_path / "junit.xml"
    run(site, "--site-only", "--junit", str(out))
    suite = ET.parse(out).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    failed = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["site - anonymous line"]
    assert "site.yaml:8:5" in failed[0].find("failure").text


def test_rules_show_says_which_shipped_test_is_disabled_or_superseded(site, tmp_path):
    sup = tmp_path / "sup.yaml"
    sup.write_text(
        "tests:\n  - name: PCIe replays above budget only warn\n    override: true\n    facts: []\n    expect: []\n"
    )
    result = CliRunner().invoke(
        app, ["rules", "show", "--rules", site, "--rules", str(sup), "--section", "tests", "--json"]
    )
    tests = {t["name"]: t for t in json.loads(result.stdout)["tests"]}
    disabled = tests["Xid 63 alone (a row remap recorded) does not isolate"]
    assert disabled["enabled"] is False and disabled["overridden_by"][-1].endswith("site.yaml:19:5")
    superseded = tests["PCIe replays above budget only warn"]
    assert superseded["enabled"] is True and superseded["defined_at"].startswith("rules/")
    assert superseded["overridden_by"] == [f"{sup}:2:5"]


def test_a_test_of_the_same_name_without_override_is_a_duplicate(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("tests:\n  - name: PCIe replays above budget only warn\n    facts: []\n    expect: []\n")
    result = CliRunner().invoke(app, ["rules", "check", str(path)])
    assert result.exit_code == 1 and "E-DUP-ID" in result.output and "override: true" in result.output


UNDATED = """
fault_classes:
  site_flap: {description: a flap, decision: restart, priority: 60}
matchers:
  - {id: site_a, source: [job], pattern: 'SITE-A worker (?P<worker>\\d+) died'}
rules:
  - id: site.fault
    description: a flap
    when: [{as: l, kind: log, where: {matcher: site_a}}]
    then: {fault: {fault_class: site_flap, reason: "worker {{ l.worker }} died"}}
tests:
  - name: site - dated and undated lines
    input:
      - file: slurm-7.out
        source: job
        lines: |
          2026-11-29 17:00:00,001 - train - INFO - SITE-A worker 1 died
          SITE-A worker 2 died
          [rank0]:[E1129 17:00:03.5 x.cpp:1] SITE-A worker 3 died
          [ 12.5] SITE-A worker 4 died
    expect: [{fault_class: site_flap}]
"""


def test_rules_test_names_the_site_test_lines_without_a_time_of_their_own(tmp_path):
    """Lines 2 (no stamp) and 4 (an uptime stamp) are dated by the line before them: the run
    says so, naming them, and still passes; lines 1 and 3 carry their own time."""
    path = tmp_path / "site.yaml"
    path.write_text(UNDATED)
    out = run(str(path), "-k", "site - dated")
    assert out.exit_code == 0, out.output
    warned = [line for line in out.output.splitlines() if line.startswith("warning: site - dated and undated lines")]
    assert len(warned) == 1, out.output
    assert warned[0].endswith("slurm-7.out:2, slurm-7.out:4"), warned[0]
    rows = [json.loads(line) for line in run(str(path), "-k", "site - dated", "--json").output.splitlines()]
    assert rows[0]["undated_lines"] == ["slurm-7.out:2", "slurm-7.out:4"] and rows[0]["passed"]
    # the shipped tests' undated lines (tracebacks, NCCL lines) are named only with -v
    shipped = run("-k", "Xid 79 on n3 during a Megatron job")
    assert shipped.exit_code == 0 and "warning: Xid 79" not in shipped.output
    assert "warning: Xid 79 on n3 during a Megatron job" in run("-k", "Xid 79 on n3 during a Megatron job", "-v").output


def test_a_rule_that_fails_at_run_time_fails_its_test_when_logging_is_set_quieter(site):
    """The engine says a rule failed at run time as a WARNING; with the root logger at ERROR (as
    the demo leaves it in the same process) the failing template still fails its test."""
    import logging

    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.ERROR)
    try:
        result = run(site, "--site-only")
    finally:
        root.setLevel(before)
    assert result.exit_code == 1, result.output
    assert "runtime error in rule site.fault" in result.output
