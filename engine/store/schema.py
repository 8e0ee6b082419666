"""The store's schema as an ordered list of migrations, each applied once, in one transaction.

``meta.schema`` holds the version a database is at; opening it for writing applies every
migration above that, in order, each with the version bump in the same transaction (a crash
leaves the database at the last version fully applied). Two processes opening one database at
once are safe: the version is read again inside the write transaction.

Before this list, every database was marked 1 whatever it held, and columns were added with
``ALTER TABLE`` at each open, their "duplicate column" error ignored. A database marked 1 may
therefore lack the tables and indexes added since version 1 was written, or already have any of
the columns added since: migration 2 creates what is missing, and every column added in a
migration is added only where it is missing.

A new column or table is a new entry at the end; an entry once released is never edited.

One list serves both databases (``dialect.py``): a statement is written once, in SQLite's types,
which PostgreSQL gets as its own (``Dialect.ddl``); where the two cannot say the same thing (the
stale-term triggers, a column added where missing, the schema version's table) a step is given
per dialect (``PerDialect``) or is a function of the connection and its dialect.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

from engine.store.dialect import NOW_MARK, SQLITE, Dialect

__all__ = [
    "FENCED_MESSAGE",
    "MIGRATIONS",
    "NOW_SQL",
    "SCHEMA_VERSION",
    "PerDialect",
    "migrate",
    "migrate_new_memory",
    "schema_version",
]


@dataclass(frozen=True)
class PerDialect:
    """Statements that differ between the databases: each gets its own (none: nothing to do)."""

    sqlite: tuple[str, ...] = ()
    postgresql: tuple[str, ...] = ()


#: a statement (both databases), statements per database, or a step that looks at the database first
Step = Union[str, PerDialect, Callable[[Any, Dialect], None]]

#: the tables and indexes as the first versioned store created them
_TABLES: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS incidents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    job TEXT, attempt INTEGER, node TEXT,
    status TEXT NOT NULL DEFAULT 'open',          -- open | closed
    opened_at REAL NOT NULL, last_evidence_at REAL NOT NULL, closed_at REAL,
    detected_wall REAL NOT NULL,                   -- wall clock when it opened (latency metrics)
    fault_class TEXT, decision TEXT, nodes TEXT NOT NULL DEFAULT '[]',
    fault_fact TEXT, reason TEXT, guards TEXT NOT NULL DEFAULT '[]', mode TEXT,
    fingerprint TEXT, closed_wall REAL, rulebook TEXT
)""",
    "CREATE INDEX IF NOT EXISTS incidents_key ON incidents(key, status)",
    """CREATE TABLE IF NOT EXISTS facts (
    incident INTEGER NOT NULL REFERENCES incidents(id),
    id TEXT NOT NULL, kind TEXT NOT NULL, attrs TEXT NOT NULL, at REAL NOT NULL,
    origin TEXT NOT NULL, count INTEGER NOT NULL DEFAULT 1, derived_by INTEGER,
    PRIMARY KEY (incident, id)
)""",
    "CREATE INDEX IF NOT EXISTS facts_id ON facts(id)",
    """CREATE TABLE IF NOT EXISTS firings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    incident INTEGER REFERENCES incidents(id),
    rule TEXT NOT NULL, rule_mark TEXT NOT NULL, description TEXT NOT NULL,
    matched TEXT NOT NULL,      -- {alias: fact id}
    asserted TEXT,              -- fact id of what it derived
    at REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS firings_incident ON firings(incident)",
    """CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    incident INTEGER NOT NULL REFERENCES incidents(id),
    idem_key TEXT NOT NULL UNIQUE,
    action TEXT NOT NULL, target TEXT NOT NULL, argv TEXT NOT NULL,
    mode TEXT NOT NULL,         -- recommend | act
    status TEXT NOT NULL,       -- an ActionStatus (engine/store/journal.py)
    rc INTEGER, output TEXT, verified INTEGER, attempts INTEGER NOT NULL DEFAULT 0,
    note TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS actions_incident ON actions(incident)",
    "CREATE INDEX IF NOT EXISTS actions_action ON actions(action)",
    "CREATE INDEX IF NOT EXISTS incidents_job ON incidents(job)",
    "CREATE INDEX IF NOT EXISTS incidents_closed ON incidents(closed_at)",
    """CREATE TABLE IF NOT EXISTS offsets (
    source TEXT PRIMARY KEY, inode INTEGER, "offset" INTEGER NOT NULL, line_no INTEGER NOT NULL,
    updated_at REAL NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS progress (
    job TEXT NOT NULL, attempt INTEGER NOT NULL, step INTEGER, checkpoint INTEGER, last_at REAL,
    PRIMARY KEY (job, attempt)
)""",
    """CREATE TABLE IF NOT EXISTS silences (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node TEXT NOT NULL, until REAL NOT NULL, reason TEXT NOT NULL, by TEXT, created_at REAL NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    origin TEXT NOT NULL,       -- path:line, spool:node, ...
    input TEXT NOT NULL,        -- the line or fact (bounded)
    error TEXT NOT NULL, at REAL NOT NULL, count INTEGER NOT NULL DEFAULT 1
)""",
    """CREATE TABLE IF NOT EXISTS reviews (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    incident INTEGER NOT NULL REFERENCES incidents(id),
    verdict TEXT NOT NULL, did TEXT, by TEXT, at REAL NOT NULL
)""",
)


