"""`recover rules diff`: the stored evidence of the bundled examples re-evaluated with a candidate
rulebook lists exactly the incidents that change, and exits 0 when none does."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.core.replay import replay
from engine.rulebook import require_rulebook
from engine.ops.rulediff import diff_store, reevaluate
from engine.store import Store

EXAMPLES = sorted(
    str(p) for p in (Path(__file__).resolve().parents[2] / "examples").iterdir() if p.suffix in (".out", ".log")
)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("diff") / "examples.db"
    store = Store(str(path))
    replay(EXAMPLES, require_rulebook(), store)
    store.close()
    return str(path)


def diff(db, *files, extra=()):
    return CliRunner().invoke(
        app, ["rules", "diff", "--db", db, *[a for f in files for a in ("--rules", str(f))], *extra]
    )


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_base_re_evaluated_gives_what_is_stored(db):
    store = Store(db, readonly=True)
    book = require_rulebook()
    rows = store.incidents(status="closed")
    assert len(rows) == 7
    for inc in rows:
        facts = [f for f, _, _ in store.facts(inc.id) if f.kind not in ("symptom", "fault")]
        (verdict,) = reevaluate(book, inc, facts)
        assert (verdict.fault_class, verdict.decision, verdict.nodes) == (
            inc.fault_class,
            inc.decision,
            tuple(sorted(inc.nodes)),
        )


def test_a_candidate_that_changes_nothing_exits_0(db, tmp_path):
    result = diff(db, write(tmp_path, "same.yaml", "policy:\n  blast_radius: {max_drains: 3}\n"))
    assert result.exit_code == 0, result.output
    assert "0 of 7 incident(s) would change" in result.output


def test_a_changed_decision_lists_exactly_the_incidents_it_changes(db, tmp_path):
    cand = write(tmp_path, "oom.yaml", "fault_classes:\n  cuda_oom: {override: true, decision: restart}\n")
    result = diff(db, cand, extra=("--json",))
    assert result.exit_code == 1, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    changed, summary = rows[:-1], rows[-1]
    assert [(c["job"], c["changed"]) for c in changed] == [("4243", ["decision"])]
    assert changed[0]["old"][0]["decision"] == "stop" and changed[0]["new"][0]["decision"] == "restart"
    assert changed[0]["new"][0]["rule"].startswith("corr.cuda_oom")
    assert summary == {"incidents": 7, "changed": 1}


def test_a_disabled_matcher_is_seen_through_the_stored_lines(db, tmp_path):
    # without its OOM matcher, job 4243's root cause is gone and the NCCL cascade wins: the stored
    # lines are matched again by the candidate's matchers
    cand = write(tmp_path, "nomatch.yaml", "matchers:\n  - {id: cuda_oom_torch, override: true, enabled: false}\n")
    result = diff(db, cand, extra=("--json",))
    assert result.exit_code == 1, result.output
    changed = [json.loads(line) for line in result.stdout.splitlines()][:-1]
    assert [c["job"] for c in changed] == ["4243"]
    assert changed[0]["old"][0]["fault_class"] == "cuda_oom" and changed[0]["new"][0]["fault_class"] != "cuda_oom"


def test_since_limits_the_incidents(db, tmp_path):
    cand = write(tmp_path, "oom.yaml", "fault_classes:\n  cuda_oom: {override: true, decision: restart}\n")
    result = diff(db, cand, extra=("--since", "2100-01-01"))
    assert result.exit_code == 0 and "0 of 0 incident(s)" in result.output
    assert diff(db, cand, extra=("--since", "yesterday-ish")).exit_code == 2


def test_diff_needs_a_candidate_and_a_database(db, tmp_path):
    assert CliRunner().invoke(app, ["rules", "diff", "--db", db]).exit_code == 2
    cand = write(tmp_path, "c.yaml", "rules: []\n")
    assert diff(str(tmp_path / "missing.db"), cand).exit_code == 2


def test_what_is_kept_is_small(db):
    store = Store(db, readonly=True)
    sizes = [sum(len(json.dumps(dict(f.attrs))) for f, _, _ in store.facts(inc.id)) for inc in store.incidents()]
    assert max(sizes) < 32 * 1024  # examples: 1-11 KB of evidence per incident
    diff_store(store, require_rulebook(), require_rulebook())  # and the evidence is enough to re-evaluate
