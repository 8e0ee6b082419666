"""`recover goodput --what-if` (issue 23, part 4): the bundled examples replayed into a store, a
candidate that changes one decision, and exactly that incident listed with the GPU-hours computed
by hand from its log; a settle change re-costed on a report whose restart waited for it."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.core.replay import replay
from engine.ops.goodput_whatif import estimate, policy_overlay
from engine.rulebook import require_rulebook
from engine.store import Store

EXAMPLES = sorted(
    str(p) for p in (Path(__file__).resolve().parents[2] / "examples").iterdir() if p.suffix in (".out", ".log")
)
runner = CliRunner()


def _t(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("whatif") / "examples.db"
    store = Store(str(path))
    replay(EXAMPLES, require_rulebook(), store)
    store.close()
    return str(path)


def test_a_candidate_that_changes_one_decision_names_that_incident_and_its_cost(db, tmp_path):
    cand = tmp_path / "oom.yaml"
    cand.write_text("fault_classes:\n  cuda_oom: {override: true, decision: restart}\n")
    r = runner.invoke(app, ["goodput", "--db", db, "--what-if", "--rules", str(cand), "--gpus-per-node", "8", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["incidents"] == 7
    (row,) = out["changed"]
    assert (row["job"], row["attempt"], row["changed"]) == ("4243", 0, ["decision"])
    assert row["old"][0]["decision"] == "stop" and row["new"][0]["decision"] == "restart"
    # by hand, from examples/slurm-4243.out: the replay has no scheduler history, so the attempt runs
    # from its first progress (NCCL's "... - Init COMPLETE", a progress point since round 7's
    # benign7, unstamped and so stamped with the line before it, 09:00:09.002) to its incident (the
    # first evidence, the allocator warning at 09:05:30.446); no allocation is recorded: 1 node of
    # 8 GPUs. A restart that fails the same way again costs that attempt again.
    seconds = _t("2026-11-28 09:05:30.446") - _t("2026-11-28 09:00:09.002")  # 321.444 s
    assert row["gpu_hours_saved"] == pytest.approx(-seconds * 8 / 3600, rel=0.01)  # -0.714
    assert out["gpu_hours_saved"] == pytest.approx(row["gpu_hours_saved"])
    assert any("fail again the same way" in why for why in row["assumptions"])
    text = runner.invoke(app, ["goodput", "--db", db, "--what-if", "--rules", str(cand), "--gpus-per-node", "8"])
    assert "1 of 7 incident(s) would change" in text.stdout and "incident 6 (job 4243" in text.stdout
    assert "-0.71 GPU-hours (a cost)" in text.stdout
    # --job keeps one job's incidents: another job's changes nothing
    r = runner.invoke(app, ["goodput", "--db", db, "--what-if", "--rules", str(cand), "--job", "4242", "--json"])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert (out["incidents"], out["changed"]) == (1, [])


def test_a_candidate_that_changes_nothing_lists_nothing(db):
    r = runner.invoke(app, ["goodput", "--db", db, "--what-if", "--policy", "blast_radius.max_drains=3", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["changed"] == [] and out["gpu_hours_saved"] == 0 and out["policy"] == {"blast_radius": {"max_drains": 3}}


@pytest.mark.parametrize(
    "args, why",
    [
        (["--what-if"], "needs a candidate"),
        (["--rules", "x.yaml"], "only with --what-if"),
        (["--what-if", "--policy", "settle"], "KEY=VALUE"),
        (["--what-if", "--policy", "settle=banana"], "error"),
    ],
)
def test_what_if_usage_errors(db, args, why):
    r = runner.invoke(app, ["goodput", "--db", db, *args])
    assert r.exit_code == 2 and why in r.stderr, r.output


def test_policy_pairs_nest_and_parse():
    assert policy_overlay(["settle=30s", "blast_radius.max_drains=2"]) == {
        "settle": "30s",
        "blast_radius": {"max_drains": 2},
    }
    with pytest.raises(ValueError):
        policy_overlay(["=3"])


def _report(decision):
    attempt = {"attempt": 0, "state": "FAILED", "wall_s": 4000.0, "productive_s": 3000.0, "gpus": 16}
    failure = {
        "job": "7",
        "attempt": 0,
        "incident": 3,
        "incident_decision": decision,
        "requeued_at": 1000.0,
        "gpus": 16,
        "nodes": [],
        "lost": {c: {"seconds": 0.0, "gpu_hours": 0.0} for c in ("work_lost", "detection", "restart", "queue")}
        | {"decision": {"seconds": 150.0, "gpu_hours": 150 * 16 / 3600}},
        "lost_gpu_hours": 150 * 16 / 3600,
    }
    return {"gpus_per_node": 8, "failures": [failure], "jobs": [{"job": "7", "attempts": [attempt]}]}


def test_a_shorter_settle_saves_the_decision_delay_of_a_plain_restart_only():
    out = estimate([], _report("restart"), incidents=1, settle_old=120.0, settle_new=30.0)
    (row,) = out["changed"]
    assert row["changed"] == ["settle"] and row["gpu_hours_saved"] == pytest.approx(90 * 16 / 3600)
    # a longer one costs; never more saved than the decision delay measured
    assert estimate([], _report("restart"), incidents=1, settle_old=120, settle_new=300)["gpu_hours_saved"] < 0
    assert estimate([], _report("restart"), incidents=1, settle_old=600, settle_new=0)["gpu_hours_saved"] == (
        pytest.approx(150 * 16 / 3600)
    )
    # isolation acts at once: the settle does not delay it
    assert estimate([], _report("isolate_and_restart"), incidents=1, settle_old=120, settle_new=30)["changed"] == []


def _change(old, new, old_nodes=(), new_nodes=()):
    from engine.ops.rulediff import Change, Verdict

    return Change(
        3,
        "7",
        0,
        (Verdict("nccl_timeout", old, tuple(old_nodes), "r"),),
        (Verdict("nccl_timeout", new, tuple(new_nodes), "r"),),
    )


def _history(last_state):
    """Job 7, 16 GPUs: attempt 0 failed (incident 3; restart 300 s, queue 600 s), attempt 1
    failed on n3 (incident 4, 2 GPU-hours lost), attempt 2 ended ``last_state``."""
    rep = _report("restart")
    f0 = rep["failures"][0]
    f0["lost"]["restart"] = {"seconds": 300.0, "gpu_hours": 300 * 16 / 3600}
    f0["lost"]["queue"] = {"seconds": 600.0, "gpu_hours": 600 * 16 / 3600}
    f1 = dict(f0, attempt=1, incident=4, nodes=["n3"], lost_gpu_hours=2.0)
    rep["failures"].append(f1)
    rep["jobs"][0]["attempts"] += [
        {"attempt": 1, "state": "FAILED", "wall_s": 1800.0, "productive_s": 900.0, "gpus": 16},
        {"attempt": 2, "state": last_state, "wall_s": 3600.0, "productive_s": 3000.0, "gpus": 16},
    ]
    return rep


def test_a_stop_instead_of_a_restart_saves_the_failed_attempts_after_it():
    out = estimate([_change("restart", "stop")], _history("FAILED"), incidents=2, settle_old=120, settle_new=120)
    (row,) = out["changed"]
    # its restart and queue (900 s) and the later attempts' wall (1800 + 3600 s), at 16 GPUs
    assert row["gpu_hours_saved"] == pytest.approx((900 + 1800 + 3600) * 16 / 3600)
    # the job completed after the restart: the stop forgoes the later productive GPU-hours
    out = estimate([_change("restart", "stop")], _history("COMPLETED"), incidents=2, settle_old=120, settle_new=120)
    assert out["changed"][0]["gpu_hours_saved"] == pytest.approx(-(900 + 3000) * 16 / 3600)
    assert any("upper bound" in why for why in out["changed"][0]["assumptions"])


def test_excluding_a_suspect_at_the_first_failure_avoids_the_later_failure_on_it():
    change = _change("restart", "isolate_and_restart", new_nodes=["n3"])
    (row,) = estimate([change], _history("COMPLETED"), incidents=2, settle_old=120, settle_new=120)["changed"]
    assert row["gpu_hours_saved"] == pytest.approx(2.0)  # attempt 1's failure on n3
    change = _change("restart", "isolate_and_restart", new_nodes=["n9"])
    (row,) = estimate([change], _history("COMPLETED"), incidents=2, settle_old=120, settle_new=120)["changed"]
    assert row["gpu_hours_saved"] == 0 and "nothing saved" in " ".join(row["assumptions"])


def test_html_is_written_and_a_bad_path_is_exit_2(db, tmp_path):
    page = tmp_path / "goodput.html"
    r = runner.invoke(app, ["goodput", "--db", db, "--html", str(page)])
    assert r.exit_code == 0, r.output
    html = page.read_text()
    for chart in ("chart-causes", "chart-classes", "chart-ettr", "chart-nodes"):
        assert f'<svg id="{chart}"' in html
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    r = runner.invoke(app, ["goodput", "--db", db, "--html", str(tmp_path / "no" / "such" / "dir.html")])
    assert r.exit_code == 2 and "--html" in r.stderr