#: the database's clock, in Unix seconds: on SQLite the clock of the process that writes (the
#: library runs in it), on PostgreSQL the server's; every lease decision is taken in SQL against
#: this one expression (a marker each dialect spells: ``Dialect.now``)
NOW_SQL = NOW_MARK

#: a write with a stale term is refused here, by the database, whatever the process believes
FENCED_MESSAGE = "recover: stale leader term"

#: the same fence on PostgreSQL: trigger functions, raising the same message (one function for an
#: action's insert and update; the lease's checks the term a leader's transaction commits under)
_PG_FENCE: tuple[str, ...] = (
    f"""CREATE OR REPLACE FUNCTION recover_actions_term() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.mode = 'act' AND EXISTS (SELECT 1 FROM lease WHERE name = 'leader')
     AND NOT EXISTS (SELECT 1 FROM lease WHERE name = 'leader' AND term = NEW.term AND expires > {NOW_SQL}) THEN
    RAISE EXCEPTION '{FENCED_MESSAGE}';
  END IF;
  RETURN NEW;
END $$""",
    "DROP TRIGGER IF EXISTS actions_term ON actions",
    "CREATE TRIGGER actions_term BEFORE INSERT OR UPDATE ON actions FOR EACH ROW EXECUTE FUNCTION recover_actions_term()",
    f"""CREATE OR REPLACE FUNCTION recover_lease_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.fence IS DISTINCT FROM OLD.term OR OLD.expires <= {NOW_SQL} THEN
    RAISE EXCEPTION '{FENCED_MESSAGE}';
  END IF;
  RETURN NEW;
END $$""",
    "DROP TRIGGER IF EXISTS lease_fence ON lease",
    "CREATE TRIGGER lease_fence BEFORE UPDATE OF fence ON lease FOR EACH ROW EXECUTE FUNCTION recover_lease_fence()",
)

