"""Two controllers on one store (issue 22 items 2 and 3), SQLite or PostgreSQL, in process: the
second follows, says who leads and records nothing; when the leader dies (its lease not renewed) it
takes over from the read positions the store committed, so no line is lost and none is read twice."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
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


def test_follower_takes_over_without_losing_or_repeating_a_line(tmp_path: Path, caplog, db_target) -> None:
    caplog.set_level(logging.WARNING)
    view = Live(tmp_path)  # only its folders and store readers: no process is started
    rules = write_rules(tmp_path / "rules.yaml", view.markers)
    res = load_rulebook([str(rules)], defaults=False)
    assert res.ok, res.errors
    log = view.logs / "train.out"
    log.write_text("")
    a = _controller(db_target, tmp_path, res.compiled)
    b = _controller(db_target, tmp_path, res.compiled)
    try:
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
    finally:
        for c in (a, b):
            c.follower.stop()
            c.leader.release()
            c.store.close()


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
