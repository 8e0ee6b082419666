"""The incident store: SQLite in WAL mode, safe to read from another process while one writes.

Tables: incidents, facts (with origins), firings (rule id, rulebook file:line, matched facts,
what was asserted), actions (the journal: rendered argv, mode, status, idempotency key),
offsets (where each followed source was read up to), quarantine (inputs whose handling failed,
with the error: kept aside so that one poison line never stops the rest), meta.

The database file is created 0600 (its folder, when created here, 0700): it holds excerpts of
job logs. A read-only reader opens it read-only, and a WAL database on read-only media
immutable.

Usage::

    store = Store("recover.db")
    inc = store.open_incident(key="job:1234:0", job="1234", attempt=0, node=None, at=t)
    store.add_fact(inc, fact)
"""

from __future__ import annotations
from engine.errors import StoreError

import json
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import quote

from engine.facts import Fact

logger = logging.getLogger(__name__)

__all__ = ["Store", "StoreError", "IncidentRow", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS incidents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    job TEXT, attempt INTEGER, node TEXT,
    status TEXT NOT NULL DEFAULT 'open',          -- open | closed
    opened_at REAL NOT NULL, last_evidence_at REAL NOT NULL, closed_at REAL,
    detected_wall REAL NOT NULL,                   -- wall clock when it opened (latency metrics)
    fault_class TEXT, decision TEXT, nodes TEXT NOT NULL DEFAULT '[]',
    fault_fact TEXT, reason TEXT, guards TEXT NOT NULL DEFAULT '[]', mode TEXT,
    fingerprint TEXT, closed_wall REAL, rulebook TEXT,
    context TEXT,                                  -- who recorded it, who said where jobs ran: see Store.context
    mode_why TEXT                                  -- which policy keys gave the decision its mode
);
CREATE INDEX IF NOT EXISTS incidents_key ON incidents(key, status);
CREATE TABLE IF NOT EXISTS facts (
    incident INTEGER NOT NULL REFERENCES incidents(id),
    id TEXT NOT NULL, kind TEXT NOT NULL, attrs TEXT NOT NULL, at REAL NOT NULL,
    origin TEXT NOT NULL, count INTEGER NOT NULL DEFAULT 1, derived_by INTEGER,
    PRIMARY KEY (incident, id)
);
CREATE INDEX IF NOT EXISTS facts_id ON facts(id);
CREATE TABLE IF NOT EXISTS firings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    incident INTEGER REFERENCES incidents(id),
    rule TEXT NOT NULL, rule_mark TEXT NOT NULL, description TEXT NOT NULL,
    matched TEXT NOT NULL,      -- {alias: fact id}
    asserted TEXT,              -- fact id of what it derived
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS firings_incident ON firings(incident);
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    incident INTEGER NOT NULL REFERENCES incidents(id),
    idem_key TEXT NOT NULL UNIQUE,
    action TEXT NOT NULL, target TEXT NOT NULL, argv TEXT NOT NULL,
    mode TEXT NOT NULL,         -- recommend | act
    status TEXT NOT NULL,       -- recommended | planned | started | succeeded | failed | verified | escalated | skipped
    rc INTEGER, output TEXT, verified INTEGER, attempts INTEGER NOT NULL DEFAULT 0,
    note TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS actions_incident ON actions(incident);
