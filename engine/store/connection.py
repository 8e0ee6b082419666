"""The one database connection every part of the store writes through: SQLite, or PostgreSQL
for a ``postgresql://`` DSN (``dialect.py``: the one place where the two differ).

It owns what the parts share: opening (private file, read-only or immutable readers), the
schema migrations, the write-behind buffers of ``touch_incident`` and ``bump_fact``, the
re-entrant transaction, and ``_exec``, the only place a statement runs. ``_exec`` fetches every
row before it returns, so no driver error can surface later while a caller iterates a cursor:
the store raises ``StoreError`` and nothing else.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import quote

from engine.clock import SYSTEM, Clock
from engine.errors import Fenced, StoreError
from engine.store.dialect import DB_ERRORS, PgDb, dialect_for, display_name, is_postgres
from engine.store.schema import FENCED_MESSAGE, migrate, migrate_new_memory

__all__ = ["Connection", "Rows", "store_error"]


class Rows:
    """What a statement gave, fetched in full: its rows, and the insert id and row count."""

    __slots__ = ("rows", "lastrowid", "rowcount")

    def __init__(self, rows: list[Any], lastrowid: int | None, rowcount: int):
        self.rows = rows
        self.lastrowid = lastrowid
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)

    def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[Any]:
        return list(self.rows)


class Connection:
    """Opens the database and runs statements; the table parts (``engine.store.*``) build on it."""

    def __init__(
        self, path: str | Path = ":memory:", readonly: bool = False, mode: int = 0o600, *, clock: Clock = SYSTEM
    ):
        target = str(path)
        #: how messages name the store (a DSN without its password)
        self.path = display_name(target)
        #: SQLite or PostgreSQL: how the statements are spelled for this database
        self.dialect = dialect_for(target)
        self.db: Any
        #: stamps what it writes (created, updated, read at) with this clock's wall time
        self.clock = clock
        self._lock = threading.RLock()
        self._depth = 0
        # write-behind: evidence timestamps and fact counts change many times per ingested fact;
        # they are combined here and written before anything else could see or change them
        self._touches: dict[int, float] = {}
        self._bumps: dict[str, list] = {}  # fact id -> [count, flood JSON or None]
        # inside a transaction (SQLite), an incident's fact and firing rows are kept here and
        # written together at the commit (or before any other statement): nothing outside this
        # connection can see them sooner, and a kill -9 loses them with the read offsets committed
        # in the same transaction, so the inputs after those offsets derive them again
        self._fact_rows: dict[tuple[int, str], list] = {}  # (incident, fact id) -> the row to insert
        self._rows_of: dict[str, list[list]] = {}  # fact id -> its rows above (a count applies to each)
        self._firing_rows: list[tuple] = []  # with their ids (AUTOINCREMENT's, taken under the write lock)
        self._next_firing: int | None = None
        self.write_behind = True  # False: every write at once (the reference for tests)
        #: written with each incident this store opens: "replay" (which job ran where was read from
        #: the logs' own lines), "live:logs" (the controller without a scheduler: the same) or
        #: "live:scheduler"; one database may hold a replay's incidents and a controller's
        self.context: str | None = None
        #: the leader term this process writes under (``LeaseTables.acquire``), None when it holds
        #: no lease: acted journal rows carry it, and each transaction has the database check it
        self.term: int | None = None
        try:
            self.fresh = False
            if is_postgres(target):
                self.db = PgDb(target, readonly=readonly)
            elif readonly:
                if target != ":memory:" and not Path(target).exists():
                    raise StoreError(f"{self.path}: no such database")
                self.db = _connect_readonly(target)
                self.db.row_factory = sqlite3.Row
            else:
                if target != ":memory:":
                    _create_private(Path(target), mode)
                self.db = sqlite3.connect(target, check_same_thread=False, timeout=10, isolation_level=None)
                self.db.row_factory = sqlite3.Row
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.execute("PRAGMA foreign_keys=ON")
            if not readonly and target == ":memory:":
                # new and empty: a copy of one migrated once in this process (the same schema)
                self.fresh = migrate_new_memory(self.db) is None
            elif not readonly:
                # a database that did not exist before (or was never used) knows nothing of the past
                self.fresh = migrate(self.db, self.dialect) is None
            else:
                self.db.execute("SELECT 1 FROM incidents LIMIT 1").fetchall()
        except DB_ERRORS as exc:
            raise StoreError(f"{self.path}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"{self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        with self._lock:
            try:
                pending = not self.db.in_transaction
            except DB_ERRORS:  # closed already (a ProgrammingError)
                pending = False
            if pending:
                self.flush()
            self.db.close()

    def _x(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """One statement as written in the store (``dialect.py``), on this database; raw errors."""
        return self.db.execute(self.dialect.sql(sql, bool(args)), args)

    def _exec(self, sql: str, args: Sequence[Any] = (), *, pending_ok: bool = False) -> Rows:
        """One statement, its rows fetched here; the buffered writes go first unless it cannot see
        or change them."""
        with self._lock:
            if not pending_ok:
                self._flush_for(sql)
            try:
                cur = self.db.execute(self.dialect.sql(sql, bool(args)), args)
                return Rows(cur.fetchall(), cur.lastrowid, cur.rowcount)
            except DB_ERRORS as exc:
                raise store_error(self.path, exc) from None

    def _execmany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement for each of ``rows`` (``executemany``), with ``_exec``'s rule for the
        buffered writes."""
        with self._lock:
            self._flush_for(sql)
            try:
                self.db.executemany(self.dialect.sql(sql), rows)
            except DB_ERRORS as exc:
                raise store_error(self.path, exc) from None

    def _flush_for(self, sql: str) -> None:
        """The buffered writes go first when ``sql`` can see or change them."""
        if (self._touches or self._bumps or self._fact_rows or self._firing_rows) and _sees_buffered(sql):
            self.flush()

    @property
    def _defer_rows(self) -> bool:
        """Are fact and firing rows kept until the commit? Inside a transaction on SQLite, whose
        write lock (BEGIN IMMEDIATE) makes the ids this connection hands out the database's own."""
        return self._depth > 0 and self.write_behind and self.dialect.name == "sqlite"

    def flush(self) -> None:
        """Write what ``touch_incident``, ``bump_fact``, ``add_fact`` and ``add_firing`` buffered."""
        with self._lock:
            touches, self._touches = self._touches, {}
            bumps, self._bumps = self._bumps, {}
            firings, self._firing_rows = self._firing_rows, []
            facts, self._fact_rows = self._fact_rows, {}
            self._rows_of = {}
            self._next_firing = None
            try:
                if firings:
                    self.db.executemany(
                        "INSERT INTO firings(id, incident, rule, rule_mark, description, matched, asserted, at) "
                        "VALUES (?,?,?,?,?,?,?,?)",
                        firings,
                    )
                if touches:
                    self.db.executemany(
                        self.dialect.sql(
                            "UPDATE incidents SET last_evidence_at = GREATEST(last_evidence_at, ?) WHERE id = ?"
                        ),
                        [(at, inc) for inc, at in touches.items()],
                    )
                # counts of rows written before; a buffered row holds the counts it was given itself
                for fact_id, (by, flood) in bumps.items():
                    self._write_bump(fact_id, by, flood)
                if facts:
                    self.db.executemany(
                        "INSERT INTO facts(incident, id, kind, attrs, at, origin, derived_by, count, flood) "
                        "VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(incident, id) DO NOTHING",
                        list(facts.values()),
                    )
            except DB_ERRORS as exc:
                raise StoreError(f"{self.path}: {exc}") from None

    def flush_unless_in_transaction(self) -> None:
        """``flush``, unless a transaction is open: its commit writes what is buffered, and any
        statement before that writes it first, so only this connection could tell the difference."""
        with self._lock:
            if self._depth == 0:
                self.flush()

    def _write_bump(self, fact_id: str, by: int, flood: str | None) -> None:
        if flood is None:
            self._x("UPDATE facts SET count = count + ? WHERE id = ?", (by, fact_id))
        else:
            self._x("UPDATE facts SET count = count + ?, flood = ? WHERE id = ?", (by, flood, fact_id))

    def _discard_pending(self) -> None:
        self._touches.clear()
        self._bumps.clear()
        self._fact_rows.clear()
        self._rows_of.clear()
        self._firing_rows.clear()
        self._next_firing = None

    def transaction(self) -> "_Tx":
        """``with store.transaction():`` groups writes into one commit."""
        return _Tx(self)


