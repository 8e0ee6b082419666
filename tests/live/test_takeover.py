"""Two controllers on one store (issue 22 items 2 and 3), SQLite or PostgreSQL, in process: the
second follows, says who leads and records nothing; when the leader dies (its lease not renewed) it
takes over from the read positions the store committed, so no line is lost and none is read twice."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from engine.live.controller import Controller, ControllerConfig
from engine.rulebook import load_rulebook
from engine.store import Store
from tests.helpers import wait_for
from tests.live.conftest import append, assert_exactly_once, evts, write_rules, Live

LEASE_S = 1.0


def _controller(db: str, tmp: Path, compiled) -> Controller:
    cfg = ControllerConfig(db=db, follow=[str(tmp / "logs" / "*.out")], dry_run=True, lease_s=LEASE_S)
    return Controller(cfg, compiled)


def _evt_numbers(db: str) -> Counter:
    """The evt lines recorded in the store, each with how many times (read as any reader would)."""
    store = Store(db, readonly=True)
    try:
        rows = store.db.execute("SELECT attrs FROM facts WHERE kind = 'log'").fetchall()
    finally:
        store.close()
    out: Counter = Counter()
    for attrs in (json.loads(r[0]) for r in rows):
        if attrs.get("matcher") == "evt":
            out[attrs["n"]] += 1
    return out


def test_follower_takes_over_without_losing_or_repeating_a_line(tmp_path: Path, caplog, db_target, monkeypatch) -> None:
    import engine.live.batch
    import engine.live.ingest

    # the leader's last read must stay in one transaction (rolled back below), however slow the
    # machine: neither a full batch nor a file's turn running out commits a piece of it
    monkeypatch.setattr(engine.live.batch, "BATCH_SECONDS", 60.0)
    monkeypatch.setattr(engine.live.ingest, "PASS_SECONDS", 60.0)
    caplog.set_level(logging.WARNING)
    with _two_controllers(tmp_path, db_target) as (log, a, b):
        assert a.leader.acting() and not b.leader.acting()
        assert any("another controller leads this store" in r.getMessage() for r in caplog.records)
        a.startup()
        b.startup()
        append(log, evts(0, 50))

        def a_read_all() -> bool:
            a.step()
            b.step()  # the follower reads nothing and records nothing meanwhile
            return len(_evt_numbers(db_target)) >= 50

        wait_for(a_read_all, 20, 0.02, what="the leader to read the first lines")
        assert_exactly_once(_evt_numbers(db_target), set(range(50)))

        # the leader reads more but dies before its transaction commits: what it read is lost
        # with it (rolled back, as a kill does), and its lease is never renewed again
        append(log, evts(50, 80))
        a.batch.begin()
        for t, data in a.follower.read_ready():
            a.files.feed(a.engine, t, data)
        a.batch.abort()
        assert len(_evt_numbers(db_target)) == 50

        started = time.monotonic()
        wait_for(lambda: (b.step(), b.leader.acting())[1], LEASE_S + 10, 0.02, what="the follower to take over")
        assert time.monotonic() - started <= LEASE_S + 10
        assert b.leader.term == 2

        def b_read_rest() -> bool:
            b.step()
            return len(_evt_numbers(db_target)) >= 80

        wait_for(b_read_rest, 20, 0.02, what="the new leader to read the rest")
        append(log, evts(80, 90))  # and what comes after, once
        wait_for(lambda: (b.step(), len(_evt_numbers(db_target)) >= 90)[1], 20, 0.02, what="the new lines")
        assert_exactly_once(_evt_numbers(db_target), set(range(90)))
        # the old leader, resumed, finds its lease gone and does nothing
        a.step()
        assert not a.leader.acting()
        assert_exactly_once(_evt_numbers(db_target), set(range(90)))


def test_a_leader_whose_lease_ran_out_after_started_runs_nothing(tmp_path: Path) -> None:
    """The pause can fall between the journal's 'started' and the command: the actuator asks
    again whether it leads, and leaves the action 'started' for the next leader to verify."""
    from engine.live.actuator import Actuator
    from engine.store import ActionStatus, Store

    class Adapter:
        ran: list = []

        def run(self, argv, timeout=30.0):
            self.ran.append(argv)
            raise AssertionError("a command ran without the lease")

    res = load_rulebook([str(write_rules(tmp_path / "rules.yaml", tmp_path))], defaults=False)
    store = Store(tmp_path / "r.db")
    with store.transaction():
        inc = store.open_incident(key="job:1:0", job="1", attempt=0, node=None, at=1.0)
        aid = store.add_action(inc, "k", "drain", "n1", ["scontrol", "update"], "act", ActionStatus.PLANNED)
    act = Actuator(store, Adapter(), res.compiled)
    act.may_act = lambda: False
    act._run(store.actions(inc)[0])
    row = store.actions(inc)[0]
    assert row["id"] == aid and row["status"] == ActionStatus.STARTED and Adapter.ran == []
    store.close()


#: what the pipeline writes to the shared store (the lease and the heartbeats are Leadership's)
_PIPELINE_TABLES = (
    "meta",
    "incidents",
    "facts",
    "firings",
    "actions",
    "offsets",
    "progress",
    "quarantine",
    "job_events",
)


def _shared_rows(db: str) -> dict[str, list]:
    store = Store(db, readonly=True)
    try:
        return {t: sorted(map(repr, map(tuple, store._exec(f"SELECT * FROM {t}")))) for t in _PIPELINE_TABLES}
    finally:
        store.close()


@contextlib.contextmanager
def _two_controllers(tmp_path: Path, db: str) -> Iterator[tuple[Path, Controller, Controller]]:
    """Two controllers on ``db`` over one empty job log, not started: ``a`` was made first and
    holds the lease. Both stopped and their lease given up at the end."""
    view = Live(tmp_path)  # only its folders and store readers: no process is started
    res = load_rulebook([str(write_rules(tmp_path / "rules.yaml", view.markers))], defaults=False)
    assert res.ok, res.errors
    log = view.logs / "train.out"
    log.write_text("")
    a = _controller(db, tmp_path, res.compiled)
    b = _controller(db, tmp_path, res.compiled)
    try:
        yield log, a, b
    finally:
        for c in (a, b):
            c.follower.stop()
            c.leader.release()
            c.store.close()


@contextlib.contextmanager
def _leader_and_follower(tmp_path: Path, db: str) -> Iterator[tuple[Path, Controller, Controller]]:
    """``_two_controllers``, started: ``a`` leads, ``b`` follows."""
    with _two_controllers(tmp_path, db) as (log, a, b):
        a.startup()
        b.startup()
        yield log, a, b


def test_a_warm_follower_evaluates_records_nothing_and_its_takeover_resumes_from_the_committed_positions(
    tmp_path: Path, db_target, monkeypatch
) -> None:
    """The follower reads and evaluates every line into a scratch store of its own (its engine
    warm, the log open and positioned) while the shared store stays as the leader left it; at
    takeover it goes back to the leader's committed positions: the lines it had read ahead are
    recorded once, by it as leader, and a BOOM it had already judged in scratch is decided once."""
    import engine.live.standby as standby

    monkeypatch.setattr(standby, "LAG_EVERY_S", 0.0)
    with _leader_and_follower(tmp_path, db_target) as (log, a, b):
        append(log, evts(0, 40))
        wait_for(lambda: (a.step(), len(_evt_numbers(db_target)) >= 40)[1], 20, 0.02, what="the leader's lines")
        # the leader dies; what it read after its last commit is rolled back with it
        append(log, evts(40, 70) + "2026-11-29T17:00:01 rank0: BOOM now\n")
        before = _shared_rows(db_target)
        shadow = b.engine

        def b_read_ahead() -> bool:
            b.step()
            return b.batch.lines_total >= 71

        wait_for(b_read_ahead, 20, 0.02, what="the follower to read every line")
        assert not b.leader.acting() and b.standby.active
        assert b.engine is not shadow and b.batch.store is b.standby.scratch  # its own engine, on scratch
        assert b.standby.scratch is not None and b.standby.scratch.count_incidents() >= 1  # it evaluated
        assert b.follower.files[str(log)].offset == log.stat().st_size  # the log open, read to its end
        assert b.standby.behind_bytes == 0  # nothing the leader committed is unread by it
        assert _shared_rows(db_target) == before  # and it wrote nothing at all to the shared store

        wait_for(lambda: (b.step(), b.leader.acting())[1], LEASE_S + 10, 0.02, what="the follower to take over")
        assert not b.standby.active and b.batch.store is b.store and b.engine.store is b.store
        wait_for(lambda: (b.step(), len(_evt_numbers(db_target)) >= 70)[1], 20, 0.02, what="the lines again")
        wait_for(
            lambda: (b.step(), b.store.count_incidents("closed") >= 1)[1], 20, 0.05, step=0.05, what="the BOOM decided"
        )
        assert_exactly_once(_evt_numbers(db_target), set(range(70)))
        booms = [i for i in b.store.incidents() if i.fault_class == "nccl_timeout"]
        assert len(booms) == 1, booms


def test_the_follower_trails_the_leader_by_what_it_has_not_read(tmp_path: Path, monkeypatch) -> None:
    """``behind_bytes`` (the recover_follower_behind_bytes gauge, and ``recover status``): bytes
    the leader has committed in a followed file that the follower has not read yet."""
    import engine.live.standby as standby

    monkeypatch.setattr(standby, "LAG_EVERY_S", 0.0)
    db = str(tmp_path / "r.db")
    with _leader_and_follower(tmp_path, db) as (log, a, b):
        b.step()  # following, the log known at its (empty) start
        append(log, evts(0, 10))
        wait_for(lambda: (a.step(), len(_evt_numbers(db)) >= 10)[1], 20, 0.02, what="the leader's lines")

        def stalled(*args, **kwargs):  # the follower reads nothing more
            yield from ()

        b.follower.read_ready = stalled  # type: ignore[method-assign]
        b.step()
        assert b.standby.behind_bytes == log.stat().st_size
        assert b.metrics.follower_behind._value.get() == log.stat().st_size
        assert json.loads(json.dumps(b._seen()))["behind_bytes"] == log.stat().st_size


def test_a_controller_that_fails_to_start_gives_up_the_lease_it_took(tmp_path: Path, monkeypatch) -> None:
    """The lease is taken first thing; a start that fails after it (in the constructor, or in
    ``run()`` before its loop) releases it, so a standby takes over at once rather than after
    the lease's time to live (60 s here)."""
    import pytest

    from engine.errors import RecoverError

    res = load_rulebook([str(write_rules(tmp_path / "rules.yaml", tmp_path))], defaults=False)
    db = str(tmp_path / "r.db")

    def lease_free() -> bool:
        store = Store(db)
        try:
            view = store.lease()
            return view is None or not view.live
        finally:
            store.close()

    bad = ControllerConfig(db=db, scheduler="no-such-scheduler", lease_s=60.0)
    with pytest.raises(RecoverError, match="unknown scheduler adapter"):
        Controller(bad, res.compiled)
    assert lease_free()

    ctl = Controller(ControllerConfig(db=db, lease_s=60.0), res.compiled)
    assert ctl.leader.acting() and not lease_free()

    def broken_startup() -> None:
        raise OSError("the spool cannot be watched")

    monkeypatch.setattr(ctl, "startup", broken_startup)
    with pytest.raises(OSError):
        ctl.run()
    assert lease_free()
    other = Controller(ControllerConfig(db=db, lease_s=60.0), res.compiled)
    try:
        assert other.leader.acting()  # at once: nothing to wait out
    finally:
        other.leader.release()
        other.store.close()


def test_the_follower_starts_its_scratch_afresh_and_still_records_nothing(tmp_path: Path, monkeypatch) -> None:
    """Every RECYCLE_S the scratch store and its engine are replaced (what the follower concluded
    is worth nothing): the old one is closed, reading goes on where it was, the shared store is untouched."""
    import engine.live.standby as standby

    db = str(tmp_path / "r.db")
    with _leader_and_follower(tmp_path, db) as (log, a, b):
        b.step()
        first = b.standby.scratch
        before = _shared_rows(db)
        append(log, evts(0, 10))
        monkeypatch.setattr(standby, "RECYCLE_S", 0.0)
        wait_for(lambda: (b.step(), b.batch.lines_total >= 10)[1], 20, 0.02, what="the follower's lines")
        assert b.standby.scratch is not first and b.batch.store is b.standby.scratch
        assert b.engine.store is b.standby.scratch and b.follower.files[str(log)].offset == log.stat().st_size
        assert _shared_rows(db) == before
