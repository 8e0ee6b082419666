"""A plain rulebook load leaves the files that hold nothing but tests unparsed (load8): the same
rulebook as a load with its tests, less the tests, and a broken test file is reported by the
loads that read tests (`recover rules check`, `rules test`), not by a run."""

from __future__ import annotations

import textwrap

import pytest

from engine.rulebook import _tests_only, load_rulebook, require_rulebook
from engine.rulebook import model

TESTS_ONLY = """\
# a comment first
tests:
  - name: t1
    inputs: [{file: slurm-1.out, source: job, lines: "x"}]
    expect: [{none: true}]

# a comment between
"""


@pytest.mark.parametrize(
    "text, only",
    [
        (TESTS_ONLY, True),
        ("tests:\r\n  - name: a\r\n", True),
        ("tests: []\n", True),
        ("tests:  # all of them\n  - name: a\n", True),
        ("", False),  # no tests key at all
        ("# only a comment\n", False),
        ("matchers: []\ntests: []\n", False),
        ("tests: []\nmatchers: []\n", False),
        ("---\ntests: []\n", False),
        ("%YAML 1.1\n---\ntests: []\n", False),
        ("{tests: [], matchers: []}\n", False),
        ("  {tests: [], matchers: []}\n", False),  # a flow mapping, indented
        ("\ufefftests: []\n", False),
        ("tests:\n  - name: a\n...\n---\nmatchers: []\n", False),
        ("testsx: []\n", False),
        ('"tests": []\n', False),
    ],
)
def test_tests_only_files_are_known_by_their_column_0_lines(text, only):
    assert _tests_only(text) is only


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_the_shipped_rulebook_without_tests_is_the_same_rulebook(tmp_path, monkeypatch):
    monkeypatch.setenv("RECOVER_CACHE_DIR", "off")
    plain, full = load_rulebook(), load_rulebook(tests=True)
    assert plain.ok and full.ok
    assert [str(d) for d in plain.diagnostics] == [str(d) for d in full.diagnostics]
    assert plain.files == full.files
    a, b = plain.compiled, full.compiled
    assert a is not None and b is not None
    for attr in ("files", "lists", "macros", "matchers", "rules", "actions", "policy", "fault_classes"):
        assert getattr(a.book, attr) == getattr(b.book, attr), attr
    assert {k: v for k, v in a.book.origins.items() if k[0] != "tests"} == {
        k: v for k, v in b.book.origins.items() if k[0] != "tests"
    }
    assert [(r.rule, r.trees, r.priority, sorted(r.then_templates)) for r in a.rules] == [
        (r.rule, r.trees, r.priority, sorted(r.then_templates)) for r in b.rules
    ]
    assert [(n, x.kind, x.per, len(x.argv)) for n, x in a.actions.items()] == [
        (n, x.kind, x.per, len(x.argv)) for n, x in b.actions.items()
    ]
    assert a.policy == b.policy and a.analyses == b.analyses
    assert len(b.book.tests) > 1000
    assert isinstance(a.book.tests, model.TestsNotLoaded)
    with pytest.raises(RuntimeError, match="tests=True"):
        list(a.book.tests)
    with pytest.raises(RuntimeError, match="tests=True"):
        len(a.book.tests)


def test_a_broken_test_file_is_reported_where_tests_are_read_and_does_not_stop_a_run(tmp_path, monkeypatch):
    monkeypatch.setenv("RECOVER_CACHE_DIR", str(tmp_path / "cache"))
    bad = _write(
        tmp_path,
        "90-tests-site.yaml",
        """\
        tests:
          - name: broken
            inputs: [{file: slurm-1.out, source: job, lines: "x"
            expect: [{none: true}]
        """,
    )
    with_tests = load_rulebook([bad], tests=True)
    assert not with_tests.ok
    assert [str(d).split(": ")[0] for d in with_tests.errors] == [f"{bad}:4:5"]
    assert "E-YAML" in str(with_tests.errors[0])
    plain = load_rulebook([bad])
    assert plain.ok and plain.diagnostics == () and str(bad) in plain.files
    again = load_rulebook([bad], tests=True)  # (each kept apart in the rulebook cache)
    assert [str(d) for d in again.diagnostics] == [str(d) for d in with_tests.diagnostics]
    assert require_rulebook([bad]).matchers == require_rulebook().matchers


def test_a_tests_section_beside_others_is_left_to_the_loads_that_read_tests(tmp_path, monkeypatch):
    monkeypatch.setenv("RECOVER_CACHE_DIR", "off")
    mixed = _write(
        tmp_path,
        "site.yaml",
        """\
        matchers:
          - id: site_thing
            pattern: 'site thing happened'
            source: job
        tests:
          - name: no_inputs
            expect: [{none: true}]
          - name: Xid 79 isolates its node
            override: true
            enabled: false
        """,
    )
    alone = _write(tmp_path, "alone.yaml", mixed.read_text().split("tests:")[0])
    plain, full = load_rulebook([mixed]), load_rulebook([mixed], tests=True)
    assert plain.ok and "site_thing" in {m.id for m in plain.compiled.matchers}  # type: ignore[union-attr]
    expected = [str(d).replace("alone.yaml", "site.yaml") for d in load_rulebook([alone], tests=True).diagnostics]
    assert [str(d) for d in plain.diagnostics] == expected
    assert full.errors and all(d.mark.file == str(mixed) for d in full.errors)