_LEASE: tuple[Step, ...] = (
    """CREATE TABLE IF NOT EXISTS lease (
    name TEXT PRIMARY KEY,          -- 'leader'
    holder TEXT NOT NULL,           -- host:pid:start of the controller that holds it
    term INTEGER NOT NULL,          -- +1 at each change of holder: the fencing token
    expires REAL NOT NULL,          -- database clock (NOW_SQL)
    acquired_at REAL NOT NULL, renewed_at REAL NOT NULL,
    fence INTEGER                   -- written by a leader's transaction to have its term checked
)""",
    """CREATE TABLE IF NOT EXISTS controllers (
    holder TEXT PRIMARY KEY, role TEXT NOT NULL, term INTEGER, mode TEXT,
    started_at REAL NOT NULL, seen_at REAL NOT NULL,
    info TEXT                       -- JSON: what it sees (the scheduler's health)
)""",
    PerDialect(
        sqlite=(
            # an acted action is journaled and moved only under the lease's live term (once a lease exists:
            # a store no controller ever led, a replay's or a test's, has no leader to fence)
            f"""CREATE TRIGGER IF NOT EXISTS actions_term_insert BEFORE INSERT ON actions
WHEN NEW.mode = 'act' AND EXISTS (SELECT 1 FROM lease WHERE name = 'leader')
  AND NOT EXISTS (SELECT 1 FROM lease WHERE name = 'leader' AND term = NEW.term AND expires > {NOW_SQL})
BEGIN SELECT RAISE(ABORT, '{FENCED_MESSAGE}'); END""",
            f"""CREATE TRIGGER IF NOT EXISTS actions_term_update BEFORE UPDATE ON actions
WHEN NEW.mode = 'act' AND EXISTS (SELECT 1 FROM lease WHERE name = 'leader')
  AND NOT EXISTS (SELECT 1 FROM lease WHERE name = 'leader' AND term = NEW.term AND expires > {NOW_SQL})
BEGIN SELECT RAISE(ABORT, '{FENCED_MESSAGE}'); END""",
            # a leader's write transaction (incidents, facts, read offsets) sets lease.fence to its term
            # before it commits: refused unless that term is the live one
            f"""CREATE TRIGGER IF NOT EXISTS lease_fence BEFORE UPDATE OF fence ON lease
WHEN NEW.fence IS NOT OLD.term OR OLD.expires <= {NOW_SQL}
BEGIN SELECT RAISE(ABORT, '{FENCED_MESSAGE}'); END""",
        ),
        postgresql=_PG_FENCE,
    ),
)


def _add_column(table: str, column: str, decl: str) -> Callable[[Any, Dialect], None]:
    """``ALTER TABLE ... ADD COLUMN`` where the column is missing (see the module docstring)."""

    def step(db: Any, dialect: Dialect) -> None:
        if dialect is not SQLITE:
            db.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {dialect.ddl(decl)}")
            return
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})").fetchall()}
        if column not in have:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")

    step.__doc__ = f"{table}.{column} {decl}"
    return step


#: (version, steps), in order
MIGRATIONS: tuple[tuple[int, Sequence[Step]], ...] = (
    # PostgreSQL has no rowid: facts get one, the order they were recorded in (SQLite's is implicit)
    (
        1,
        (
            *_TABLES,
            PerDialect(
                postgresql=("ALTER TABLE facts ADD COLUMN IF NOT EXISTS rowid BIGINT GENERATED BY DEFAULT AS IDENTITY",)
            ),
        ),
    ),
    # a database the ad-hoc era marked 1 may predate some tables and indexes
    (2, _TABLES),
    # offsets keep a fingerprint of the file's first bytes (a new file on a reused inode)
    (3, (_add_column("offsets", "head", "TEXT"),)),
    # floods keep their last line and who repeated it
    (4, (_add_column("facts", "flood", "TEXT"),)),
    # each incident says who recorded it, and who said where jobs ran (Store.context)
    (5, (_add_column("incidents", "context", "TEXT"),)),
    # an incident says which policy keys gave its decision its mode (act or recommend)
    (6, (_add_column("incidents", "mode_why", "TEXT"),)),
    # one leader, fenced: the lease row, the controllers that share the store, and the term every
    # acted journal row carries; the triggers make the database itself refuse a stale term
    (7, (_add_column("actions", "term", "INTEGER"), *_LEASE)),
    # an incident names its suspects: [{rank, node, signals: [{signal, detail, origin}]}] (issue 21)
    (8, (_add_column("incidents", "suspects", "TEXT"),)),
    # goodput (issue 23, docs/goodput.md): the job state changes the controller saw, when each
    # acted action was last started, and what a job attempt's progress says beyond its last step
    (
        9,
        (
            """CREATE TABLE IF NOT EXISTS job_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL, attempt INTEGER NOT NULL,
    state TEXT NOT NULL,        -- the scheduler's: PENDING RUNNING COMPLETED FAILED NODE_FAIL ...
    at REAL NOT NULL,           -- engine time of the poll that saw it (wall time live)
    nodes TEXT NOT NULL DEFAULT '[]', reason TEXT, origin TEXT
)""",
            "CREATE INDEX IF NOT EXISTS job_events_job ON job_events(job, attempt, at)",
            _add_column("actions", "issued_at", "REAL"),
            _add_column("progress", "first_at", "REAL"),
            _add_column("progress", "first_step", "INTEGER"),
            _add_column("progress", "checkpoint_at", "REAL"),
            _add_column("progress", "step_time", "REAL"),
        ),
    ),
    # a shared outage holds its jobs' requeues back: the incident that holds an action (issue 21)
    (10, (_add_column("actions", "held_by", "INTEGER"),)),
)

