"""`recover rules eval`: the corpus loader, the scoring, and the floor the shipped rulebook holds on
the real-log corpus in tests/corpus/ (every case a verbatim excerpt with its public source)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.ops.corpus_eval import HEALTHY, evaluate, load_cases
from engine.rulebook import load_rulebook

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
#: the accuracy the shipped rulebook reaches on tests/corpus/ (raise it, never lower it on the same
#: corpus). 2026-12-01: 227 cases gathered independently from 148 public sources, chosen without
#: looking at the rulebook's answers, took it from 95.7% (562/587) to 87.7% (714/814); the
#: holdout frozen that day scores 85.6% (154/180) before issue 20's round of rule changes.
#: 2026-12-02: 1,033 cases from 562 sources; the round on the train side took it from 89.7%
#: (927/1033, the rulebook of 6d51f51) to 92.6% (957/1033). A later round from train misses only:
#: 93.1% (962/1033) -> 93.9% (970/1033), the frozen holdout 208/235 before and after.
#: 2026-12-06: stragglers read from tables of peers (engine/core/peer_table.py), from train misses
#: only: 93.9% (970/1033) -> 94.2% (973/1033)
#: 2026-12-06 (later): 1,781 cases, 91 of them gathered from holdout sources by a helper who wrote
#: no rule (79 % right); this session's train-side rounds brought the whole corpus to 95.0 %
#: (1692/1781), issue 20's floor. A second independent set (unseen20c: 55 holdout-source cases,
#: 40 right, scored as found) then took it to 94.9 % (1811/1909; 95.5 % without that set): the
#: floor follows what is measured on the whole corpus, and issue 20's 95 % is not reached on it.
#: Round 3 (2026-12-06, evening): unseen20c frozen, a third independent set (unseen20d: 60
#: holdout-source cases, 42 right as found) added, 324 train cases from nine branches; the whole
#: corpus is at 95.1 % (2181/2293), so the floor was issue 20's 95 % again. Round 4 (unseen20d
#: frozen, a fourth independent set: unseen20e, 53 holdout-source cases, 37 right as found and
#: after the round): 94.49 % (2265/2397; 95.05 % without that set): the floor follows what is
#: measured on the whole corpus, and issue 20's 95 % is not reached on it. Round 5 (unseen20e
#: frozen; two independent sets, unseen20f and unseen20g: 88 holdout-source cases, 85 right as
#: found and after the round; 21 train cases and the train misses' families): 95.01 %
#: (2381/2506), so the floor is issue 20's 95 % again, with less than one case to spare
FLOOR = 0.95


@pytest.fixture(scope="module")
def compiled():
    result = load_rulebook()
    assert result.ok
    return result.compiled


def _write(tmp_path: Path, rows: list) -> Path:
    p = tmp_path / "cases.jsonl"
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return p


def _case(i: int, text: str, label: str, stream: str = "app", **kw) -> dict:
    return {"id": f"t-{i}", "source": "https://example.org/t", "stream": stream, "text": text, "label": label} | kw


def test_bad_lines_are_reported_and_skipped(tmp_path):
    p = _write(
        tmp_path,
        [
            _case(1, "x", "cuda_oom"),
            "{not json",
            json.dumps({"id": "t-2", "source": "s", "stream": "app", "label": "cuda_oom"}),  # no text
            _case(3, "x", "cuda_oom", stream="stdout"),
            _case(4, "x", "no_such_class"),
            _case(1, "y", "cuda_oom"),  # id used again
            "[1, 2]",
        ],
    )
    cases, problems = load_cases([str(p)], known_labels=["cuda_oom"])
    assert [c.id for c in cases] == ["t-1"]
    assert len(problems) == 6
    assert problems[0].startswith(f"{p}:2: not JSON")
    assert f"{p}:3: missing or empty: text" in problems
    assert any(x.startswith(f"{p}:4: stream 'stdout'") for x in problems)
    assert f"{p}:5: unknown label(s): no_such_class" in problems
    assert any(x.startswith(f"{p}:6: id 't-1' already used at {p}:1") for x in problems)


def test_scoring_right_wrong_accept_and_healthy(compiled, tmp_path):
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    xid = "Nov 29 17:21:30 n7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
    p = _write(
        tmp_path,
        [
            _case(1, oom, "cuda_oom"),
            _case(2, oom, "app_error"),  # wrong on purpose
            _case(3, oom, "app_error", accept=["cuda_oom"]),  # honest ambiguity
            _case(4, "iteration 10 | loss 2.31", HEALTHY),
            _case(5, xid, "gpu_fell_off_bus", stream="kernel"),
            _case(6, xid, HEALTHY, stream="kernel"),  # a healthy case that opens an incident
        ],
    )
    cases, problems = load_cases([str(p)])
    assert not problems
    report = evaluate(compiled, cases)
    got = {r.case.id: (r.got, r.right) for r in report.results}
    assert got == {
        "t-1": ("cuda_oom", True),
        "t-2": ("cuda_oom", False),
        "t-3": ("cuda_oom", True),
        "t-4": (HEALTHY, True),
        "t-5": ("gpu_fell_off_bus", True),
        "t-6": ("gpu_fell_off_bus", False),
    }
    assert report.right == 4 and report.total == 6
    assert [r.case.id for r in report.healthy_with_incident] == ["t-6"]
    per = report.per_class()
    assert per["cuda_oom"]["recall"] == 1.0 and per["cuda_oom"]["precision"] == pytest.approx(2 / 3)
    assert per["app_error"]["recall"] == 0.5
    assert report.confusion()["app_error"] == {"cuda_oom": 1, "app_error": 1}


def test_cli_exit_codes_and_json(tmp_path):
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    p = _write(tmp_path, [_case(1, oom, "cuda_oom"), _case(2, oom, "app_error")])
    runner = CliRunner()
    ok = runner.invoke(app, ["rules", "eval", str(p), "--min", "50"])
    assert ok.exit_code == 0, ok.output
    assert "accuracy: 50.0% (1/2)" in ok.output and "t-2: app_error -> cuda_oom" in ok.output
    low = runner.invoke(app, ["rules", "eval", str(p), "--min", "0.51"])
    assert low.exit_code == 1
    js = runner.invoke(app, ["rules", "eval", str(p), "--json"])
    data = json.loads(js.output.strip().splitlines()[-1])
    assert data["accuracy"] == 0.5 and data["misses"][0]["id"] == "t-2"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert runner.invoke(app, ["rules", "eval", str(empty)]).exit_code == 2


def test_corpus_is_sourced_and_large_enough():
    cases, problems = load_cases([str(CORPUS)])
    assert not problems, "\n".join(problems)
    failures = [c for c in cases if c.label != HEALTHY]
    assert len(failures) >= 300 and sum(c.label == HEALTHY for c in cases) >= 40
    # issue 20: at least 1,000 cases, 100 of them healthy, 25 of every fault class
    assert len(cases) >= 1000 and sum(c.label == HEALTHY for c in cases) >= 100
    per_class = {label: sum(c.label == label for c in cases) for label in {c.label for c in cases}}
    assert min(per_class.values()) >= 25, per_class
    assert all(c.source.startswith("https://") for c in cases)


def test_shipped_rulebook_holds_the_floor_on_the_corpus(compiled):
    cases, _ = load_cases([str(CORPUS)])
    report = evaluate(compiled, cases)
    misses = "\n".join(f"{r.case.id}: {r.case.label} -> {r.got} {r.error}" for r in report.misses)
    # every healthy case of the train side opens nothing; the holdout is scored, never tuned. The
    # frozen holdout's known case (g3h-healthy-012, frozen 2026-12-02: a data-loader thread's
    # CancelledError traceback printed as training ends) no longer opens one since the side-thread
    # blocks of rules/14-matchers-families-benign2.yaml, written from train sources (benign20p).
    # 2026-12-06: 91 cases gathered from holdout sources by a helper who wrote no rule (unseen20b,
    # added after that day's freeze) held 3 healthy ones that do, scored as found; 2 after the
    # session's second round. The figure may fall, never grow
    wrong = [r.case.id for r in report.healthy_with_incident]
    held = [i for i in wrong if "/holdout/" in next(r.case.where for r in report.results if r.case.id == i)]
    assert not set(wrong) - set(held), misses
    assert len(held) <= 2, held
    assert report.accuracy >= FLOOR, f"{report.accuracy:.1%} < {FLOOR:.0%}\n{misses}"
