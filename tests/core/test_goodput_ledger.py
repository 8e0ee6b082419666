"""The job ledger (engine/core/ledger.py) and the store's goodput tables (schema 9): the job
states and progress facts the engine sees are recorded as they arrive, so that
`recover goodput` reads the store and never a log; an older store is migrated, or read as it is."""

from __future__ import annotations

import pytest

from engine.core.incidents import Engine
from engine.core.ledger import JobLedger, printed_step_time
from engine.facts import Fact
from engine.ops.goodput import report_from_store
from engine.store import ActionStatus, Store
from tests.store.test_store_schema import _OLD_SCHEMA, _old_database

RULES = """
rules:
  - id: f.hang
    description: no progress for longer than the bound
    when: [{as: s, kind: stall}]
    then: {fault: {fault_class: nccl_timeout, reason: "hang: idle {{ s.idle_s }} s"}}
policy:
  settle: 60s
  hang: {bound: 60s}
"""


def job(at, state, attempt=0, nodes=()):
    attrs = {"job": "9", "attempt": attempt, "state": state, "reason": "", "nodes": list(nodes)}
    return Fact.make("job", attrs, at, "slurm:jobs")


def prog(at, attempt=0, **attrs):
    return Fact.make("progress", {"job": "9", "attempt": attempt, **attrs}, at, f"slurm-9.out:{at}")


@pytest.fixture
def engine(write_rules, tmp_path):
    result = write_rules(RULES)
    assert result.ok, [str(d) for d in result.diagnostics]
    return Engine(result.compiled, Store(str(tmp_path / "ledger.db")))


def test_the_engine_records_job_states_and_progress_facts(engine):
    e = engine
    e.ingest(job(0, "PENDING"))
    e.ingest(job(10, "RUNNING", nodes=("n1", "n2")))
    for i, t in enumerate(range(40, 101, 20)):  # steps 1..4, 20 s apart, printed as 20000 ms
        e.ingest(prog(float(t), step=i + 1, step_time_ms=20000.0))
        if t == 60:
            e.ingest(prog(75.0, checkpoint=2))
    rows = e.store.progress_rows()
    # written at the first progress and at the checkpoint, not at every line
    assert rows[("9", 0)]["step"] == 2 and rows[("9", 0)]["checkpoint"] == 2
    e.advance(161.0)  # silent past the 60 s bound: a hang opens an incident
    e.advance(230.0)
    e.ingest(job(240, "FAILED", nodes=("n1", "n2")))
    e.ingest(job(250, "PENDING", attempt=1))
    e.ingest(job(300, "RUNNING", attempt=1, nodes=("n1", "n3")))
    e.ingest(prog(330.0, attempt=1, step=3, it_per_s=0.05))
    e.finish()
    store = e.store
    events = [(ev["attempt"], ev["state"], ev["at"], ev["nodes"]) for ev in store.job_events("9")]
    assert events == [
        (0, "PENDING", 0.0, []),
        (0, "RUNNING", 10.0, ["n1", "n2"]),
        (0, "FAILED", 240.0, ["n1", "n2"]),
        (1, "PENDING", 250.0, []),
        (1, "RUNNING", 300.0, ["n1", "n3"]),
    ]
    assert store.job_events()[0]["origin"] == "slurm:jobs"
    rows = store.progress_rows()
    assert rows[("9", 0)] == {
        "step": 4,
        "checkpoint": 2,
        "last_at": 100.0,
        "first_at": 40.0,
        "first_step": 1,
        "checkpoint_at": 75.0,
        "step_time": 20.0,
    }
    assert rows[("9", 1)]["first_at"] == 330.0 and rows[("9", 1)]["step_time"] == 20.0  # 1 / 0.05 it/s

    # and the report reads them: failed at the last progress (100), 2 steps past the checkpoint
    rep = report_from_store(store, now=1000.0, gpus_per_node=4)
    (f,) = rep["failures"]
    assert (f["fault_class"], f["gpus"], f["step"], f["checkpoint"], f["lost_steps"]) == ("nccl_timeout", 8, 4, 2, 2)
    assert f["lost"]["work_lost"]["seconds"] == pytest.approx(40.0)
    assert f["failed_at"] == 100.0 and f["waiting_at"] == 250.0 and f["running_at"] == 300.0
    assert f["lost"]["queue"]["seconds"] == pytest.approx(50.0)
    assert f["lost"]["restart"]["seconds"] == pytest.approx(30.0)  # running 300 -> first progress 330
    # no requeue in the journal: the next attempt's first state stands for it, and says so
    assert "no requeue started in the journal" in f["lost"]["decision"]["estimate"]
    store.close()


def test_progress_is_written_at_most_every_interval_between_events(tmp_path):
    store = Store(str(tmp_path / "s.db"))
    ledger = JobLedger(store, every=300.0)
    for t in range(0, 301, 10):
        ledger.progress(prog(float(t), step=t))
    assert store.progress_rows()[("9", 0)]["step"] == 300  # first at 0, then again at 300
    ledger.progress(prog(310.0, step=310))
    assert store.progress_rows()[("9", 0)]["step"] == 300
    ledger.job(job(320.0, "COMPLETED"))
    assert store.progress_rows()[("9", 0)]["step"] == 310  # the attempt's end writes what it has
    store.close()


