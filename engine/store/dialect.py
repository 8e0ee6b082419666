"""The two databases the store runs on, SQLite (the embedded default) and PostgreSQL (production,
``postgresql://...``), and the one place where their SQL differs.

The store's statements are written once, in the SQL both accept, with SQLite's ``?`` placeholders
and three spellings a dialect rewrites:

    ``?``                 a parameter; PostgreSQL (psycopg) takes ``%s``
    ``GREATEST(a, b)``    the larger of two values; SQLite spells it ``MAX(a, b)`` (LEAST: ``MIN``)
    ``NOW_SQL``           the database's clock in Unix seconds (``schema.NOW_SQL``, a marker)

SQLite's planner hints (``CROSS JOIN ... ON`` to keep the join order, a unary ``+`` to keep an
index out) are dropped for PostgreSQL, whose planner takes none. The schema's column types are SQLite's (``INTEGER``, ``REAL``, ``INTEGER PRIMARY KEY
AUTOINCREMENT``), which PostgreSQL gets as 64-bit integers, double precision and identity
columns. What cannot be said once (the stale-term triggers, a column added where missing, the
schema version's table) is given per dialect in ``schema.py``.

PostgreSQL goes through psycopg 3 (the maintained driver, libpq underneath); a ``PgDb`` offers
what the store uses of ``sqlite3.Connection`` (``execute``, ``executemany``, ``in_transaction``,
rows readable by index and by name, ``lastrowid``), so the store's code does not know which it has.
psycopg is imported only when a ``postgresql://`` store is opened (the ``postgres`` extra); its
errors reach the store as ``PgError``.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

from engine.errors import RecoverError

__all__ = [
    "DB_ERRORS",
    "Dialect",
    "PgDb",
    "PgError",
    "POSTGRES",
    "SQLITE",
    "dialect_for",
    "display_name",
    "is_postgres",
]

#: the marker of the database's clock in statements (``schema.NOW_SQL``)
NOW_MARK = "(RECOVER_NOW)"

#: the tables whose rows have an ``id`` identity: an insert into them gives its id (``lastrowid``)
_ID_TABLES = frozenset({"incidents", "firings", "actions", "silences", "quarantine", "reviews", "job_events"})


#: translated statements kept (the store's own are a few hundred)
_CACHE_MAX = 4096


class PgError(RecoverError):
    """What the PostgreSQL driver raised, as ``PgDb`` passes it on (the store turns it into
    ``StoreError``, as it does ``sqlite3.Error``): psycopg is not imported until a PostgreSQL store
    is opened, so the store's ``except`` clauses cannot name its errors."""


#: what a database call raises (the store turns each into ``StoreError``)
DB_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, PgError)