#: per statement of the store: can it see or change what the write-behind buffers hold?
_SEES: dict[str, bool] = {}


def _sees_buffered(sql: str) -> bool:
    """Does this statement read or write fact or firing rows, or an incident's latest evidence
    time (the columns the buffers write)? Any statement on those tables that names no columns
    (``*``) or names that one counts; so does anything that is not a plain SELECT, INSERT,
    UPDATE or DELETE. Only the others (the journal, progress, silences, an incident's other
    columns) may run before the buffers are written: their order against them cannot matter."""
    seen = _SEES.get(sql)
    if seen is None:
        text = sql.lower()
        seen = (
            "facts" in text
            or "firings" in text
            or "last_evidence_at" in text
            or ("incidents" in text and "*" in text)
            or text.split(None, 1)[0] not in ("select", "insert", "update", "delete")
        )
        if len(_SEES) < 4096:
            _SEES[sql] = seen
    return seen


def _create_private(path: Path, mode: int) -> None:
    """Create the database file (and its folder) private before SQLite does, with its umask."""
    parent = path.parent
    if not parent.exists():
        parent.mkdir(parents=True, exist_ok=True, mode=0o700 if mode & 0o077 == 0 else 0o750)
    try:
        fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    except FileExistsError:
        return
    os.close(fd)
    os.chmod(str(path), mode)  # the umask may have taken bits away that were asked for (group read)