CREATE INDEX IF NOT EXISTS actions_action ON actions(action);
CREATE INDEX IF NOT EXISTS incidents_job ON incidents(job);
CREATE INDEX IF NOT EXISTS incidents_closed ON incidents(closed_at);
CREATE TABLE IF NOT EXISTS offsets (
    source TEXT PRIMARY KEY, inode INTEGER, offset INTEGER NOT NULL, line_no INTEGER NOT NULL,
    updated_at REAL NOT NULL, head TEXT
);
CREATE TABLE IF NOT EXISTS progress (
    job TEXT NOT NULL, attempt INTEGER NOT NULL, step INTEGER, checkpoint INTEGER, last_at REAL,
    PRIMARY KEY (job, attempt)
);
CREATE TABLE IF NOT EXISTS silences (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node TEXT NOT NULL, until REAL NOT NULL, reason TEXT NOT NULL, by TEXT, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    origin TEXT NOT NULL,       -- path:line, spool:node, ...
    input TEXT NOT NULL,        -- the line or fact (bounded)
    error TEXT NOT NULL, at REAL NOT NULL, count INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS reviews (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    incident INTEGER NOT NULL REFERENCES incidents(id),
    verdict TEXT NOT NULL, did TEXT, by TEXT, at REAL NOT NULL
);
"""


#: the most a quarantined input keeps of its text
QUARANTINE_TEXT = 2000
#: numbers SQLite can hold; anything from a log is bounded long before this
MAX_INT = (1 << 63) - 1


@dataclass(frozen=True)
class IncidentRow:
    id: int
    key: str
    job: str | None
    attempt: int | None
    node: str | None
    status: str
    opened_at: float
    last_evidence_at: float
    closed_at: float | None
    detected_wall: float
    fault_class: str | None
    decision: str | None
    nodes: tuple[str, ...]
    fault_fact: str | None
    reason: str | None
    guards: tuple
    mode: str | None
    context: str | None = None
    mode_why: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d["nodes"] = list(self.nodes)
        d["guards"] = list(self.guards)
        return d


def _row_to_incident(r: sqlite3.Row) -> IncidentRow:
    return IncidentRow(
        id=r["id"],
        key=r["key"],
        job=r["job"],
        attempt=r["attempt"],
        node=r["node"],
        status=r["status"],
        opened_at=r["opened_at"],
        last_evidence_at=r["last_evidence_at"],
        closed_at=r["closed_at"],
        detected_wall=r["detected_wall"],
        fault_class=r["fault_class"],
        decision=r["decision"],
        nodes=tuple(json.loads(r["nodes"] or "[]")),
        fault_fact=r["fault_fact"],
        reason=r["reason"],
        guards=tuple(json.loads(r["guards"] or "[]")),
        mode=r["mode"],
        context=r["context"] if "context" in r.keys() else None,
        mode_why=r["mode_why"] if "mode_why" in r.keys() else None,  # read-only: an older database
    )


class Store:
    def __init__(self, path: str | Path = ":memory:", readonly: bool = False, mode: int = 0o600):
        self.path = str(path)
        self._lock = threading.RLock()
        self._depth = 0
        # write-behind: evidence timestamps and fact counts change many times per ingested fact;
        # they are combined here and written before anything else could see or change them
        self._touches: dict[int, float] = {}
        self._bumps: dict[str, list] = {}  # fact id -> [count, flood JSON or None]
        self.write_behind = True  # False: every write at once (the reference for tests)
        #: written with each incident this store opens: "replay" (which job ran where was read from
        #: the logs' own lines), "live:logs" (the controller without a scheduler: the same) or
        #: "live:scheduler"; one database may hold a replay's incidents and a controller's
        self.context: str | None = None
        try:
            self.fresh = False
            if readonly:
                if self.path != ":memory:" and not Path(self.path).exists():
                    raise StoreError(f"{self.path}: no such database")
                self.db = _connect_readonly(self.path)
            else:
                if self.path != ":memory:":
                    _create_private(Path(self.path), mode)
                self.db = sqlite3.connect(self.path, check_same_thread=False, timeout=10, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            if not readonly:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.execute("PRAGMA foreign_keys=ON")
                self.db.executescript(_SCHEMA)
                try:  # databases from before the offsets had a head fingerprint
                    self.db.execute("ALTER TABLE offsets ADD COLUMN head TEXT")
                except sqlite3.OperationalError:
                    pass
                try:  # databases from before floods kept their last line and who repeated it
                    self.db.execute("ALTER TABLE facts ADD COLUMN flood TEXT")
                except sqlite3.OperationalError:
                    pass
                try:  # databases from before each incident said who recorded it
                    self.db.execute("ALTER TABLE incidents ADD COLUMN context TEXT")
                except sqlite3.OperationalError:
                    pass
                try:  # databases from before an incident said why it acts or only recommends
                    self.db.execute("ALTER TABLE incidents ADD COLUMN mode_why TEXT")
                except sqlite3.OperationalError:
                    pass
                # a database that did not exist before (or was never used) knows nothing of the past
                self.fresh = self.db.execute("SELECT 1 FROM meta WHERE key = 'schema'").fetchone() is None
                self.db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            else:
                self.db.execute("SELECT 1 FROM incidents LIMIT 1")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"{self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        with self._lock:
            try:
                pending = not self.db.in_transaction
            except sqlite3.ProgrammingError:  # closed already
                pending = False
            if pending:
                self.flush()
            self.db.close()

    # -- writing ---------------------------------------------------------------------------
    def _exec(self, sql: str, args: Sequence[Any] = (), *, pending_ok: bool = False) -> sqlite3.Cursor:
        """One statement; the buffered writes go first unless it cannot see or change them."""
        with self._lock:
            if not pending_ok and (self._touches or self._bumps):
                self.flush()
            try:
                return self.db.execute(sql, args)
            except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
                raise StoreError(f"{self.path}: {exc}") from None

    def flush(self) -> None:
        """Write what ``touch_incident`` and ``bump_fact`` buffered."""
        with self._lock:
            touches, self._touches = self._touches, {}
            bumps, self._bumps = self._bumps, {}
            try:
                if touches:
                    self.db.executemany(
                        "UPDATE incidents SET last_evidence_at = MAX(last_evidence_at, ?) WHERE id = ?",
                        [(at, inc) for inc, at in touches.items()],
                    )
                for fact_id, (by, flood) in bumps.items():
                    self._write_bump(fact_id, by, flood)
            except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
                raise StoreError(f"{self.path}: {exc}") from None

    def _write_bump(self, fact_id: str, by: int, flood: str | None) -> None:
        if flood is None:
            self.db.execute("UPDATE facts SET count = count + ? WHERE id = ?", (by, fact_id))
        else:
            self.db.execute("UPDATE facts SET count = count + ?, flood = ? WHERE id = ?", (by, flood, fact_id))

    def _discard_pending(self) -> None:
        self._touches.clear()
        self._bumps.clear()

    def transaction(self):
        """``with store.transaction():`` groups writes into one commit."""
        return _Tx(self)

    def open_incident(self, key: str, job: str | None, attempt: int | None, node: str | None, at: float) -> int:
        cur = self._exec(
            "INSERT INTO incidents(key, job, attempt, node, opened_at, last_evidence_at, detected_wall, context) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (key, job, attempt, node, at, at, time.time(), self.context),
        )
        return int(cur.lastrowid)

    def touch_incident(self, incident: int, at: float) -> None:
        """The incident's latest evidence is at least ``at`` (buffered: see ``flush``)."""
        with self._lock:
            old = self._touches.get(incident)
            self._touches[incident] = at if old is None or at > old else old
            if not self.write_behind:
                self.flush()

    def set_provisional(self, incident: int, fault_class: str, nodes: Iterable[str], fault_fact: str) -> None:
        """The strongest fault so far of an open incident (final when it closes)."""
        self._exec(
            "UPDATE incidents SET fault_class=?, nodes=?, fault_fact=? WHERE id=? AND status='open'",
            (fault_class, json.dumps(sorted(set(nodes))), fault_fact, incident),
            pending_ok=True,  # other columns than a buffered touch's
        )

    def bind_incident(self, incident: int, key: str, job: str, attempt: int) -> None:
        """A node's incident is about this job attempt (the scheduler said it held the node)."""
        self._exec(
            "UPDATE incidents SET key=?, job=?, attempt=? WHERE id=?",
            (key, job, attempt, incident),
            pending_ok=True,  # other columns than a buffered touch's
        )

    def add_guards(self, incident: int, guards: Sequence[Any]) -> None:
        """Guards recorded after an incident's close, after those it closed with."""
        row = self._exec("SELECT guards FROM incidents WHERE id = ?", (incident,)).fetchone()
        if row is None or not guards:
            return
        had = json.loads(row[0] or "[]")
        self._exec("UPDATE incidents SET guards=? WHERE id=?", (json.dumps(had + list(guards)), incident))

    def close_incident(
        self,
        incident: int,
        at: float,
        fault_class: str,
        decision: str,
        nodes: Iterable[str],
        fault_fact: str | None,
        reason: str,
        guards: Sequence[Any] = (),
        mode: str = "recommend",
        fingerprint: str | None = None,
        mode_why: str | None = None,
    ) -> None:
        self._exec(
            "UPDATE incidents SET status='closed', closed_at=?, fault_class=?, decision=?, nodes=?, fault_fact=?, reason=?, "
            "guards=?, mode=?, fingerprint=?, closed_wall=?, mode_why=? WHERE id=?",
            (
                at,
                fault_class,
                decision,
                json.dumps(sorted(set(nodes))),
                fault_fact,
                reason,
                json.dumps(list(guards)),
                mode,
                fingerprint,
                time.time(),
                mode_why,
                incident,
            ),
        )

    def job_history(self, job: str, exclude: int | None = None) -> list[dict[str, Any]]:
        rows = self._exec(
            "SELECT id, attempt, decision, fault_class, fingerprint, closed_at FROM incidents "
            "WHERE job = ? AND status = 'closed' AND id != ? ORDER BY id",
            (job, exclude or -1),
        )
        return [dict(r) for r in rows]

    def save_progress(
        self, job: str, attempt: int, step: int | None, checkpoint: int | None, last_at: float | None
    ) -> None:
        self._exec(
            "INSERT INTO progress(job, attempt, step, checkpoint, last_at) VALUES (?,?,?,?,?) "
            "ON CONFLICT(job, attempt) DO UPDATE SET step=MAX(COALESCE(step, excluded.step), COALESCE(excluded.step, step)), "
            "checkpoint=MAX(COALESCE(checkpoint, excluded.checkpoint), COALESCE(excluded.checkpoint, checkpoint)), "
            "last_at=excluded.last_at",
            (job, attempt, step, checkpoint, last_at),
        )

    def progress_of(self, job: str) -> dict[int, dict[str, Any]]:
        return {
            r["attempt"]: {"step": r["step"], "checkpoint": r["checkpoint"], "last_at": r["last_at"]}
            for r in self._exec("SELECT * FROM progress WHERE job = ?", (job,))
        }

    def recent_actions(self, action: str, since: float) -> list[tuple[str, float, int]]:
        """(target, engine time of its incident's close, incident) of actions planned since ``since``
        (engine time: wall time live, the logs' time in replay)."""
        return [
            (r["target"], r["closed_at"], r["incident"])
            for r in self._exec(
                # from the recent incidents to their actions (CROSS JOIN keeps that order, and the unary
                # + keeps SQLite from scanning every action of that name instead): the
                # work is the window's incidents, not every drain ever journaled
                "SELECT a.target, i.closed_at, a.incident FROM incidents i CROSS JOIN actions a ON a.incident = i.id "
                "WHERE i.closed_at >= ? AND +a.action = ? AND a.status NOT IN ('skipped')",
                (since, action),
            )
        ]

    def requeued_attempts(self, job: str) -> set[tuple[str, int]]:
        rows = self._exec(
            "SELECT i.job, i.attempt FROM incidents i CROSS JOIN actions a ON a.incident = i.id "
            "WHERE i.job = ? AND +a.action = 'requeue' AND a.mode = 'act'",
            (job,),
        )
        return {(r[0], int(r[1] or 0)) for r in rows}

    def add_silence(self, node: str, until: float, reason: str, by: str | None, start: float | None = None) -> int:
        """A silence holds from ``start`` (default: now) until ``until``; replayed evidence older than
        its start is judged as it would have been then."""
        cur = self._exec(
            "INSERT INTO silences(node, until, reason, by, created_at) VALUES (?,?,?,?,?)",
            (node, until, reason, by, time.time() if start is None else start),
        )
        return int(cur.lastrowid)

    def silences(self, active_at: float | None = None) -> list[dict[str, Any]]:
        if active_at is None:
            return [dict(r) for r in self._exec("SELECT * FROM silences ORDER BY id")]
        return [
            dict(r)
            for r in self._exec(
                "SELECT * FROM silences WHERE created_at <= ? AND until > ? ORDER BY id", (active_at, active_at)
            )
        ]

    def remove_silence(self, silence_id: int) -> bool:
        return self._exec("DELETE FROM silences WHERE id = ?", (silence_id,)).rowcount > 0

    def add_fact(self, incident: int, fact: Fact, derived_by: int | None = None) -> None:
        with self._lock:
            bump = self._bumps.pop(fact.id, None)
            if bump is not None:  # counted before this row existed: it must not count it
                try:
                    self._write_bump(fact.id, *bump)
                except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
                    raise StoreError(f"{self.path}: {exc}") from None
            self._add_fact(incident, fact, derived_by)

    def _add_fact(self, incident: int, fact: Fact, derived_by: int | None) -> None:
        self._exec(
            "INSERT INTO facts(incident, id, kind, attrs, at, origin, derived_by) VALUES (?,?,?,?,?,?,?) "
            "ON CONFLICT(incident, id) DO NOTHING",
            (
                incident,
                fact.id,
                fact.kind,
                json.dumps(fact.to_dict()["attrs"], sort_keys=True),
                fact.at,
                fact.origin,
                derived_by,
            ),
            pending_ok=True,
        )

    def bump_fact(self, fact_id: str, by: int = 1, flood: dict[str, Any] | None = None) -> None:
        """Count ``by`` more sightings; ``flood``: the last one's origin and text, nodes and ranks seen
        (buffered: see ``flush``)."""
        text = json.dumps(flood, sort_keys=True) if flood is not None else None
        with self._lock:
            pending = self._bumps.get(fact_id)
            if pending is None:
                self._bumps[fact_id] = [by, text]
            else:
                pending[0] += by
                if text is not None:
                    pending[1] = text
            if not self.write_behind:
                self.flush()

    def fact_floods(self, incident: int) -> dict[str, dict[str, Any]]:
        """fact id -> what the store knows of its repeats (see ``bump_fact``)."""
        try:
            rows = self._exec("SELECT id, flood FROM facts WHERE incident = ? AND flood IS NOT NULL", (incident,))
        except StoreError:  # opened read-only, a database from before the column
            return {}
        return {r["id"]: json.loads(r["flood"]) for r in rows}

    def add_firing(
        self,
        incident: int | None,
        rule: str,
        rule_mark: str,
        description: str,
        matched: dict[str, str],
        asserted: str | None,
        at: float,
    ) -> int:
        cur = self._exec(
            "INSERT INTO firings(incident, rule, rule_mark, description, matched, asserted, at) VALUES (?,?,?,?,?,?,?)",
            (incident, rule, rule_mark, description, json.dumps(matched, sort_keys=True), asserted, at),
            pending_ok=True,
        )
        return int(cur.lastrowid)

    def assign_firing(self, firing: int, incident: int) -> None:
        self._exec("UPDATE firings SET incident = ? WHERE id = ? AND incident IS NULL", (incident, firing))

    def add_action(
        self,
        incident: int,
        idem_key: str,
        action: str,
        target: str,
        argv: Sequence[str],
        mode: str,
        status: str,
        note: str = "",
    ) -> int | None:
        """Journal an action; returns its id, or None when the idempotency key is already there."""
        now = time.time()
        cur = self._exec(
            "INSERT INTO actions(incident, idem_key, action, target, argv, mode, status, note, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(idem_key) DO NOTHING",
            (incident, idem_key, action, target, json.dumps(list(argv)), mode, status, note, now, now),
        )
        return int(cur.lastrowid) if cur.rowcount else None

    def update_action(
        self,
        action_id: int,
        status: str,
        rc: int | None = None,
        output: str | None = None,
        verified: bool | None = None,
        note: str | None = None,
        attempt: bool = False,
    ) -> None:
        self._exec(
            "UPDATE actions SET status=?, rc=COALESCE(?, rc), output=COALESCE(?, output), verified=COALESCE(?, verified), "
            "note=COALESCE(?, note), attempts=attempts + ?, updated_at=? WHERE id=?",
            (
                status,
                rc,
                output,
                None if verified is None else int(verified),
                note,
                1 if attempt else 0,
                time.time(),
                action_id,
            ),
        )

    def quarantine(self, origin: str, text: str, error: str, at: float | None = None) -> None:
        """Keep aside an input whose handling failed (the same input and error again is counted)."""
        text, error, origin = text[:QUARANTINE_TEXT], error[:QUARANTINE_TEXT], origin[:500]
        row = self._exec(
            "SELECT id FROM quarantine WHERE origin = ? AND input = ? AND error = ?", (origin, text, error)
        ).fetchone()
        if row is not None:
            self._exec("UPDATE quarantine SET count = count + 1, at = ? WHERE id = ?", (at or time.time(), row[0]))
        else:
            self._exec(
                "INSERT INTO quarantine(origin, input, error, at) VALUES (?,?,?,?)",
                (origin, text, error, at or time.time()),
            )

    def meta(self, key: str) -> str | None:
        row = self._exec("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._exec(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def quarantined(self, limit: int = 1000) -> list[dict[str, Any]]:
        try:
            return [dict(r) for r in self._exec("SELECT * FROM quarantine ORDER BY id DESC LIMIT ?", (limit,))]
        except StoreError as exc:
            if "no such table" in str(exc):  # a database from before the quarantine
                return []
            raise

    def save_offset(self, source: str, inode: int | None, offset: int, line_no: int, head: str | None = None) -> None:
        """``head``: a fingerprint of the file's first bytes, so that a new file that got the old
        one's inode number is not taken for it after a restart."""
        self._exec(
            "INSERT INTO offsets(source, inode, offset, line_no, updated_at, head) VALUES (?,?,?,?,?,?) "
            "ON CONFLICT(source) DO UPDATE SET inode=excluded.inode, offset=excluded.offset, line_no=excluded.line_no, "
            "updated_at=excluded.updated_at, head=COALESCE(excluded.head, head)",
            (source, inode, offset, line_no, time.time(), head),
        )

    def offset_heads(self) -> dict[str, str]:
        return {r["source"]: r["head"] for r in self._exec("SELECT source, head FROM offsets WHERE head IS NOT NULL")}

    def add_review(self, incident: int, verdict: str, did: str | None, by: str | None, at: float | None = None) -> int:
        cur = self._exec(
            "INSERT INTO reviews(incident, verdict, did, by, at) VALUES (?,?,?,?,?)",
            (incident, verdict, did, by, at if at is not None else time.time()),
        )
        return int(cur.lastrowid)

    # -- reading ---------------------------------------------------------------------------
    def offsets(self) -> dict[str, tuple[int | None, int, int]]:
        return {r["source"]: (r["inode"], r["offset"], r["line_no"]) for r in self._exec("SELECT * FROM offsets")}

    def incident(self, incident: int) -> IncidentRow | None:
        r = self._exec("SELECT * FROM incidents WHERE id = ?", (incident,)).fetchone()
        return _row_to_incident(r) if r else None

    def incidents(
        self, status: str | None = None, since: float | None = None, newest: int | None = None
    ) -> list[IncidentRow]:
        """In id order; ``newest``: only the last that many."""
        sql, args = "SELECT * FROM incidents WHERE 1=1", []
        if status:
            sql += " AND status = ?"
            args.append(status)
        if since is not None:
            sql += " AND opened_at >= ?"
            args.append(since)
        if newest is not None:
            rows = self._exec(sql + " ORDER BY id DESC LIMIT ?", [*args, max(0, newest)]).fetchall()
            return [_row_to_incident(r) for r in reversed(rows)]
        return [_row_to_incident(r) for r in self._exec(sql + " ORDER BY id", args)]

    def count_incidents(self, status: str | None = None) -> int:
        if status:
            return int(self._exec("SELECT COUNT(*) FROM incidents WHERE status = ?", (status,)).fetchone()[0])
        return int(self._exec("SELECT COUNT(*) FROM incidents").fetchone()[0])

    def facts(self, incident: int) -> list[tuple[Fact, int, int | None]]:
        out = []
        for r in self._exec("SELECT * FROM facts WHERE incident = ? ORDER BY at, rowid", (incident,)):
            f = Fact(r["kind"], json.loads(r["attrs"]), r["at"], r["origin"], r["id"])
            out.append((f, r["count"], r["derived_by"]))
        return out

    def firings(self, incident: int) -> list[dict[str, Any]]:
        return [
            dict(r) | {"matched": json.loads(r["matched"])}
            for r in self._exec("SELECT * FROM firings WHERE incident = ? ORDER BY id", (incident,))
        ]

    def rules_fired(self, incident: int) -> list[str]:
        return [
            r["rule"]
            for r in self._exec("SELECT DISTINCT rule FROM firings WHERE incident = ? ORDER BY id", (incident,))
        ]

    def actions(self, incident: int | None = None, status: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM actions WHERE 1=1", []
        if incident is not None:
            sql += " AND incident = ?"
            args.append(incident)
        if status is not None:
            sql += " AND status = ?"
            args.append(status)
        return [dict(r) | {"argv": json.loads(r["argv"])} for r in self._exec(sql + " ORDER BY id", args)]

    def reviews(self, incident: int | None = None) -> list[dict[str, Any]]:
        if incident is None:
            return [dict(r) for r in self._exec("SELECT * FROM reviews ORDER BY id")]
        return [dict(r) for r in self._exec("SELECT * FROM reviews WHERE incident = ? ORDER BY id", (incident,))]


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


class _Tx:
    """Re-entrant: only the outermost ``with`` begins and commits (or rolls back)."""

    def __init__(self, store: Store):
        self.store = store

    def __enter__(self) -> Store:
        st = self.store
        st._lock.acquire()
        if st._depth == 0:
            try:
                st.flush()  # what was written before the transaction is not part of it
                st.db.execute("BEGIN IMMEDIATE")
            except StoreError:
                st._lock.release()
                raise
            except sqlite3.OperationalError as exc:
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
                        st.db.execute("COMMIT")
                    except (sqlite3.Error, StoreError) as e:
                        # a failed COMMIT (disk full, I/O error) may already have rolled back
                        if st.db.in_transaction:
                            try:
                                st.db.execute("ROLLBACK")
                            except sqlite3.Error:
                                pass
                        raise (e if isinstance(e, StoreError) else StoreError(f"{st.path}: {e}")) from e
                elif st.db.in_transaction:
                    try:
                        st.db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass  # the original exception is the one to see
        finally:
            st._lock.release()
