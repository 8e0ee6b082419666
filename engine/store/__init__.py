"""The incident store: SQLite in WAL mode, safe to read from another process while one writes, or
PostgreSQL for a ``postgresql://`` DSN (``dialect.py``), with the same tables and the same API.

Tables: incidents, facts (with origins), firings (rule id, rulebook file:line, matched facts,
what was asserted), actions (the journal: rendered argv, mode, status, idempotency key),
job_events and progress (each job attempt's scheduler states and progress, for goodput),
offsets (where each followed source was read up to), quarantine (inputs whose handling failed,
with the error: kept aside so that one poison line never stops the rest), meta.

The database file is created 0600 (its folder, when created here, 0700): it holds excerpts of
job logs. A read-only reader opens it read-only, and a WAL database on read-only media
immutable.

``Store`` is one connection with the methods of every table group; each group lives in its own
module, and every statement runs through ``Connection._exec``, so the only error the store
raises is ``StoreError``:

    connection.py   opening, migrating (schema.py), write-behind buffers, transactions
    dialect.py      where SQLite and PostgreSQL differ; the psycopg connection (PgDb)
    incidents.py    incidents, facts, firings, job progress, reviews
    journal.py      the actions journal and ``ActionStatus``
    cursors.py      offsets and meta
    lease.py        the leader lease (term, expiry by the database's clock) and the controllers
    aside.py        silences and the quarantine
    history.py      job attempts' scheduler states and progress facts (the goodput report's)

Usage::

    store = Store("recover.db")
    inc = store.open_incident(key="job:1234:0", job="1234", attempt=0, node=None, at=t)
    store.add_fact(inc, fact)
"""

from __future__ import annotations

from engine.errors import StoreError
from engine.store.aside import QUARANTINE_TEXT, AsideTables
from engine.store.cursors import CursorTables
from engine.store.history import JobHistoryTables
from engine.store.incidents import IncidentRow, IncidentTables
from engine.store.journal import TERMINAL, ActionsJournal, ActionStatus
from engine.store.lease import LeaseTables, LeaseView
from engine.store.schema import SCHEMA_VERSION

__all__ = [
    "Store",
    "StoreError",
    "IncidentRow",
    "LeaseView",
    "SCHEMA_VERSION",
    "ActionStatus",
    "TERMINAL",
    "QUARANTINE_TEXT",
]


class Store(IncidentTables, ActionsJournal, CursorTables, AsideTables, LeaseTables, JobHistoryTables):
    """The incident database: ``Store(path)``, ``Store(path, readonly=True)``, ``Store()`` in memory."""