SCHEMA_VERSION = MIGRATIONS[-1][0]


def schema_version(db: Any, dialect: Dialect = SQLITE) -> int | None:
    """The version ``meta`` records; None for a database that never had one (a new file)."""
    if dialect is SQLITE:
        probe = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    else:
        probe = "SELECT 1 WHERE to_regclass('meta') IS NOT NULL"
    if db.execute(probe).fetchone() is None:
        return None
    row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    if row is None:
        return None
    try:
        return int(row[0])
    except (TypeError, ValueError):
        raise sqlite3.DatabaseError(f"meta.schema is {row[0]!r}, not a version") from None


#: PostgreSQL: the transaction-scoped advisory lock two processes migrating one database take
#: (SQLite's ``BEGIN IMMEDIATE`` is the write lock itself); an arbitrary constant of this program
_MIGRATE_LOCK = 0x5245434F


def _apply(db: Any, dialect: Dialect, step: Step) -> None:
    if isinstance(step, PerDialect):
        for sql in step.sqlite if dialect is SQLITE else step.postgresql:
            db.execute(dialect.ddl(sql))
    elif callable(step):
        step(db, dialect)
    else:
        db.execute(dialect.ddl(step))


def migrate(db: Any, dialect: Dialect = SQLITE) -> int | None:
    """Apply the migrations above the database's version; the version it had (None: new).

    ``db`` is in autocommit mode (``isolation_level=None``; psycopg's autocommit): each migration
    is its own write transaction. A database newer than this code is left as it is: its extra
    columns do not stop this version from reading and writing the ones it knows."""
    had = schema_version(db, dialect)
    if had is not None and had >= SCHEMA_VERSION:
        return had  # up to date: no write lock taken (another process may be writing)
    for version, steps in MIGRATIONS:
        db.execute(dialect.begin)
        try:
            if dialect is not SQLITE:
                db.execute(f"SELECT pg_advisory_xact_lock({_MIGRATE_LOCK})")
            now = schema_version(db, dialect)  # again, under the lock: another process may have migrated
            if now is not None and now >= version:
                db.execute("ROLLBACK")
                continue
            for step in steps:
                _apply(db, dialect, step)
            db.execute(
                dialect.sql(
                    "INSERT INTO meta(key, value) VALUES ('schema', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value"
                ),
                (str(version),),
            )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    return had


#: the migrations above applied once per process to an in-memory database, with the list they came
#: from: each new in-memory store is a copy of it (``migrate_new_memory``)
_MIGRATED: tuple[Sequence[Any], sqlite3.Connection] | None = None
_MIGRATED_LOCK = threading.Lock()


def migrate_new_memory(db: sqlite3.Connection) -> int | None:
    """``migrate`` for a new, empty in-memory SQLite database (a replay's, an evaluation's: one per
    corpus case or rule test, thousands in a ``rules eval``): SQLite's backup copies into it a
    database that ``migrate`` brought to the last version once in this process, the same tables,
    indexes, triggers and ``meta`` rows, instead of running ~130 statements each time. None, as
    ``migrate`` answers for a new database."""
    global _MIGRATED
    with _MIGRATED_LOCK:
        if _MIGRATED is None or _MIGRATED[0] is not MIGRATIONS:  # first use, or the list was replaced
            template = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            if migrate(template) is not None:  # pragma: no cover - a new in-memory database is empty
                raise sqlite3.DatabaseError("a new in-memory database already had a schema")
            _MIGRATED = (MIGRATIONS, template)
        _MIGRATED[1].backup(db)
    return None