def _connect_readonly(path: str) -> sqlite3.Connection:
    """Read-only, never creating anything; a WAL database on read-only media (where SQLite cannot
    create its -shm file) is opened immutable."""
    uri = f"file:{quote(path)}?mode=ro"
    db = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=10)
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return db
    except sqlite3.OperationalError:
        db.close()
    return sqlite3.connect(f"file:{quote(path)}?immutable=1", uri=True, check_same_thread=False, timeout=10)


def store_error(path: str, exc: BaseException) -> StoreError:
    """The store's one error for a failed statement; ``Fenced`` when the database refused a stale term."""
    if FENCED_MESSAGE in str(exc):
        return Fenced(f"{path}: this controller's leader term is no longer the lease's: the write was refused")
    return StoreError(f"{path}: {exc}")


class _Tx:
    """Re-entrant: only the outermost ``with`` begins and commits (or rolls back)."""

    def __init__(self, store: Connection):
        self.store = store

    def __enter__(self) -> Any:  # the Store itself, whose parts the caller uses
        st = self.store
        st._lock.acquire()
        if st._depth == 0:
            try:
                st.flush()  # what was written before the transaction is not part of it
                st.db.execute(st.dialect.begin)
            except StoreError:
                st._lock.release()
                raise
            except DB_ERRORS as exc:  # busy, locked, or closed: never a raw sqlite3 error
                st._lock.release()
                raise StoreError(f"{st.path}: {exc}") from None
        st._depth += 1
        return st

    def __exit__(self, exc_type, exc, tb) -> None:
        st = self.store
        try:
            st._depth -= 1
            if st._depth == 0:
                if exc_type is not None:
                    st._discard_pending()  # rolled back with the rest of the transaction
                if exc_type is None:
                    try:
                        st.flush()
                        if st.term is not None:
                            # the database checks the term under the write lock the commit holds:
                            # a leader whose lease was taken over (or ran out) commits nothing
                            st._x("UPDATE lease SET fence = ? WHERE name = 'leader'", (st.term,))
                        st.db.execute("COMMIT")
                    except DB_ERRORS + (StoreError,) as e:
                        # a failed COMMIT (disk full, I/O error) may already have rolled back
                        if st.db.in_transaction:
                            try:
                                st.db.execute("ROLLBACK")
                            except DB_ERRORS:
                                pass
                        raise (e if isinstance(e, StoreError) else store_error(st.path, e)) from e
                elif st.db.in_transaction:
                    try:
                        st.db.execute("ROLLBACK")
                    except DB_ERRORS:
                        pass  # the original exception is the one to see
        finally:
            st._lock.release()
