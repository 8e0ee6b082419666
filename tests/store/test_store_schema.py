"""The store's versioned migrations (engine/store/schema.py), its one error type, and its parts."""

from __future__ import annotations

import sqlite3
import time

import pytest

from engine.errors import StoreError
from engine.facts import Fact
from engine.store import SCHEMA_VERSION, ActionStatus, Store
from engine.store.schema import MIGRATIONS

#: the schema main created before the migration list (engine/store.py at c4bd91e), marked 1 as it
#: marked every database: head, context and mode_why in the tables, flood added by ALTER at open
_OLD_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE incidents (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, job TEXT, attempt INTEGER, node TEXT,
    status TEXT NOT NULL DEFAULT 'open', opened_at REAL NOT NULL, last_evidence_at REAL NOT NULL,
    closed_at REAL, detected_wall REAL NOT NULL, fault_class TEXT, decision TEXT,
    nodes TEXT NOT NULL DEFAULT '[]', fault_fact TEXT, reason TEXT, guards TEXT NOT NULL DEFAULT '[]',
    mode TEXT, fingerprint TEXT, closed_wall REAL, rulebook TEXT, context TEXT, mode_why TEXT
);
CREATE INDEX incidents_key ON incidents(key, status);
CREATE TABLE facts (
    incident INTEGER NOT NULL REFERENCES incidents(id), id TEXT NOT NULL, kind TEXT NOT NULL,
    attrs TEXT NOT NULL, at REAL NOT NULL, origin TEXT NOT NULL, count INTEGER NOT NULL DEFAULT 1,
    derived_by INTEGER, PRIMARY KEY (incident, id)
);
CREATE INDEX facts_id ON facts(id);
CREATE TABLE firings (
    id INTEGER PRIMARY KEY AUTOINCREMENT, incident INTEGER REFERENCES incidents(id),
    rule TEXT NOT NULL, rule_mark TEXT NOT NULL, description TEXT NOT NULL, matched TEXT NOT NULL,
    asserted TEXT, at REAL NOT NULL
);
CREATE INDEX firings_incident ON firings(incident);
CREATE TABLE actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, incident INTEGER NOT NULL REFERENCES incidents(id),
    idem_key TEXT NOT NULL UNIQUE, action TEXT NOT NULL, target TEXT NOT NULL, argv TEXT NOT NULL,
    mode TEXT NOT NULL, status TEXT NOT NULL, rc INTEGER, output TEXT, verified INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0, note TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE INDEX actions_incident ON actions(incident);
