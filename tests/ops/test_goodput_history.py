"""The goodput report reads the scheduler's accounting where the site has it (issue 23, item 2):
sacct's submission, start and end of each attempt take precedence over the states the
controller's polls recorded (each within a poll of the truth), and each job, attempt and failure
says where its times came from. Without accounting, or offline, the recorded states as before.

One job (1 node, 4 GPUs), times in seconds after T0, no incident, no requeue in the journal:
  recorded by the polls: attempt 0 PENDING 3, RUNNING 12 on n1; attempt 1 PENDING 104, RUNNING 134 on n2
  sacct:                 attempt 0 submitted 0, started 10 on n1, REQUEUED at 100;
                         attempt 1 submitted 100, eligible 110, started 130 on n2, running
  progress: attempt 0 from 20 (step 1) to 90 (step 71), checkpoint 50, 1.0 s a step;
            attempt 1 from 150 (step 51) to 300 (step 201)
With sacct the failure of attempt 0 is: failed 90, requeue taking effect 100 (decision 10 s),
waiting 100, running 130 (queue 30 s), resumed 150 (restart 20 s), work lost (71 - 50) x 1 s;
with the recorded states: decision 90 -> 104 (14 s), queue 104 -> 134 (30 s), restart 134 -> 150.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.ops.goodput import report_from_store
from engine.ops.goodput_text import render_text
from engine.store import Store
from scheduler_adapters import registry
from scheduler_adapters.base import CommandResult, JobRecord
from scheduler_adapters.slurm import SlurmAdapter

T0 = datetime(2026, 11, 2, 8, tzinfo=timezone.utc).timestamp()
NOW = T0 + 3600
runner = CliRunner()

SACCT = [
    JobRecord("7", 0, "REQUEUED", T0, T0, T0 + 10, T0 + 100, ("n1",)),
    JobRecord("7", 1, "RUNNING", T0 + 100, T0 + 110, T0 + 130, None, ("n2",)),
]


@pytest.fixture
def db(tmp_path) -> str:
    path = str(tmp_path / "g.db")
    store = Store(path)
    for attempt, state, t, nodes in ((0, "PENDING", 3, ()), (0, "RUNNING", 12, ("n1",)), (1, "PENDING", 104, ())):
        store.add_job_event("7", attempt, state, T0 + t, list(nodes), origin="slurm:jobs")
    store.add_job_event("7", 1, "RUNNING", T0 + 134, ["n2"], origin="slurm:jobs")
    for attempt, first, step0, last, step in ((0, 20, 1, 90, 71), (1, 150, 51, 300, 201)):
        store.note_progress(
            "7",
            attempt,
            first_at=T0 + first,
            first_step=step0,
            last_at=T0 + last,
            step=step,
            checkpoint=50 if attempt == 0 else None,
            checkpoint_at=T0 + 50 if attempt == 0 else None,
            step_time=1.0,
        )
    store.close()
    return path


def _report(db: str, history=None) -> dict:
    store = Store(db, readonly=True)
    try:
        return report_from_store(store, now=NOW, gpus_per_node=4, history=history)
    finally:
        store.close()


def _seconds(f: dict) -> dict:
    return {k: round(v["seconds"], 3) for k, v in f["lost"].items()}


def test_sacct_times_take_precedence_and_say_so(db):
    rep = _report(db, (SACCT, ""))
    (job,) = rep["jobs"]
    assert job["history"] == "sacct" and job["submitted_at"] == T0
    assert job["attempts"][0]["scheduler"] == {
        "from": "sacct",
        "state": "REQUEUED",
        "submit_at": T0,
        "eligible_at": T0,
        "start_at": T0 + 10,
        "end_at": T0 + 100,
    }
    assert job["attempts"][1]["scheduler"]["eligible_at"] == T0 + 110
    assert job["attempts"][1]["nodes"] == ["n2"]
    (f,) = rep["failures"]
    assert f["history"] == "sacct"
    assert (f["failed_at"], f["waiting_at"], f["running_at"], f["resumed_at"]) == (
        T0 + 90,
        T0 + 100,
        T0 + 130,
        T0 + 150,
    )
    assert _seconds(f) == {"work_lost": 21.0, "detection": 0.0, "decision": 10.0, "restart": 20.0, "queue": 30.0}
    assert rep["history"] == {"from": "sacct", "note": "", "jobs_from_sacct": ["7"]}
    assert "  job states from sacct (Slurm's accounting)\n" in render_text(rep)


def test_offline_and_without_accounting_the_recorded_states_as_before(db):
    for history, note in ((None, "the scheduler was not asked"), ((None, "sacct: accounting disabled"), None)):
        rep = _report(db, history)
        (job,) = rep["jobs"]
        assert job["history"] == "recorded" and job["submitted_at"] == T0 + 3
        assert job["attempts"][0]["scheduler"] == {
            "from": "recorded",
            "submit_at": T0 + 3,
            "eligible_at": None,
            "start_at": T0 + 12,
            "end_at": None,
        }
        (f,) = rep["failures"]
        assert f["history"] == "recorded" and (f["waiting_at"], f["running_at"]) == (T0 + 104, T0 + 134)
        assert _seconds(f) == {"work_lost": 21.0, "detection": 0.0, "decision": 14.0, "restart": 16.0, "queue": 30.0}
        assert rep["history"]["from"] == "recorded"
        assert rep["history"]["note"] == (note or "sacct: accounting disabled")


def test_records_of_a_job_id_from_another_time_are_not_used(db):
    old = [JobRecord("7", 0, "COMPLETED", T0 - 86400, T0 - 86400, T0 - 86390, T0 - 86000, ("n3",))]
    rep = _report(db, (old, ""))
    assert rep["jobs"][0]["history"] == "recorded" and rep["jobs"][0]["submitted_at"] == T0 + 3
    assert "another time" in rep["history"]["note"]


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def test_the_cli_asks_the_named_scheduler_and_falls_back_saying_why(db, monkeypatch):
    """--scheduler names the adapter (here the Slurm adapter on a fake sacct, through its Runner)."""
    lines = [
        f"7|REQUEUED|{_stamp(T0)}|{_stamp(T0)}|{_stamp(T0 + 10)}|{_stamp(T0 + 100)}|n1",
        f"7|RUNNING|{_stamp(T0 + 100)}|{_stamp(T0 + 110)}|{_stamp(T0 + 130)}|Unknown|n2",
    ]
    calls: list[list[str]] = []

    def sacct(argv, timeout):
        calls.append(list(argv))
        return CommandResult(0, "\n".join(lines) + "\n")

    monkeypatch.setitem(registry._FACTORIES, "fake-sacct", lambda **kw: SlurmAdapter(runner=sacct))
    r = runner.invoke(app, ["goodput", "--db", db, "--scheduler", "fake-sacct", "--job", "7", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["jobs"][0]["history"] == "sacct" and rep["failures"][0]["running_at"] == T0 + 130
    assert calls[0][0] == "sacct" and calls[0][-2:] == ["-j", "7"]
    # the window asked for starts a day before the store's first state of the job
    assert calls[0][calls[0].index("-S") + 1] == _stamp(T0 + 3 - 86400)

    r = runner.invoke(app, ["goodput", "--db", db, "--scheduler", "simulated"])
    assert r.exit_code == 0, r.output
    assert "as the controller's polls recorded them (the simulated cluster keeps no accounting)" in r.output

    def down(argv, timeout):
        return CommandResult(1, "", "sacct: error: Problem talking to the database: Connection refused")

    monkeypatch.setitem(registry._FACTORIES, "fake-sacct", lambda **kw: SlurmAdapter(runner=down))
    r = runner.invoke(app, ["goodput", "--db", db, "--scheduler", "fake-sacct", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["jobs"][0]["history"] == "recorded" and "Problem talking to the database" in rep["history"]["note"]

    r = runner.invoke(app, ["goodput", "--db", db, "--scheduler", "nosuch"])
    assert r.exit_code == 2
    r = runner.invoke(app, ["goodput", "--model", "--scheduler", "slurm", "--nodes", "1"])
    assert r.exit_code == 2 and "--scheduler" in r.output
