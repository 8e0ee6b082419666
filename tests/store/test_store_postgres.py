"""The store on PostgreSQL (issue 22 item 1): the same schema as on SQLite through the one migration
list, the types that SQLite lets slide (64-bit offsets and inodes, times to the microsecond), a
read-only reader that cannot write, and errors that name the store without its password."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from engine.errors import StoreError
from engine.facts import Fact
from engine.store import SCHEMA_VERSION, Store


def _columns_sqlite(path: str) -> dict[str, set[str]]:
    db = sqlite3.connect(path)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    out = {t: {r[1] for r in db.execute(f"PRAGMA table_info({t})")} for t in tables if not t.startswith("sqlite_")}
    db.close()
    return out


def _columns_pg(store: Store) -> dict[str, set[str]]:
    rows = store.db.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
    )
    out: dict[str, set[str]] = {}
    for r in rows:
        out.setdefault(r[0], set()).add(r[1])
    return out


def test_the_same_schema_as_sqlite(tmp_path, pg_dsn):
    sq = Store(tmp_path / "r.db")
    sq.close()
    pg = Store(pg_dsn)
    assert pg.fresh and pg.meta("schema") == str(SCHEMA_VERSION)
    want = _columns_sqlite(str(tmp_path / "r.db"))
    got = _columns_pg(pg)
    got["facts"].discard("rowid")  # SQLite's is implicit
    assert got == want
    pg.close()
    again = Store(pg_dsn)  # up to date: nothing applied twice
    assert not again.fresh and again.meta("schema") == str(SCHEMA_VERSION)
    again.close()


def test_two_processes_migrating_at_once(pg_dsn):
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            Store(pg_dsn).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    s = Store(pg_dsn)
    assert s.meta("schema") == str(SCHEMA_VERSION)
    s.close()


def test_values_sqlite_keeps_and_a_narrow_type_would_not(pg_dsn):
    s = Store(pg_dsn)
    big = 2**40 + 7  # a log file past 4 GiB; an inode number of a large filesystem
    s.save_offset("/logs/a.out", big, big, 123456789, head="h1")
    s.save_offset("/logs/a.out", big, big + 1, 123456790)  # head kept when not given
    assert s.offsets()["/logs/a.out"] == (big, big + 1, 123456790)
    assert s.offset_heads() == {"/logs/a.out": "h1"}
    at = 1796536708.123456
    inc = s.open_incident("job:1:0", "1", 0, None, at)
    s.add_fact(inc, Fact("xid", {"code": 79, "node": "n1"}, at, "kern.log:1", "f1"))
    s.add_fact(inc, Fact("xid", {"code": 48, "node": "n1"}, at, "kern.log:2", "f2"))
    s.bump_fact("f1", 2)
    s.touch_incident(inc, at + 0.5)
    s.flush()
    assert s.incident(inc).opened_at == at and s.incident(inc).last_evidence_at == at + 0.5
    facts = s.facts(inc)
    assert [(f.id, n) for f, n, _ in facts] == [("f1", 3), ("f2", 1)]  # same time: as recorded
    s.save_progress("1", 0, 10, None, at)
    s.save_progress("1", 0, 5, 2, at + 1)  # the highest step stays
    assert s.progress_of("1")[0]["step"] == 10 and s.progress_of("1")[0]["checkpoint"] == 2
    aid = s.add_action(inc, "k1", "drain", "n1", ["scontrol", "update"], "act", "planned")
    assert aid is not None and s.add_action(inc, "k1", "drain", "n1", ["x"], "act", "planned") is None
    s.update_action(aid, "succeeded", rc=0, verified=True, attempt=True)
    row = s.actions(inc)[0]
    assert row["verified"] == 1 and row["attempts"] == 1 and row["issued_at"] is None
    s.quarantine("x:1", "100% bad ? line", "boom")  # % and ? in values are values
    assert s.quarantined()[0]["input"] == "100% bad ? line"
    s.close()


def test_a_reader_cannot_write(pg_dsn):
    Store(pg_dsn).close()
    ro = Store(pg_dsn, readonly=True)
    assert ro.incidents() == []
    with pytest.raises(StoreError, match="read-only"):
        ro.open_incident("job:1:0", "1", 0, None, 1.0)
    ro.close()


def test_errors_name_the_store_without_its_password(pg_server):
    # port 1: nothing listens there
    dsn = "postgresql://recover:s3cret@127.0.0.1:1/recover?connect_timeout=2"
    with pytest.raises(StoreError) as got:
        Store(dsn)
    assert "s3cret" not in str(got.value) and "recover:***@127.0.0.1:1" in str(got.value)


def test_a_dropped_connection_is_opened_again_outside_a_transaction(pg_dsn):
    """The server ends the session (a restart, a failover): the statement that meets it fails with
    ``StoreError``, a transaction under way loses all of it, and the next statement reconnects."""
    import psycopg

    s = Store(pg_dsn)
    inc = s.open_incident("job:1:0", "1", 0, None, 1.0)

    def kill() -> None:
        pid = s.db.conn.info.backend_pid
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    kill()
    with pytest.raises(StoreError):
        s.incident(inc)
    assert s.incident(inc).key == "job:1:0"  # opened again

    with pytest.raises(StoreError):
        with s.transaction():
            s.set_reason(inc, "first half")
            kill()
            s.save_offset("/logs/x", 1, 10, 1)  # meets the dropped session: the whole of it is lost
    assert s.incident(inc).reason is None and s.offsets() == {}
    s.set_reason(inc, "after")
    assert s.incident(inc).reason == "after"
    s.close()
