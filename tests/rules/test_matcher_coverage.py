"""`recover rules test` names the evidence matchers that no test line hit, as a warning that does
not fail the run: of the whole rulebook when every test ran, of the site's files with --site-only,
and of nothing for a -k selection. A test's own facts naming a matcher do not count as a hit."""

import json

from typer.testing import CliRunner

from engine.cli import app
from engine.ops.ruletest import run_tests, unexercised_matchers
from engine.rulebook import require_rulebook

SITE = """
matchers:
  - {id: site_hit, source: [job], pattern: 'SITE-HIT worker (?P<worker>\\d+) died'}
  - {id: site_idle, source: [job], pattern: 'SITE-IDLE died'}
  - {id: site_off, source: [job], pattern: 'SITE-OFF died', enabled: false}
  - {id: site_progress, source: [job], emit: progress, pattern: 'SITE-STEP (?P<step>\\d+)'}
rules:
  - id: site.fault
    description: either line is a fabric failure
    when: [{as: l, kind: log, where: {matcher: {in: [site_hit, site_idle]}}}]
    then: {fault: {fault_class: nccl_network_error, reason: "the fabric failed"}}
tests:
  - name: site - the worker line
    input: [{file: slurm-7.out, source: job, lines: "SITE-HIT worker 3 died\\n"}]
    expect: [{fault_class: nccl_network_error}]
  - name: site - a fact naming the idle matcher, no line
    facts: [{kind: log, at: 100, attrs: {matcher: site_idle, job: "8", attempt: 0}}]
    expect: [{fault_class: nccl_network_error}]
"""

WARNING = "warning: matchers no test exercises:"


def run(tmp_path, *args, text=SITE):
    """`recover rules test` of the site rulebook ``text`` (written to tmp_path) with ``args``."""
    site = tmp_path / "site.yaml"
    site.write_text(text)
    return CliRunner().invoke(app, ["rules", "test", str(site), *args])


def warned(output: str) -> list[str] | None:
    lines = [line for line in output.splitlines() if line.startswith(WARNING)]
    assert len(lines) <= 1, output
    return lines[0].removeprefix(WARNING).strip().split(", ") if lines else None


def test_a_matcher_only_a_fact_names_is_reported_and_the_run_still_passes(tmp_path):
    # the site's book alone: that the shipped matchers are all hit by their own tests is
    # test_patterns.test_every_matcher_is_exercised's (running them again here took ~50 s)
    result = run(tmp_path, "--no-defaults")
    assert result.exit_code == 0, result.output
    assert "2 passed, 0 failed" in result.output
    # a disabled matcher and a progress matcher are not reported
    assert warned(result.output) == ["site_idle"]
    # the warning comes after the results
    assert result.output.index("passed, 0 failed") < result.output.index(WARNING)


def test_site_only_reports_the_sites_matchers_and_json_carries_them(tmp_path):
    result = run(tmp_path, "--site-only", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["matchers_unexercised"] == ["site_idle"]
    assert warned(result.output) is None  # JSON only


def test_a_name_selection_says_nothing_about_matchers(tmp_path):
    result = run(tmp_path, "-k", "worker line")
    assert result.exit_code == 0, result.output
    assert "1 passed, 0 failed" in result.output
    assert warned(result.output) is None
    assert "matchers_unexercised" not in run(tmp_path, "-k", "worker line", "--json").output


def test_no_warning_when_every_matcher_is_hit(tmp_path):
    both = SITE.replace('"SITE-HIT worker 3 died\\n"', '"SITE-HIT worker 3 died\\nSITE-IDLE died\\n"')
    assert both != SITE
    result = run(tmp_path, "--site-only", text=both)
    assert result.exit_code == 0, result.output
    assert warned(result.output) is None


def test_unexercised_matchers_lists_in_rulebook_order_and_filters_by_file(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(SITE)
    compiled = require_rulebook([site], tests=True)
    seen: set[str] = set()
    # the site's two tests (a line, and a fact that names a matcher): the shipped tests' hits are
    # test_a_matcher_only_a_fact_names_is_reported_and_the_run_still_passes's (a whole run each)
    mine = [t for t in compiled.book.tests if t.mark.file == str(site)]
    assert len(mine) == 2
    outcomes = run_tests(compiled, tests=mine, seen=seen)
    assert all(o.passed for o in outcomes), [o.test.name for o in outcomes if not o.passed]
    assert "site_hit" in seen and "site_idle" not in seen
    ids = [m.id for m in compiled.matchers]
    every = unexercised_matchers(compiled, set())
    assert every == sorted(every, key=ids.index) and "site_off" not in every and "site_progress" not in every
    assert unexercised_matchers(compiled, seen, only_files=set()) == []