def test_lines_printed_after_a_requeued_attempt_began_are_that_attempts(tmp_path):
    # seen on the real Slurm: a requeued attempt's first lines are read before the poll that says
    # it runs, so the log is still the old attempt's; the old one is gone once the new one waits
    store = Store(str(tmp_path / "r.db"))
    ledger = JobLedger(store, every=300.0)
    ledger.job(job(0.0, "RUNNING", nodes=["n1"]))
    ledger.progress(prog(10.0, step=1))
    ledger.progress(prog(20.0, step=11))
    ledger.job(job(21.0, "COMPLETING", attempt=1))  # the old attempt's teardown, under the new count
    ledger.progress(prog(21.5, step=12))  # its last line, flushed as it is killed: still attempt 0's
    ledger.job(job(22.0, "PENDING", attempt=1))
    ledger.progress(prog(40.0, step=1001))  # printed by attempt 1, tagged 0: the scheduler has not said yet
    ledger.job(job(41.0, "RUNNING", attempt=1, nodes=["n2"]))
    ledger.progress(prog(42.0, attempt=1, step=1002))
    ledger.job(job(50.0, "COMPLETED", attempt=1, nodes=["n2"]))
    rows = store.progress_rows("9")
    assert (rows[("9", 0)]["step"], rows[("9", 0)]["last_at"]) == (12, 21.5)
    assert (rows[("9", 1)]["first_step"], rows[("9", 1)]["first_at"], rows[("9", 1)]["step"]) == (1001, 40.0, 1002)
    assert ledger._begun == {}  # the job ended: nothing kept of it
    store.close()


def test_note_progress_merges_with_what_is_stored(tmp_path):
    store = Store(str(tmp_path / "s.db"))
    store.note_progress("1", 0, first_at=50.0, first_step=5, step=10, last_at=60.0, checkpoint=8, checkpoint_at=55.0)
    store.note_progress("1", 0, first_at=40.0, first_step=3, step=7, last_at=58.0, checkpoint=6, checkpoint_at=70.0)
    store.save_progress("1", 0, 12, None, 65.0)  # the incident's close, as before schema 9
    row = store.progress_rows()[("1", 0)]
    assert (row["first_at"], row["first_step"], row["step"], row["last_at"]) == (40.0, 3, 12, 65.0)
    assert (row["checkpoint"], row["checkpoint_at"]) == (8, 55.0)  # a lower checkpoint moves nothing
    assert row["step_time"] is None
    store.close()


def test_an_acted_action_keeps_when_it_was_last_started(tmp_path, monkeypatch):
    import time

    now = [1000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    store = Store(str(tmp_path / "s.db"))
    inc = store.open_incident("job:1:0", "1", 0, None, 1000.0)
    aid = store.add_action(inc, "k", "requeue", "1", ["scontrol", "requeue", "1"], "act", ActionStatus.PLANNED)
    assert aid is not None
    assert store.actions()[0]["issued_at"] is None
    for t, status in ((1010.0, ActionStatus.STARTED), (1011.0, ActionStatus.FAILED), (1040.0, ActionStatus.STARTED)):
        now[0] = t
        store.update_action(aid, status, attempt=status == ActionStatus.STARTED)
    now[0] = 1041.0
    store.update_action(aid, ActionStatus.SUCCEEDED, rc=0)
    assert store.actions()[0]["issued_at"] == 1040.0
    store.close()


def test_printed_step_times():
    assert printed_step_time(prog(0, step_time=1.5)) == 1.5
    assert printed_step_time(prog(0, step_time_ms=250.0)) == 0.25
    assert printed_step_time(prog(0, it_per_s=4.0)) == 0.25
    assert printed_step_time(prog(0, samples_per_s=100.0)) is None  # per sample, not per step
    assert printed_step_time(prog(0, step=3)) is None


def test_an_old_store_is_migrated_and_read_only_it_is_read_as_it_is(tmp_path):
    path = tmp_path / "old.db"
    _old_database(path, _OLD_SCHEMA)
    ro = Store(path, readonly=True)  # never migrated: no job_events, no new progress columns
    rep = report_from_store(ro, now=1000.0)
    ro.close()
    (f,) = rep["failures"]  # its one incident, job 7, with nothing else recorded
    assert f["job"] == "7" and f["estimated"]
    rw = Store(path)
    assert {"first_at", "first_step", "checkpoint_at", "step_time"} <= {
        r[1] for r in rw.db.execute("PRAGMA table_info(progress)")
    }
    assert "issued_at" in {r[1] for r in rw.db.execute("PRAGMA table_info(actions)")}
    rw.add_job_event("7", 1, "PENDING", 200.0)
    assert [e["state"] for e in rw.job_events("7")] == ["PENDING"]
    rw.close()


def test_a_running_attempt_counts_until_the_last_controller_stopped_watching(tmp_path):
    import time

    store = Store(str(tmp_path / "s.db"))
    t0 = time.time()
    store.add_job_event("5", 0, "PENDING", t0 - 100.0)
    store.add_job_event("5", 0, "RUNNING", t0 - 90.0, ["n1"])
    view = store.acquire("host:1:0", ttl=30.0)
    assert report_from_store(store, now=t0 + 50.0)["jobs"][0]["wall_s"] == pytest.approx(150.0)  # it leads: to now
    store.release("host:1:0", view.term)
    (j,) = report_from_store(store, now=t0 + 10_000.0)["jobs"]
    assert j["wall_s"] == pytest.approx(100.0, abs=5.0)  # to the release, not to now
    assert any("stopped watching" in why for why in j["estimates"])
    store.close()