CREATE INDEX actions_action ON actions(action);
CREATE INDEX incidents_job ON incidents(job);
CREATE INDEX incidents_closed ON incidents(closed_at);
CREATE TABLE offsets (
    source TEXT PRIMARY KEY, inode INTEGER, offset INTEGER NOT NULL, line_no INTEGER NOT NULL,
    updated_at REAL NOT NULL, head TEXT
);
CREATE TABLE progress (
    job TEXT NOT NULL, attempt INTEGER NOT NULL, step INTEGER, checkpoint INTEGER, last_at REAL,
    PRIMARY KEY (job, attempt)
);
CREATE TABLE silences (
    id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, until REAL NOT NULL,
    reason TEXT NOT NULL, by TEXT, created_at REAL NOT NULL
);
CREATE TABLE quarantine (
    id INTEGER PRIMARY KEY AUTOINCREMENT, origin TEXT NOT NULL, input TEXT NOT NULL,
    error TEXT NOT NULL, at REAL NOT NULL, count INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE reviews (
    id INTEGER PRIMARY KEY AUTOINCREMENT, incident INTEGER NOT NULL REFERENCES incidents(id),
    verdict TEXT NOT NULL, did TEXT, by TEXT, at REAL NOT NULL
);
INSERT INTO meta(key, value) VALUES ('schema', '1');
"""

#: an older database still marked 1: no offsets.head, no incidents.context or mode_why, no
#: facts.flood, and none of the tables added later (progress, silences, quarantine, reviews)
_OLDER_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE incidents (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, job TEXT, attempt INTEGER, node TEXT,
    status TEXT NOT NULL DEFAULT 'open', opened_at REAL NOT NULL, last_evidence_at REAL NOT NULL,
    closed_at REAL, detected_wall REAL NOT NULL, fault_class TEXT, decision TEXT,
    nodes TEXT NOT NULL DEFAULT '[]', fault_fact TEXT, reason TEXT, guards TEXT NOT NULL DEFAULT '[]',
    mode TEXT, fingerprint TEXT, closed_wall REAL, rulebook TEXT
);
CREATE TABLE facts (
    incident INTEGER NOT NULL REFERENCES incidents(id), id TEXT NOT NULL, kind TEXT NOT NULL,
    attrs TEXT NOT NULL, at REAL NOT NULL, origin TEXT NOT NULL, count INTEGER NOT NULL DEFAULT 1,
    derived_by INTEGER, PRIMARY KEY (incident, id)
);
CREATE TABLE firings (
    id INTEGER PRIMARY KEY AUTOINCREMENT, incident INTEGER REFERENCES incidents(id),
    rule TEXT NOT NULL, rule_mark TEXT NOT NULL, description TEXT NOT NULL, matched TEXT NOT NULL,
    asserted TEXT, at REAL NOT NULL
);
CREATE TABLE actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, incident INTEGER NOT NULL REFERENCES incidents(id),
    idem_key TEXT NOT NULL UNIQUE, action TEXT NOT NULL, target TEXT NOT NULL, argv TEXT NOT NULL,
    mode TEXT NOT NULL, status TEXT NOT NULL, rc INTEGER, output TEXT, verified INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0, note TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE TABLE offsets (
    source TEXT PRIMARY KEY, inode INTEGER, offset INTEGER NOT NULL, line_no INTEGER NOT NULL,
    updated_at REAL NOT NULL
);
INSERT INTO meta(key, value) VALUES ('schema', '1');
"""


def _old_database(path, schema: str) -> None:
    db = sqlite3.connect(path)
    db.executescript(schema)
    db.execute(
        "INSERT INTO incidents(key, job, attempt, node, status, opened_at, last_evidence_at, closed_at, detected_wall, "
        "fault_class, decision, nodes, reason, mode) VALUES "
        "('job:7:0', '7', 0, NULL, 'closed', 100.0, 110.0, 120.0, 100.0, 'gpu_fell_off_bus', 'isolate', "
        "'[\"n1\"]', 'Xid 79 on n1', 'act')"
    )
    db.execute(
        "INSERT INTO facts(incident, id, kind, attrs, at, origin) VALUES (1, 'f1', 'xid', '{\"code\": 79}', 105.0, 'a:1')"
    )
    db.execute(
        "INSERT INTO actions(incident, idem_key, action, target, argv, mode, status, created_at, updated_at) "
        "VALUES (1, '1:drain:n1', 'drain', 'n1', '[\"scontrol\"]', 'act', 'verified', 120.0, 121.0)"
    )
    db.execute("INSERT INTO offsets(source, inode, offset, line_no, updated_at) VALUES ('a', 5, 10, 2, 1.0)")
    db.commit()
    db.close()


def _columns(store: Store, table: str) -> set[str]:
    return {r[1] for r in store.db.execute(f"PRAGMA table_info({table})")}


@pytest.mark.parametrize("schema", [_OLD_SCHEMA, _OLDER_SCHEMA], ids=["main-before-migrations", "older"])
def test_a_database_of_the_old_schema_is_migrated_and_still_readable(tmp_path, schema):
    path = tmp_path / "old.db"
    _old_database(path, schema)

    store = Store(path)
    assert not store.fresh  # it knows of the past
    assert store.meta("schema") == str(SCHEMA_VERSION)
    assert {"context", "mode_why"} <= _columns(store, "incidents")
    assert "flood" in _columns(store, "facts") and "head" in _columns(store, "offsets")

    (inc,) = store.incidents()
    assert (inc.job, inc.decision, inc.nodes, inc.mode, inc.context, inc.mode_why) == (
        "7",
        "isolate",
        ("n1",),
        "act",
        None,
        None,
    )
    assert [f.id for f, _, _ in store.facts(1)] == ["f1"]
    assert store.fact_floods(1) == {}
    assert [a["status"] for a in store.actions(1)] == ["verified"]
    assert store.offsets() == {"a": (5, 10, 2)}
    # what the newer columns and tables hold is written and read back
    store.bump_fact("f1", 2, flood={"last": "x"})
    store.flush()
    assert store.fact_floods(1) == {"f1": {"last": "x"}}
    store.add_silence("n1", until=500.0, reason="maintenance", by="op", start=1.0)
    store.quarantine("a:3", "POISON", "boom", at=5.0)
    assert [q["input"] for q in store.quarantined()] == ["POISON"]
    store.close()

    # opened again: nothing to migrate, nothing lost
    again = Store(path)
    assert again.meta("schema") == str(SCHEMA_VERSION)
    assert len(again.incidents()) == 1 and len(again.silences()) == 1
    again.close()


def test_an_old_database_opened_read_only_is_read_without_migrating(tmp_path):
    path = tmp_path / "old.db"
    _old_database(path, _OLDER_SCHEMA)
    ro = Store(path, readonly=True)
    (inc,) = ro.incidents()
    assert inc.context is None and inc.mode_why is None
    assert ro.fact_floods(1) == {} and ro.quarantined() == []
    assert ro.meta("schema") == "1"
    ro.close()


def test_a_new_database_is_at_the_last_version_and_fresh(tmp_path):
    store = Store(tmp_path / "new.db")
    assert store.fresh
    assert store.meta("schema") == str(SCHEMA_VERSION) == str(MIGRATIONS[-1][0])
    store.close()
    assert not Store(tmp_path / "new.db").fresh


def test_a_new_in_memory_store_is_a_copy_of_the_migrated_schema_and_its_own(tmp_path, monkeypatch):
    """An in-memory store is a copy of one migrated once per process (schema.migrate_new_memory):
    the same tables, indexes, triggers and version as a file migrated step by step, fresh, and
    sharing no row with the store before it."""

    def schema(store):
        return store.db.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        ).fetchall()

    on_disk = Store(tmp_path / "new.db")
    first = Store(":memory:")
    assert first.fresh and first.meta("schema") == str(SCHEMA_VERSION)
    assert [tuple(r) for r in schema(first)] == [tuple(r) for r in schema(on_disk)]
    first.set_meta("seen", "1")
    first.db.execute("INSERT INTO meta(key, value) VALUES ('extra', 'x')")
    second = Store(":memory:")
    assert second.meta("seen") is None and second.meta("extra") is None and second.fresh
    assert second.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    for store in (on_disk, first, second):
        store.close()
    # a replaced list of migrations (a test's) is what the next in-memory store gets
    import engine.store.schema as schema_module

    def boom(db, dialect):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(schema_module, "MIGRATIONS", ((1, (boom,)),))
    with pytest.raises(StoreError, match="disk I/O error"):
        Store(":memory:")
    monkeypatch.undo()
    again = Store(":memory:")
    assert again.meta("schema") == str(SCHEMA_VERSION)
    again.close()


