"""Issue 20's "every matcher family has test lines from >= 3 sources", as a ratchet: the matchers
of the shipped rulebook whose positive embedded tests quote fewer than 3 distinct sources must all
be in tests/rules/family_sources_debt.txt (written by scripts/family_sources.py --write-debt), so a
new matcher comes with 3 sources, and a matcher that reaches 3 must leave the list."""

from pathlib import Path

import pytest

from engine.ops.family_sources import ENOUGH, measure, read_debt
from engine.rulebook import require_rulebook

DEBT = Path(__file__).with_name("family_sources_debt.txt")
FIX = "run scripts/family_sources.py --write-debt only if the change is meant"


@pytest.fixture(scope="module")
def shipped():
    return measure(require_rulebook(tests=True))


def ratchet(report, debt: set[str]) -> tuple[list[str], list[str]]:
    """(matchers under 3 sources that the debt list lacks, listed ones no longer under 3 or gone)."""
    under = set(report.under(ENOUGH))
    return sorted(under - debt), sorted(debt - under)


def test_no_matcher_outside_the_debt_list_is_under_three_sources(shipped):
    new, _ = ratchet(shipped, read_debt(DEBT))
    assert not new, f"matchers with fewer than {ENOUGH} sources in their tests: {new} (add sources; {FIX})"


def test_a_matcher_that_reached_three_sources_leaves_the_debt_list(shipped):
    _, paid = ratchet(shipped, read_debt(DEBT))
    assert not paid, f"no longer under {ENOUGH} sources (or gone), remove from {DEBT.name}: {paid}"


def test_the_measure_counts_distinct_sources_and_constructed_tests(shipped):
    # a GitHub URL is keyed owner/name, any other URL by its host
    row = shipped.rows["nccl_watchdog_timeout"]
    assert len(row.sources) >= ENOUGH and all("/" in s or "." in s for s in row.sources)
    assert shipped.positive_tests > shipped.constructed_tests > 0


SITE = """
matchers:
  - {id: site_new_wording, source: [job], pattern: 'FABRIC-GONE rank (?P<rank>\\d+)'}
rules:
  - id: site.fabric
    description: the new wording is a fabric failure
    when: [{as: l, kind: log, where: {matcher: site_new_wording}}]
    then: {fault: {fault_class: nccl_network_error, reason: "the fabric went away"}}
tests:
  # https://github.com/example-org/fabric-tool/issues/1 (the one thread quoting it)
  - name: site - the new wording
    input: [{file: slurm-7.out, source: job, lines: "FABRIC-GONE rank 3\\n"}]
    expect: [{fault_class: nccl_network_error}]
  - name: site - the same wording, constructed
    input: [{file: slurm-8.out, source: job, lines: "FABRIC-GONE rank 4\\n"}]
    expect: [{fault_class: nccl_network_error}]
  # https://github.com/other-org/x/issues/2 (a negative test: its source does not count)
  - name: site - not this
    input: [{file: slurm-9.out, source: job, lines: "FABRIC-OK rank 4\\n"}]
    expect: []
"""


def measure_site(tmp_path, text: str):
    """The measure of a site file alone (the shipped fault classes and policy come with it)."""
    site = tmp_path / "site.yaml"
    site.write_text(text)
    return measure(require_rulebook([site], defaults=False, tests=True), [site])