def is_postgres(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def display_name(target: str) -> str:
    """The store as messages name it: a DSN without its password."""
    if not is_postgres(target):
        return target
    parts = urlsplit(target)
    if parts.password is None:
        return target
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


class Dialect:
    """How one database spells what the store's statements say once."""

    def __init__(self, name: str, begin: str, now: str, lock_lease: str | None):
        self.name = name
        #: starts a write transaction that holds its write lock from the start on SQLite
        self.begin = begin
        #: the database's clock, in Unix seconds (double precision)
        self.now = now
        #: taken first in a lease decision, so two controllers decide one after the other
        self.lock_lease = lock_lease
        # by whether the statement has parameters (PostgreSQL's % differs), then by its text
        self._cache: dict[bool, dict[str, str]] = {True: {}, False: {}}

    def sql(self, text: str, has_args: bool = True) -> str:
        """A statement of the store, as this database takes it (cached: the store's statements
        are a few hundred strings)."""
        cache = self._cache[has_args]
        out = cache.get(text)
        if out is None:
            if len(cache) >= _CACHE_MAX:  # statements built with varying IN (?, ?, ...) lists
                cache.clear()
            out = cache[text] = self._translate(text, has_args)
        return out

    def _translate(self, text: str, has_args: bool) -> str:
        text = text.replace(NOW_MARK, self.now)
        if self.name == "sqlite":
            return text.replace("GREATEST(", "MAX(").replace("LEAST(", "MIN(")
        text = text.replace(" CROSS JOIN ", " JOIN ")  # each one of the store's has its ON
        text = re.sub(r"(?<=[\s(])\+(?=\w+\.\w)", "", text)  # +a.action: a column, not a number
        if has_args:  # psycopg reads % as the start of a placeholder
            text = text.replace("%", "%%").replace("?", "%s")
        m = re.match(r"\s*INSERT\s+INTO\s+(\w+)", text, re.IGNORECASE)
        if m and m.group(1) in _ID_TABLES and "RETURNING" not in text.upper():
            text += " RETURNING id"
        return text

    def ddl(self, text: str) -> str:
        """A schema statement written in SQLite's types, in this database's."""
        text = text.replace(NOW_MARK, self.now)
        if self.name == "sqlite":
            return text
        text = text.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
        text = re.sub(r"\bINTEGER\b", "BIGINT", text)
        return re.sub(r"\bREAL\b", "DOUBLE PRECISION", text)


SQLITE = Dialect("sqlite", "BEGIN IMMEDIATE", "((julianday('now') - 2440587.5) * 86400.0)", None)
# the server's clock, as at the start of the statement (now() would be the transaction's start:
# a transaction that waited on a lock must not judge a lease by the time it began)
POSTGRES = Dialect(
    "postgresql",
    "BEGIN",
    "(EXTRACT(EPOCH FROM statement_timestamp())::double precision)",
    "LOCK TABLE lease IN SHARE ROW EXCLUSIVE MODE",
)


def dialect_for(target: str) -> Dialect:
    return POSTGRES if is_postgres(target) else SQLITE


class PgRow:
    """A row read by index or by column name, like ``sqlite3.Row`` (``dict(row)`` works)."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: dict[str, int], values: Sequence[Any]):
        self._names = names
        self._values = values

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._values[self._names[key]]
        return self._values[key]

    def keys(self) -> list[str]:
        return list(self._names)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _row_factory(cursor: Any) -> Any:
    names = {d.name: i for i, d in enumerate(cursor.description or ())}
    return lambda values: PgRow(names, values)


class PgCursor:
    """What a statement gave: its rows (already fetched), row count and the inserted id."""

    def __init__(self, rows: list[Any], rowcount: int, lastrowid: int | None):
        self._rows = rows
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    def fetchall(self) -> list[Any]:
        return self._rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


def _arg(v: Any) -> Any:
    # the schema keeps flags as integers, as SQLite does; PostgreSQL will not put a boolean there
    return int(v) if isinstance(v, bool) else v


class PgDb:
    """One psycopg connection in autocommit mode: a statement outside ``BEGIN`` is its own
    transaction, as on SQLite with ``isolation_level=None``. Statements come translated
    (``Dialect.sql``).

    A connection the server dropped (a restart, a failover) is opened again at the next statement
    outside a transaction, so the controller's store-outage probe finds the store back; inside a
    transaction every statement up to its ``ROLLBACK`` fails instead, so that no half of a
    transaction is ever written on its own."""

    def __init__(self, dsn: str, readonly: bool = False):
        try:
            import psycopg
        except ImportError:
            from engine.errors import StoreError

            raise StoreError(
                f"{display_name(dsn)}: PostgreSQL needs the psycopg driver: pip install 'recover[postgres]'"
            ) from None
        self._psycopg = psycopg
        self._dsn = dsn
        self._readonly = readonly
        self._tx = False  # between this connection's BEGIN and its COMMIT or ROLLBACK
        try:
            self.conn = self._connect()
        except psycopg.Error as exc:
            raise PgError(str(exc).strip()) from None

    def _connect(self) -> Any:
        conn = self._psycopg.connect(self._dsn, autocommit=True, connect_timeout=10, row_factory=_row_factory)
        if self._readonly:
            conn.execute("SET default_transaction_read_only = on")
        return conn

    @property
    def in_transaction(self) -> bool:
        if self.conn.closed or self.conn.broken:
            return self._tx
        return bool(self.conn.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE)

    def execute(self, sql: str, args: Sequence[Any] = ()) -> PgCursor:
        try:
            return self._execute(sql, args)
        except self._psycopg.Error as exc:
            raise PgError(str(exc).strip()) from None

    def _execute(self, sql: str, args: Sequence[Any]) -> PgCursor:
        head = sql[:8].upper()
        if self.conn.closed or self.conn.broken:
            if head.startswith("ROLLBACK"):  # what was begun on the lost connection is gone with it
                self._tx = False
                return PgCursor([], -1, None)
            if self._tx:
                raise PgError("the connection to PostgreSQL was lost during a transaction")
            self.conn.close()
            self.conn = self._connect()
        cur = self.conn.execute(sql, [_arg(a) for a in args] if args else None)
        if head.startswith("BEGIN"):
            self._tx = True
        elif head.startswith(("COMMIT", "ROLLBACK")):
            self._tx = False
        rows = cur.fetchall() if cur.description is not None else []
        lastrowid = None
        if sql.endswith(" RETURNING id"):  # added by Dialect.sql to an insert: its id, not a result
            lastrowid = int(rows[0][0]) if rows else None
            rows = []
        return PgCursor(rows, cur.rowcount, lastrowid)

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]]) -> None:
        try:
            with self.conn.cursor() as cur:
                cur.executemany(sql, [[_arg(a) for a in args] for args in seq])
        except self._psycopg.Error as exc:
            raise PgError(str(exc).strip()) from None

    def close(self) -> None:
        try:
            self.conn.close()
        except self._psycopg.Error as exc:
            raise PgError(str(exc).strip()) from None

    def __del__(self) -> None:
        # a store dropped unclosed (a read command that ends) closes its connection as SQLite's
        # does, not with psycopg's warning about a connection left open
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()