def test_the_versions_are_in_order_without_gaps():
    assert [v for v, _ in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))


def test_a_migration_that_fails_leaves_the_database_at_the_version_before(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    _old_database(path, _OLDER_SCHEMA)
    import engine.store.schema as schema

    def boom(db, dialect):
        raise sqlite3.OperationalError("disk I/O error")

    broken = tuple((v, (boom,) if v == 4 else steps) for v, steps in schema.MIGRATIONS)
    monkeypatch.setattr(schema, "MIGRATIONS", broken)
    with pytest.raises(StoreError, match="disk I/O error"):
        Store(path)
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0] == "3"
    assert "head" in {r[1] for r in db.execute("PRAGMA table_info(offsets)")}  # 3 was applied
    assert "flood" not in {r[1] for r in db.execute("PRAGMA table_info(facts)")}  # 4 was not
    db.close()
    monkeypatch.undo()
    store = Store(path)  # the next open goes on from there
    assert store.meta("schema") == str(SCHEMA_VERSION) and "flood" in _columns(store, "facts")
    store.close()


def test_reading_a_broken_database_raises_store_error_never_sqlite3(tmp_path):
    """Rows are fetched inside the store: an error while reading them is a StoreError (M12)."""
    store = Store(tmp_path / "r.db")
    store.db.execute("DROP TABLE silences")
    with pytest.raises(StoreError):
        store.silences()
    store.close()
    with pytest.raises(StoreError):  # closed: sqlite3.ProgrammingError inside
        store.incidents()


def test_a_transaction_that_cannot_begin_raises_store_error(tmp_path):
    store = Store(tmp_path / "t.db")
    store.db.close()
    with pytest.raises(StoreError):
        with store.transaction():
            pass


def test_quarantine_at_time_zero_is_kept_as_zero():
    """``at=0.0`` is a time, not a missing one (L6)."""
    store = Store()
    store.quarantine("a:1", "x", "e", at=0.0)
    store.quarantine("a:2", "y", "e", at=0.0)
    store.quarantine("a:2", "y", "e", at=0.0)  # counted again, at 0.0 still
    assert sorted((q["origin"], q["at"], q["count"]) for q in store.quarantined()) == [
        ("a:1", 0.0, 1),
        ("a:2", 0.0, 2),
    ]
    before = time.time()
    store.quarantine("a:3", "z", "e")
    assert next(q["at"] for q in store.quarantined() if q["origin"] == "a:3") >= before


