"""The measured goodput report (issue 23, parts 1 and 2): a store built through its public API
from a known history (jobs, failures, checkpoints, requeues, queue times), and every figure held
to the hand computation written out below, to 1%. Missing inputs give figures marked as
estimates, with their reason; --since, --until and --job select; --json has its fields."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.facts import Fact
from engine.ops.goodput import CAUSES, report_from_store
from engine.ops.goodput_text import render_text
from engine.store import ActionStatus, Store

runner = CliRunner()

T0 = datetime(2026, 11, 2, tzinfo=timezone.utc).timestamp()  # a Monday, 00:00 UTC
DAY = 86400.0
NOW = T0 + 3 * DAY
K = 8  # GPUs per node


class Clock:
    """The wall clock the store stamps rows with (detected_wall, the journal's times)."""

    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t

    def at(self, t: float) -> "Clock":
        self.t = T0 + t
        return self


def _incident(store, clock, job, attempt, *, evidence, opened, closed, fault, nodes=(), wall=None, suspects=()):
    clock.at(opened if wall is None else wall)
    inc = store.open_incident(key=f"job:{job}:{attempt}", job=job, attempt=attempt, node=None, at=T0 + opened)
    store.add_fact(
        inc, Fact.make("log", {"job": job, "text": f"{fault} evidence"}, T0 + evidence, f"slurm-{job}.out:1")
    )
    clock.at(closed)
    store.close_incident(inc, T0 + closed, fault, "isolate_and_restart", nodes, None, f"{fault} reason", mode="act")
    if suspects:
        store.set_suspects(inc, [{"rank": 3, "node": n, "signals": []} for n in suspects])
    return inc


def _action(store, clock, inc, name, target, *, planned, started, done):
    clock.at(planned)
    argv = ["scontrol", name, target]
    aid = store.add_action(inc, f"{inc}:{name}:{target}", name, target, argv, "act", ActionStatus.PLANNED)
    clock.at(started)
    store.update_action(aid, ActionStatus.STARTED, attempt=True)
    clock.at(done)
    store.update_action(aid, ActionStatus.SUCCEEDED, rc=0)
    store.update_action(aid, ActionStatus.VERIFIED, verified=True)


def _event(store, job, attempt, state, t, nodes=()):
    store.add_job_event(job, attempt, state, T0 + t, list(nodes), origin="slurm:jobs")


def _progress(
    store, job, attempt, *, first, first_step, last, step, checkpoint=None, checkpoint_at=None, step_time=None
):
    store.note_progress(
        job,
        attempt,
        first_at=T0 + first,
        first_step=first_step,
        step=step,
        last_at=T0 + last,
        checkpoint=checkpoint,
        checkpoint_at=None if checkpoint_at is None else T0 + checkpoint_at,
        step_time=step_time,
    )


def build(path, monkeypatch) -> str:
    """Three jobs (times in seconds after T0):

    job 100, 2 nodes (16 GPUs), every input recorded; fails twice, recovered twice:
      0 PENDING, 600 RUNNING on n1,n2, first progress 900 (step 1), 2.0 s a step,
      checkpoint 1000 at 2900, last progress 3900 (step 1500); Xid 79 on n2: evidence 3910,
      incident 3940, requeue started 4060; attempt 1 PENDING 4070, RUNNING 4670 on n1,n3,
      first progress 4970 (step 1001), checkpoint 2000 at 6950, last progress 7800 (step 2400);
      NCCL timeout (suspect n3): evidence 9600, incident 9605, FAILED 9650, requeue started
      9700; attempt 2 PENDING 9710, RUNNING 9800 on n1,n4, first progress 10100, COMPLETED 20000.
    job 200, no scheduler history, no checkpoint, no step time printed, replayed (not live):
      attempt 0 progress 1000 (step 1) to 2000 (step 501); incident on n5, evidence and
      opening at 2010; attempt 1 progress 3000 (step 401, where it resumed) to 5000 (step 900).
    job 300, the next day (+DAY), 1 node, no checkpoint: PENDING 0, RUNNING 100 on n6, progress
      200 to 9000 (9.0 s a step), evidence and incident 9500, FAILED 10000, never requeued.
    """
    clock = Clock()
    monkeypatch.setattr(time, "time", clock)
    store = Store(str(path))
    # job 100
    for attempt, state, t, nodes in (
        (0, "PENDING", 0, ()),
        (0, "RUNNING", 600, ("n1", "n2")),
        (1, "PENDING", 4070, ()),
        (1, "RUNNING", 4670, ("n1", "n3")),
        (1, "FAILED", 9650, ("n1", "n3")),
        (2, "PENDING", 9710, ()),
        (2, "RUNNING", 9800, ("n1", "n4")),
        (2, "COMPLETED", 20000, ("n1", "n4")),
    ):
        _event(store, "100", attempt, state, t, nodes)
    _progress(
        store,
        "100",
        0,
        first=900,
        first_step=1,
        last=3900,
        step=1500,
        checkpoint=1000,
        checkpoint_at=2900,
        step_time=2.0,
    )
    _progress(
        store,
        "100",
        1,
        first=4970,
        first_step=1001,
        last=7800,
        step=2400,
        checkpoint=2000,
        checkpoint_at=6950,
        step_time=2.0,
    )
    _progress(
        store,
        "100",
        2,
        first=10100,
        first_step=2001,
        last=19990,
        step=7000,
        checkpoint=7000,
        checkpoint_at=19990,
        step_time=2.0,
    )
    a = _incident(
        store, clock, "100", 0, evidence=3910, opened=3940, closed=4000, fault="gpu_fell_off_bus", nodes=["n2"]
    )
    _action(store, clock, a, "drain", "n2", planned=4000, started=4001, done=4002)
    _action(store, clock, a, "requeue", "100", planned=4000, started=4060, done=4062)
    b = _incident(
        store, clock, "100", 1, evidence=9600, opened=9605, closed=9690, fault="nccl_timeout", suspects=["n3"]
    )
    _action(store, clock, b, "requeue", "100", planned=9690, started=9700, done=9701)
    # job 200: replayed long after (its detected_wall is the replay's, not the log's time)
    _progress(store, "200", 0, first=1000, first_step=1, last=2000, step=501)
    _progress(store, "200", 1, first=3000, first_step=401, last=5000, step=900)
    _incident(
        store, clock, "200", 0, evidence=2010, opened=2010, wall=2 * DAY, closed=2020, fault="cuda_error", nodes=["n5"]
    )
    # job 300
    for state, t, nodes in (("PENDING", 0, ()), ("RUNNING", 100, ("n6",)), ("FAILED", 10000, ("n6",))):
        _event(store, "300", 0, state, DAY + t, nodes)
    _progress(store, "300", 0, first=DAY + 200, first_step=1, last=DAY + 9000, step=1000, step_time=9.0)
    _incident(store, clock, "300", 0, evidence=DAY + 9500, opened=DAY + 9500, closed=DAY + 9600, fault="app_exception")
    store.close()
    return str(path)


def gh(seconds: float, gpus: int) -> float:
    return seconds * gpus / 3600


# -- the hand computation -------------------------------------------------------------------
# job 100 (16 GPUs); each failure's chain, in seconds:
#   A: failed 3900 (last progress) -> detected 3940 -> requeued 4060 -> pending 4070 -> running 4670
#      -> resumed 4970: detection 40, decision 120, restart 10 + 300, queue 600,
#      work lost (1500 - 1000) x 2.0 = 1000
#   B: failed 7800 -> detected 9605 -> requeued 9700 -> pending 9710 -> running 9800 -> resumed
#      10100: detection 1805, decision 95, restart 10 + 300, queue 90, work lost (2400 - 2000) x 2.0 = 800
A = {"detection": 40, "decision": 120, "restart": 310, "queue": 600, "work_lost": 1000}
B = {"detection": 1805, "decision": 95, "restart": 310, "queue": 90, "work_lost": 800}
# productive: (3900 - 900 - 1000) + (7800 - 4970 - 800) + (20000 - 10100); wall 0 -> 20000
J100_PRODUCTIVE, J100_WALL = 2000 + 2030 + 9900, 20000
# job 200 (1 node from its incident, 8 GPUs): step time (2000 - 1000) / (501 - 1) = 2.0 s; the next
# attempt resumed at 401, so work lost (501 - 401) x 2.0 = 200; detection 2010 - 2000 = 10; no
# requeue nor scheduler: 2010 -> 3000 (the next attempt's first progress) is restart
C = {"detection": 10, "decision": 0, "restart": 990, "queue": 0, "work_lost": 200}
J200_PRODUCTIVE, J200_WALL = (2000 - 1000 - 200) + (5000 - 3000), 5000 - 1000
# job 300 (8 GPUs): failed 9000, detected 9500, ended FAILED 10000 with no requeue: decision 500;
# no checkpoint, no next attempt: the whole progress 9000 - 200 is lost (the upper bound)
D = {"detection": 500, "decision": 500, "restart": 0, "queue": 0, "work_lost": 8800}
J300_PRODUCTIVE, J300_WALL = 0, 10000


def close(x, y):
    return x == pytest.approx(y, rel=0.01, abs=1e-9)


@pytest.fixture
def db(tmp_path, monkeypatch):
    return build(tmp_path / "goodput.db", monkeypatch)


def report(db, **kw):
    store = Store(db, readonly=True)
    try:
        return report_from_store(store, now=NOW, gpus_per_node=K, **kw)
    finally:
        store.close()


def _failure(rep, job, attempt):
    return next(f for f in rep["failures"] if f["job"] == job and f["attempt"] == attempt)


def test_every_figure_of_a_fully_recorded_job_matches_the_hand_computation(db):
    rep = report(db, job="100")
    for attempt, want in ((0, A), (1, B)):
        f = _failure(rep, "100", attempt)
        for cause in CAUSES:
            assert close(f["lost"][cause]["seconds"], want[cause]), (attempt, cause)
            assert close(f["lost"][cause]["gpu_hours"], gh(want[cause], 16)), (attempt, cause)
            assert f["lost"][cause]["estimate"] is None, (attempt, cause)
        assert close(f["lost_gpu_hours"], gh(sum(want.values()), 16))
        assert f["gpus"] == 16 and not f["estimated"]
    a, b = _failure(rep, "100", 0), _failure(rep, "100", 1)
    assert (a["fault_class"], a["nodes"], a["day"]) == ("gpu_fell_off_bus", ["n2"], "2026-11-02")
    assert (b["fault_class"], b["nodes"]) == ("nccl_timeout", ["n3"])  # its suspect
    assert a["requeued_at"] == T0 + 4060 and a["resumed_at"] == T0 + 4970  # the journal's and the ledger's times
    assert (a["step"], a["checkpoint"], a["step_time_s"], a["lost_steps"]) == (1500, 1000, 2.0, 500)
    (job,) = rep["jobs"]
    assert close(job["ettr"], J100_PRODUCTIVE / J100_WALL)  # 0.6965
    assert close(job["wall_s"], J100_WALL) and close(job["productive_s"], J100_PRODUCTIVE)
    assert close(job["wall_gpu_hours"], gh(J100_WALL, 16))
    assert [r["attempt"] for r in job["attempts"]] == [0, 1, 2]
    walls = [r["wall_s"] for r in job["attempts"]]
    assert all(close(w, x) for w, x in zip(walls, (4970, 10100 - 4970, 20000 - 10100)))
    assert close(job["attempts"][2]["ettr"], 1.0)
    assert job["estimates"] == [] and rep["estimates"] == [] and rep["cluster"]["estimated"] is False
    assert job["state"] == "COMPLETED" and job["submitted_at"] == T0


def test_cluster_figures_by_class_node_and_day(db):
    rep = report(db)
    c = rep["cluster"]
    assert (c["jobs"], c["attempts"], c["failures"]) == (3, 6, 4)
    losses = {"A": gh(sum(A.values()), 16), "B": gh(sum(B.values()), 16), "C": gh(sum(C.values()), 8)}
    losses["D"] = gh(sum(D.values()), 8)
    assert close(c["lost_gpu_hours"]["total"], sum(losses.values()))
    for cause in CAUSES:
        want = gh(A[cause] + B[cause], 16) + gh(C[cause] + D[cause], 8)
        assert close(c["lost_gpu_hours"][cause], want), cause
    wall = gh(J100_WALL, 16) + gh(J200_WALL, 8) + gh(J300_WALL, 8)
    productive = gh(J100_PRODUCTIVE, 16) + gh(J200_PRODUCTIVE, 8) + gh(J300_PRODUCTIVE, 8)
    assert close(c["wall_gpu_hours"], wall) and close(c["productive_gpu_hours"], productive)
    assert close(c["ettr"], productive / wall)
    by_class = {g["fault_class"]: g for g in rep["by_class"]}
    assert close(by_class["gpu_fell_off_bus"]["lost_gpu_hours"]["total"], losses["A"])
    assert close(by_class["app_exception"]["lost_gpu_hours"]["work_lost"], gh(8800, 8))
    assert [g["fault_class"] for g in rep["by_class"]] == [
        "app_exception",
        "nccl_timeout",
        "gpu_fell_off_bus",
        "cuda_error",
    ]
    lemons = [(g["node"], g["failures"]) for g in rep["by_node"]]
    assert lemons == [("(none named)", 1), ("n3", 1), ("n2", 1), ("n5", 1)]
    assert close(rep["by_node"][1]["lost_gpu_hours"], losses["B"])
    days = {g["day"]: g for g in rep["by_day"]}
    assert sorted(days) == ["2026-11-02", "2026-11-03"]
    assert days["2026-11-02"]["failures"] == 3 and close(days["2026-11-03"]["lost_gpu_hours"]["total"], losses["D"])
    jobs = {j["job"]: j for j in rep["jobs"]}
    assert close(jobs["200"]["ettr"], J200_PRODUCTIVE / J200_WALL)  # 0.7
    assert jobs["300"]["ettr"] == 0.0


def test_missing_inputs_are_marked_estimates_with_their_reason(db):
    rep = report(db)
    c = _failure(rep, "200", 0)
    for cause in CAUSES:
        assert close(c["lost"][cause]["seconds"], C[cause]), cause
    assert c["estimated"] and c["gpus"] == 8
    work = c["lost"]["work_lost"]["estimate"]
    assert "no step time printed" in work and "the step the next attempt resumed at" in work
    assert "not opened live" in c["lost"]["detection"]["estimate"]
    assert "no requeue and no scheduler history" in c["lost"]["decision"]["estimate"]
    job200 = next(j for j in rep["jobs"] if j["job"] == "200")
    text = " | ".join(job200["estimates"])
    assert "no scheduler history: the job's wall time starts at its first progress" in text
    assert "the 1 node(s) its incident names" in text and "taken as 1 node" in text
    d = _failure(rep, "300", 0)
    assert "whole progress counted as lost (an upper bound)" in d["lost"]["work_lost"]["estimate"]
    assert d["lost"]["detection"]["estimate"] is None and d["lost"]["decision"]["estimate"] is None
    assert rep["cluster"]["estimated"] is True and rep["estimates"]
    out = render_text(rep)
    assert "~0.700" in out  # job 200's ETTR, marked
    assert "estimates (~)" in out and "job 200: no scheduler history" in out


def test_since_until_clip_every_figure_to_the_window(db):
    # from 5000: failure A and job 200 are before it; job 300 is after the until
    rep = report(db, since=T0 + 5000, until=T0 + 20000)
    assert [j["job"] for j in rep["jobs"]] == ["100"]
    assert [(f["job"], f["attempt"]) for f in rep["failures"]] == [("100", 1)]
    (job,) = rep["jobs"]
    # attempt 1 clipped to 5000 -> 10100, attempt 2 10100 -> 20000: productive (7800 - 5000 - 800) + 9900
    assert close(job["wall_s"], 15000) and close(job["productive_s"], 2000 + 9900)
    assert [r["attempt"] for r in job["attempts"]] == [1, 2]
    assert close(rep["cluster"]["lost_gpu_hours"]["total"], gh(sum(B.values()), 16))
    # a window that ends inside failure B's detection delay: 800 lost work, 9000 - 7800 of detection
    rep = report(db, since=T0 + 5000, until=T0 + 9000)
    b = _failure(rep, "100", 1)
    assert close(b["lost"]["work_lost"]["seconds"], 800) and close(b["lost"]["detection"]["seconds"], 1200)
    assert b["lost"]["decision"]["seconds"] == 0 and b["lost"]["queue"]["seconds"] == 0
    assert close(rep["cluster"]["lost_gpu_hours"]["total"], gh(2000, 16))
    # --job
    rep = report(db, job="300")
    assert [j["job"] for j in rep["jobs"]] == ["300"] and rep["cluster"]["failures"] == 1
    assert report(db, job="999")["jobs"] == []


def test_cli_json_fields(db):
    r = runner.invoke(app, ["goodput", "--db", db, "--json", "--gpus-per-node", "8"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert {
        "cluster",
        "jobs",
        "failures",
        "by_class",
        "by_node",
        "by_day",
        "estimates",
        "since",
        "until",
        "job",
    } <= set(rep)
    assert rep["gpus_per_node"] == 8 and rep["gpus_per_node_from"] == "--gpus-per-node"
    assert set(rep["cluster"]) == {
        "jobs",
        "attempts",
        "failures",
        "wall_gpu_hours",
        "productive_gpu_hours",
        "ettr",
        "lost_gpu_hours",
        "estimated",
    }
    assert set(rep["cluster"]["lost_gpu_hours"]) == set(CAUSES) | {"total"}
    f = rep["failures"][0]
    for key in ("job", "attempt", "incident", "fault_class", "nodes", "day", "failed_at", "detected_at", "requeued_at"):
        assert key in f
    assert set(f["lost"]) == set(CAUSES) and set(f["lost"]["queue"]) == {"seconds", "gpu_hours", "estimate"}
    job = rep["jobs"][0]
    for key in ("job", "ettr", "wall_s", "productive_s", "attempts", "lost_gpu_hours", "estimates"):
        assert key in job
    assert {"attempt", "ettr", "wall_s", "productive_s", "gpus", "nodes", "failed"} <= set(job["attempts"][0])


def test_cli_filters_text_and_gpus_per_node(db):
    since = datetime.fromtimestamp(T0 + DAY, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    r = runner.invoke(app, ["goodput", "--db", db, "--since", since, "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert [j["job"] for j in rep["jobs"]] == ["300"] and rep["since"] == T0 + DAY
    assert rep["gpus_per_node"] == 8 and rep["gpus_per_node_from"].startswith("the default")
    r = runner.invoke(app, ["goodput", "--db", db, "--job", "100", "--gpus-per-node", "4", "--json"])
    rep = json.loads(r.stdout)
    assert close(rep["cluster"]["lost_gpu_hours"]["total"], gh(sum(A.values()) + sum(B.values()), 8))
    r = runner.invoke(app, ["goodput", "--db", db, "--until", str(T0 + 20000)])
    assert r.exit_code == 0, r.output
    for heading in ("lost GPU-hours by cause", "by fault class", "lemon list", "by day", "jobs", "failures"):
        assert heading in r.stdout
    assert "gpu_fell_off_bus" in r.stdout and "app_exception" not in r.stdout


@pytest.mark.parametrize(
    "args, why",
    [
        (["--until", "2026-11-01", "--since", "2026-11-02"], "--until must be later"),
        (["--nodes", "4"], "only with --model"),
        (["--model", "--job", "1", "--nodes", "1"], "not --model"),
        (["--since", "yesterday-ish"], "give a date"),
    ],
)
def test_cli_usage_errors(db, args, why):
    r = runner.invoke(app, ["goodput", "--db", db, *args])
    assert r.exit_code == 2 and why in r.stderr, r.output


def test_no_database_is_exit_2(tmp_path):
    r = runner.invoke(app, ["goodput", "--db", str(tmp_path / "none.db")])
    assert r.exit_code == 2 and "no such database" in r.stderr


def test_an_empty_store_says_so(tmp_path):
    Store(str(tmp_path / "empty.db")).close()
    r = runner.invoke(app, ["goodput", "--db", str(tmp_path / "empty.db")])
    assert r.exit_code == 0 and "nothing recorded" in r.stdout


def test_gpus_per_node_from_the_settings(db, tmp_path):
    cfg = tmp_path / "recover.toml"
    cfg.write_text("gpus_per_node = 4\n")
    r = runner.invoke(app, ["--config", str(cfg), "goodput", "--db", db, "--job", "100", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["gpus_per_node"] == 4 and rep["gpus_per_node_from"] == "gpus_per_node in the settings"
    assert close(rep["cluster"]["lost_gpu_hours"]["total"], gh(sum(A.values()) + sum(B.values()), 8))
    cfg.write_text("gpus_per_node = 0\n")
    r = runner.invoke(app, ["--config", str(cfg), "goodput", "--db", db])
    assert r.exit_code == 2 and "gpus_per_node must be" in r.stderr


# -- measured against modelled, per job (docs/goodput.md) ------------------------------------
# running node-seconds (first progress -> failure or end, x nodes): job 100 2 x (3000 + 2830 +
# 9900); job 200 1 x (1000 + 2000); job 300 1 x 8800. 4 failures over them: the site's rate.
NODE_DAYS = (2 * (3000 + 2830 + 9900) + 3000 + 8800) / DAY
RATE = 4 / NODE_DAYS  # 7.99 failures per node-day


def modelled(nodes, interval, restart):
    lam = nodes * RATE / DAY
    return 1 - lam * (restart + interval / 2)


def test_each_job_has_its_measured_ettr_beside_the_models(db):
    rep = report(db)
    fr = rep["failure_rate"]
    assert fr["failures"] == 4 and close(fr["node_days"], NODE_DAYS) and close(fr["failure_rate_per_node_day"], RATE)
    jobs = {j["job"]: j["model"] for j in rep["jobs"]}
    # job 100: checkpoints at steps 1000, 2000, 7000: every 1000 steps x 2.0 s; u0 the mean of its
    # two failures' detection + decision + restart + queue
    m = jobs["100"]
    u0 = (sum(A.values()) - A["work_lost"] + sum(B.values()) - B["work_lost"]) / 2  # 1685
    assert (m["nodes"], m["interval_steps"]) == (2, 1000) and close(m["interval_s"], 2000) and close(m["restart_s"], u0)
    assert close(m["ettr"], modelled(2, 2000, u0)) and close(m["measured_ettr"], J100_PRODUCTIVE / J100_WALL)
    assert close(m["gap"], m["measured_ettr"] - m["ettr"])
    assert m["estimates"] == ["checkpoint write time: not recorded by anything, taken as 0"]
    # jobs 200 and 300 recorded no checkpoint: the interval is their whole running time, said so
    for name, interval, restart in (("200", 3000, 1000), ("300", 8800, 1000)):
        m = jobs[name]
        assert close(m["interval_s"], interval) and close(m["restart_s"], restart), name
        assert close(m["ettr"], modelled(1, interval, restart)), name
        assert any("no checkpoint recorded" in why for why in m["estimates"]), name
    assert any("themselves estimates" in why for why in jobs["200"]["estimates"])
    out = render_text(rep)
    assert "measured against modelled ETTR" in out and "~0.503" in out
    assert "job 300: checkpoint interval: no checkpoint recorded" in out


def test_a_job_that_never_failed_takes_the_sites_restart_overhead(db):
    rep = report(db, since=T0 + 10100, until=T0 + 20000)  # only job 100's last attempt: no failure in it
    (job,) = rep["jobs"]
    assert rep["failure_rate"]["failures"] == 0 and rep["failure_rate"]["failure_rate_per_node_day"] == 0
    m = job["model"]
    assert m["ettr"] == 1.0 and m["restart_s"] == 0.0
    assert any("no failure in the window" in why for why in m["estimates"])