def test_a_new_matcher_with_one_source_breaks_the_ratchet(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(SITE)
    # the site alone (the shipped fault classes and policy come with it): quick, and the shipped
    # matchers are not in it, so only the new one can be under 3
    report = measure(require_rulebook([site], defaults=False, tests=True), [site])
    row = report.rows["site_new_wording"]
    assert row.sources == {"example-org/fabric-tool"}
    assert row.constructed == 1
    new, _ = ratchet(report, read_debt(DEBT))
    assert "site_new_wording" in new
    # ... and three sources pay it off
    three = SITE.replace(
        "  # https://github.com/example-org/fabric-tool/issues/1",
        "  # https://github.com/example-org/fabric-tool/issues/1\n"
        "  # https://discuss.example.org/t/5 and https://github.com/third/repo/pull/9",
    )
    site.write_text(three)
    report = measure(require_rulebook([site], defaults=False, tests=True), [site])
    assert report.rows["site_new_wording"].sources == {"example-org/fabric-tool", "discuss.example.org", "third/repo"}
    assert "site_new_wording" not in ratchet(report, read_debt(DEBT))[0]


# SITE's matcher and rule, its words also a keyword of the class
SITE_WEAK = (
    "\nfault_classes:\n  nccl_network_error: {override: {keywords: append}, keywords: [FABRIC-GONE]}"
    + SITE.split("tests:")[0]
    + """tests:
  # https://github.com/one-org/a/issues/1
  - name: site weak - one
    input: [{file: slurm-7.out, source: job, lines: "FABRIC-GONE rank 3\\n"}]
    expect: [{fault_class: nccl_network_error}]
  # https://github.com/two-org/b/issues/2
  - name: site weak - two
    input: [{file: slurm-8.out, source: job, lines: "step 9\\nFABRIC-GONE rank 4\\n"}]
    expect: [{fault_class: nccl_network_error}]
  # https://github.com/three-org/c/issues/3
  - name: site weak - three
    input: [{file: slurm-9.out, source: job, lines: "FABRIC-GONE rank 5 during allreduce\\n"}]
    expect: [{fault_class: nccl_network_error}]
  # https://github.com/other-class/d/issues/4 (a test of another class: no credit for the keyword)
  - name: site weak - another class
    input: [{file: slurm-10.out, source: job, lines: "FABRIC-GONE rank 6\\n"}]
    expect: [{fault_class: host_oom}]
"""
)


def test_a_weak_keyword_is_credited_with_its_class_lines_it_reads_with_the_specific_matchers_off(tmp_path):
    """In the pipeline the specific matcher's reading of the line drops the keyword's hit, so the
    keyword would have no source at all; with the specific matchers off (as the fallback is
    scored) it reads them, and the tests of its own class credit it (not the other class's)."""
    report = measure_site(tmp_path, SITE_WEAK)
    assert report.rows["site_new_wording"].sources == {"one-org/a", "two-org/b", "three-org/c", "other-class/d"}
    assert report.rows["weak.nccl_network_error"].sources == {"one-org/a", "two-org/b", "three-org/c"}


SITE_GUARD = """
matchers:
  - {id: site_fabric_lost, source: [job], pattern: 'FABRIC-LOST rank (?P<rank>\\d+)'}
  - {id: site_fabric_back, source: [job], pattern: 'FABRIC-BACK after \\d+ retries', attrs: {handled: true}}
rules:
  - id: site.fabric_lost
    description: the fabric went away
    when: [{as: l, kind: log, where: {matcher: site_fabric_lost}}]
    then: {fault: {fault_class: nccl_network_error, reason: "the fabric went away"}}
tests:
  # https://github.com/one-org/a/issues/1
  - {name: site guard - one, expect: [], input: [{file: a.out, source: job, lines: "FABRIC-BACK after 3 retries\\n"}]}
  # https://github.com/two-org/b/issues/2
  - {name: site guard - two, expect: [], input: [{file: b.out, source: job, lines: "FABRIC-BACK after 1 retries\\nstep 9\\n"}]}
  # https://github.com/three-org/c/issues/3 (the detector's word in a negative test credits only the guard)
  - {name: site guard - three, expect: [], input: [{file: c.out, source: job,
     lines: "FABRIC-LOST rank 2\\nFABRIC-BACK after 2 retries\\nstep 10\\n"}]}
"""


def test_a_guard_is_credited_with_the_negative_tests_it_reads_and_a_detector_is_not(tmp_path):
    report = measure_site(tmp_path, SITE_GUARD)
    assert report.rows["site_fabric_back"].sources == {"one-org/a", "two-org/b", "three-org/c"}
    assert report.rows["site_fabric_lost"].sources == set()


def test_a_family_tie_goes_to_the_first_class_by_name_whatever_the_order_seen():
    from collections import Counter

    from engine.ops.family_sources import MatcherSources

    for seen in (["unknown", "app_error"], ["app_error", "unknown"]):
        row = MatcherSources("le_x", "rules/x.yaml", classes=Counter(seen + ["unknown", "app_error", "cuda_oom"]))
        assert row.family("class") == "app_error"
    assert (
        MatcherSources("le_y", "rules/y.yaml", classes=Counter(["cuda_oom", "app_error", "cuda_oom"])).family("class")
        == "cuda_oom"
    )