def test_the_actuator_s_journal_methods():
    store = Store()
    inc = store.open_incident("job:1:0", "1", 0, None, 1.0)
    other = store.open_incident("job:2:0", "2", 0, None, 1.0)
    a = store.add_action(inc, "k1", "drain", "n1", ["scontrol", "x"], "act", ActionStatus.PLANNED)
    store.add_action(inc, "k2", "notify", "ops", ["echo"], "recommend", ActionStatus.RECOMMENDED)
    b = store.add_action(other, "k3", "drain", "n2", ["scontrol"], "act", ActionStatus.PLANNED)
    assert a is not None and b is not None
    assert store.unfinished_incidents() == [inc, other]
    store.update_action(b, ActionStatus.VERIFIED)
    assert store.unfinished_incidents() == [inc]
    assert store.actions(other)[0]["status"] == "verified" == ActionStatus.VERIFIED
    store.set_action_argv(a, ["scontrol", "y"])
    assert store.actions(inc, status=ActionStatus.PLANNED)[0]["argv"] == ["scontrol", "y"]
    store.set_incident_guards(inc, [{"guard": "shared_node", "why": "w"}])
    store.add_guards(inc, [{"guard": "escalated", "why": "e"}])
    assert [g["guard"] for g in store.incident(inc).guards] == ["shared_node", "escalated"]
    assert f"{ActionStatus.SKIPPED}" == "skipped" and str(ActionStatus.STARTED) == "started"


def test_the_store_s_parts_are_each_under_600_lines():
    import engine.store as pkg
    from pathlib import Path

    for part in Path(pkg.__file__).parent.glob("*.py"):
        assert len(part.read_text().splitlines()) < 600, part


def test_facts_are_added_and_counted_across_the_parts():
    store = Store()
    inc = store.open_incident("job:1:0", "1", 0, None, 1.0)
    store.bump_fact("f", 3)  # counted before its row exists: not counted on it
    store.add_fact(inc, Fact("xid", {"code": 79}, 1.0, "a:1", "f"))
    store.bump_fact("f", 2)
    store.flush()
    assert [(f.id, n) for f, n, _ in store.facts(inc)] == [("f", 3)]


class _CorruptWhileReading:
    """The connection, but every SELECT's cursor fails after its first row, as SQLite does when it
    meets a corrupt page in the middle of a result."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def execute(self, sql, args=()):
        cur = self.real.execute(sql, args)
        if not sql.lstrip().upper().startswith("SELECT"):
            return cur
        real_rows = cur.fetchall()

        class Cursor:
            lastrowid, rowcount = cur.lastrowid, cur.rowcount

            def fetchone(self):
                return real_rows[0] if real_rows else None

            def fetchall(self):
                raise sqlite3.DatabaseError("database disk image is malformed")

            def __iter__(self):
                yield real_rows[0]
                raise sqlite3.DatabaseError("database disk image is malformed")

        return Cursor()


@pytest.mark.parametrize(
    "read",
    [
        lambda s: s.incidents(),
        lambda s: s.facts(1),
        lambda s: s.actions(1),
        lambda s: s.silences(),
        lambda s: s.offsets(),
        lambda s: s.firings(1),
    ],
    ids=["incidents", "facts", "actions", "silences", "offsets", "firings"],
)
def test_an_error_met_while_reading_rows_is_a_store_error(read):
    """M12: the rows were iterated after the wrapper had returned, so a corrupt page met on the
    second row surfaced as a raw sqlite3.DatabaseError."""
    store = Store()
    for n in range(2):
        store.open_incident(f"job:{n}:0", str(n), 0, None, 1.0)
        store.add_fact(1, Fact("xid", {"code": 79}, 1.0, "a:1", f"f{n}"))
        store.add_action(1, f"k{n}", "drain", f"n{n}", ["x"], "act", "planned")
        store.add_silence(f"n{n}", 10.0, "r", None, start=0.0)
        store.save_offset(f"s{n}", 1, 2, 3)
        store.add_firing(1, "r", "f:1", "d", {}, None, 1.0)
    store.flush()
    store.db = _CorruptWhileReading(store.db)  # type: ignore[assignment]
    with pytest.raises(StoreError, match="malformed"):
        read(store)
