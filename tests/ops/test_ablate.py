"""The fallback layers alone (engine/ops/ablate.py, scripts/ablate_eval.py): a view of the shipped
rulebook with its specific matchers switched off, and the figures it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.ops.ablate import AblationReport, ablate_eval, ablated, generic
from engine.ops.corpus_eval import Case, CaseResult, evaluate
from engine.rulebook import require_rulebook

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shipped():
    return require_rulebook()


def _case(text: str, label: str, cid: str = "c1") -> Case:
    return Case(cid, "https://example.org/log", "app", text, label)


def test_the_view_keeps_only_the_fallback_layers(shipped):
    view = ablated(shipped)
    kept = {m.id for m in view.matchers}
    assert kept and kept < {m.id for m in shipped.matchers}
    assert all(generic(m) for m in view.matchers)
    assert "python_exception_generic" in kept and "weak.cuda_oom" in kept
    assert any(m.attrs.get("ending") for m in view.matchers)
    # a rule that needs a switched-off matcher is pruned; the weak and log-end rules stay
    ids = {r.rule.id for r in view.rules}
    assert len(ids) < len(shipped.rules)
    assert {"weak.cuda_oom_log_ends", "fault.app_error_uncaught", "fault.le_log_ends_on_program_error"} <= ids
    assert shipped.matchers == tuple(m for m in shipped.book.matchers if m.enabled)  # the original is untouched


def test_a_specific_wording_goes_dark_and_a_keyword_still_answers(shipped):
    # constructed lines: a Xid whose words only the specific matchers read, and an unseen wording that
    # ends on a keyword
    specific = _case(
        "NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, An uncorrectable double bit error (DBE) has been detected on GPU\n",
        "gpu_memory_uncorrectable",
    )
    keyword = _case("StoreClientError: fetching shard 3 failed: disk quota exceeded\n", "storage_io_error", "c2")
    assert [r.right for r in evaluate(shipped, [specific, keyword]).results] == [True, True]
    got = ablate_eval(shipped, [specific, keyword])
    assert [r.got for r in got.results] == ["healthy", "storage_io_error"]
    assert got.per_class() == {
        "gpu_memory_uncorrectable": {"cases": 1, "right": 0, "other": 0, "nothing": 1},
        "storage_io_error": {"cases": 1, "right": 1, "other": 0, "nothing": 0},
    }


def test_the_report_counts_right_other_nothing_and_the_price():
    rows = [
        CaseResult(_case("a", "cuda_oom", "1"), "cuda_oom", 1, weak=True),
        CaseResult(_case("b", "cuda_oom", "2"), "app_error", 1),
        CaseResult(_case("c", "cuda_oom", "3"), "healthy", 0),
        CaseResult(_case("d", "healthy", "4"), "healthy", 0),
        CaseResult(_case("e", "healthy", "5"), "host_oom", 1),
    ]
    rep = AblationReport(rows)
    assert rep.per_class() == {"cuda_oom": {"cases": 3, "right": 1, "other": 1, "nothing": 1}}
    assert [r.case.id for r in rep.price] == ["5"] and len(rep.healthy) == 2
    assert rep.wrong_answers() == {("cuda_oom", "app_error"): 1}
    text = "\n".join(rep.text())
    assert "healthy price: 1 of 2" in text and "all failures" in text and "right by layer: weak 1" in text
    assert rep.per_stream() == {
        "app": {"cases": 5, "failures": 3, "right": 1, "other": 1, "nothing": 1, "healthy": 2, "price": 1}
    }
    assert "stream   failures" in text


def test_the_script_reads_the_train_side_only(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "holdout").mkdir(parents=True)
    line = {
        "id": "t-1",
        "source": "https://github.com/a/b/issues/1",
        "stream": "app",
        "label": "storage_io_error",
        "text": "StoreClientError: fetching shard 3 failed: disk quota exceeded\n",
    }
    (corpus / "train.jsonl").write_text(json.dumps(line) + "\n")
    (corpus / "holdout" / "h.jsonl").write_text("not json, never opened\n")
    manifest = {"frozen": "2026-12-01", "holdout_sources": ["c/d"], "train_sources": ["a/b"]}
    (corpus / "holdout.manifest.json").write_text(json.dumps(manifest))
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "ablate_eval.py"), "--corpus", str(corpus), "--normal"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "train side: 1 cases" in out.stdout
    assert "storage_io_error                 1     1     0       0" in out.stdout
    assert "healthy price: 0 of 0" in out.stdout and "normal, train side: 1/1" in out.stdout
