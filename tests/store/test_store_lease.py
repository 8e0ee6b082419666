"""The leader lease and its fence, on one database shared by two connections (two controllers),
SQLite and PostgreSQL (``db_target``):
one holder at a time, a new term at each change, and a stale term refused by the database itself
(the triggers of schema migration 7), not by the code that believes it leads."""

from __future__ import annotations

import time

import pytest

from engine.clock import FakeClock
from engine.errors import Fenced
from engine.live.leader import Leadership
from engine.store import ActionStatus, Store
from tests.helpers import wait_for


@pytest.fixture
def two(db_target):
    a, b = Store(db_target), Store(db_target)
    yield a, b
    a.close()
    b.close()


def _incident(store: Store) -> int:
    with store.transaction():
        return store.open_incident(key="job:1:0", job="1", attempt=0, node=None, at=1.0)


def test_one_holder_and_who_it_is(two):
    a, b = two
    got = a.acquire("hostA:1:1", ttl=30)
    assert got.ours and got.term == 1
    other = b.acquire("hostB:2:2", ttl=30)
    assert not other.ours and other.holder == "hostA:1:1" and other.term == 1 and other.left_s > 25
    assert a.acquire("hostA:1:1", ttl=30).ours  # the holder keeps it, same term
    assert a.lease().term == 1


def test_expiry_by_the_database_clock_gives_the_next_term(two):
    a, b = two
    assert a.acquire("A", ttl=0.2).ours
    time.sleep(0.3)
    assert not a.renew("A", 1, ttl=30)  # ran out: not renewed, even by its holder
    got = b.acquire("B", ttl=30)
    assert got.ours and got.term == 2


def test_released_lease_is_taken_at_once(two):
    a, b = two
    a.acquire("A", ttl=30)
    assert a.release("A", 1)
    assert b.acquire("B", ttl=30).term == 2


def test_stale_term_refused_by_the_database(two):
    """An old leader that still believes it leads (a pause) journals nothing: its insert and its
    update are refused by the triggers, and its batch transaction by the fence at commit."""
    a, b = two
    inc = _incident(a)
    a.term = a.acquire("A", ttl=0.2).term
    aid = a.add_action(inc, "k1", "drain", "n1", ["scontrol"], "act", ActionStatus.PLANNED)
    assert aid is not None
    time.sleep(0.3)
    b.term = b.acquire("B", ttl=30).term
    assert b.term == 2
    with pytest.raises(Fenced):
        a.update_action(aid, ActionStatus.STARTED, attempt=True)
    with pytest.raises(Fenced):
        a.add_action(inc, "k2", "requeue", "1", ["scontrol"], "act", ActionStatus.PLANNED)
    with pytest.raises(Fenced):
        with a.transaction():
            a.set_meta("spool_offsets", "{}")
    assert a.meta("spool_offsets") is None  # rolled back
    row = b.actions(inc)[0]
    assert row["status"] == ActionStatus.PLANNED and row["attempts"] == 0
    b.update_action(aid, ActionStatus.STARTED, attempt=True)  # the live term writes
    assert b.actions(inc)[0]["term"] == 2


def test_no_term_refused_once_a_lease_exists(two):
    """A process holding no lease (a second controller that never led) cannot act either."""
    a, b = two
    inc = _incident(a)
    a.term = a.acquire("A", ttl=30).term
    with pytest.raises(Fenced):
        b.add_action(inc, "k1", "drain", "n1", ["scontrol"], "act", ActionStatus.PLANNED)
    # recommendations are not the leader's journal of acts: recorded by whoever holds the lease
    assert b.add_action(inc, "k2", "drain", "n1", ["x"], "recommend", ActionStatus.RECOMMENDED) is not None


def test_store_without_a_lease_is_unfenced(db_target):
    """A store no controller ever led (replay, tools, unit tests) journals as before."""
    s = Store(db_target)
    inc = _incident(s)
    assert s.add_action(inc, "k1", "drain", "n1", ["x"], "act", ActionStatus.PLANNED) is not None
    s.close()


def test_controllers_listed(two):
    a, b = two
    a.heartbeat("A", "leader", 1, "act", 1.0)
    b.heartbeat("B", "follower", None, "act", 2.0)
    rows = {r["holder"]: r for r in a.controllers()}
    assert rows["A"]["role"] == "leader" and rows["B"]["role"] == "follower" and rows["B"]["age_s"] < 5
    b.forget_controller("B")
    assert [r["holder"] for r in a.controllers()] == ["A"]


def test_controllers_not_heard_of_are_forgotten(two):
    a, b = two
    b.heartbeat("B", "follower", None, "act", 1.0)
    time.sleep(0.3)
    a.heartbeat("A", "leader", 1, "act", 1.0, forget_after=0.2)  # B was killed: not listed
    assert [r["holder"] for r in a.controllers()] == ["A"]


def test_a_paused_leader_is_fenced_by_the_database_clock(db_target):
    """Two controllers on one store, each with its own Leadership. The leader is paused (it simply
    stops renewing; its process clock is frozen, so it still believes it leads); the lease runs out
    by the database's clock (on PostgreSQL the server's), the follower takes it under the next
    term, and every write the old leader still tries is refused by the database."""
    frozen = FakeClock(start=1_000.0)  # the paused leader's own clock: it never sees time pass
    a = Store(db_target, clock=frozen)
    b = Store(db_target, clock=FakeClock(start=1e10))  # a follower whose clock runs far ahead
    try:
        lead = Leadership(a, ttl=0.5, holder="A", clock=frozen)
        follow = Leadership(b, ttl=30, holder="B")
        assert lead.tick() == "took" and a.term == 1
        assert follow.tick() is None and b.term is None  # its clock says nothing: the lease is live
        inc = _incident(a)
        aid = a.add_action(inc, "k1", "drain", "n1", ["scontrol"], "act", ActionStatus.PLANNED)
        assert aid is not None  # the holder's write lands
        with pytest.raises(Fenced):  # and no one else's
            b.add_action(inc, "k2", "drain", "n2", ["scontrol"], "act", ActionStatus.PLANNED)

        # the pause: no tick from A; the database's clock alone ends its lease
        wait_for("the lease to run out by the database's clock", lambda: not b.lease().live, timeout=10)
        assert lead.acting()  # A's frozen clock still says it leads: only the database stops it
        # the follower looks again on its own schedule (every second at most)
        wait_for("the follower to take the lease", lambda: follow.tick() == "took", timeout=10)
        assert b.term == 2 and b.lease().holder == "B"

        with pytest.raises(Fenced):
            a.update_action(aid, ActionStatus.STARTED, attempt=True)
        with pytest.raises(Fenced):
            a.add_action(inc, "k3", "requeue", "1", ["scontrol"], "act", ActionStatus.PLANNED)
        with pytest.raises(Fenced):
            with a.transaction():
                a.save_offset("/logs/slurm-1.out", 7, 4096, 12)
        assert b.offsets() == {}  # rolled back with the refused transaction
        assert [(r["idem_key"], r["status"], r["term"]) for r in b.actions(inc)] == [("k1", "planned", 1)]
        b.update_action(aid, ActionStatus.STARTED, attempt=True)  # the new leader resumes it
        assert b.actions(inc)[0]["term"] == 2
    finally:
        a.close()
        b.close()
