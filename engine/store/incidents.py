"""Incidents and what explains them: their facts (with origins and repeat counts), the rule
firings that derived them, the job progress they were judged with, and operators' reviews."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from engine.errors import StoreError
from engine.facts import Fact
from engine.store.connection import Connection
from engine.store.dialect import DB_ERRORS

__all__ = ["IncidentRow", "IncidentTables"]

#: ``json.dumps(value, sort_keys=True)``, without building an encoder per call
_SORTED = json.JSONEncoder(sort_keys=True)


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
    #: ranks the evidence points at: [{rank, node, signals: [{signal, detail, origin}]}] (core.suspects)
    suspects: tuple = ()

    def to_dict(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d["nodes"] = list(self.nodes)
        d["guards"] = list(self.guards)
        d["suspects"] = list(self.suspects)
        return d


def _row_to_incident(r: Any) -> IncidentRow:
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
        # a database opened read-only is never migrated: an older one lacks these
        context=r["context"] if "context" in r.keys() else None,
        mode_why=r["mode_why"] if "mode_why" in r.keys() else None,
        suspects=_suspects(r["suspects"]) if "suspects" in r.keys() else (),
    )


def _suspects(raw: str | None) -> tuple:
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return ()
    return tuple(s for s in value if isinstance(s, dict)) if isinstance(value, list) else ()


class IncidentTables(Connection):
    """incidents, facts, firings, progress, reviews."""

    # -- incidents -------------------------------------------------------------------------
    def open_incident(self, key: str, job: str | None, attempt: int | None, node: str | None, at: float) -> int:
        cur = self._exec(
            "INSERT INTO incidents(key, job, attempt, node, opened_at, last_evidence_at, detected_wall, context) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (key, job, attempt, node, at, at, self.clock.wall(), self.context),
            pending_ok=True,  # a new row: nothing buffered is about it
        )
        return int(cur.lastrowid or 0)

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
        self.set_incident_guards(incident, had + list(guards))

    def set_incident_guards(self, incident: int, guards: Sequence[Any]) -> None:
        """Replace an incident's guards (the actuator's notes on what held or refused an action)."""
        self._exec("UPDATE incidents SET guards=? WHERE id=?", (json.dumps(list(guards)), incident))

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
                self.clock.wall(),
                mode_why,
                incident,
            ),
        )

    def set_reason(self, incident: int, reason: str) -> None:
        """An open incident's reason as it stands (a shared outage's, as jobs join it)."""
        self._exec("UPDATE incidents SET reason=? WHERE id=?", (reason, incident))

    def set_suspects(self, incident: int, suspects: Sequence[Mapping[str, Any]]) -> None:
        self._exec("UPDATE incidents SET suspects=? WHERE id=?", (json.dumps(list(suspects), sort_keys=True), incident))

    def suspect_history(self, since: float, exclude: int | None = None) -> list[tuple[str, str, float]]:
        """(job, node, closed_at) of each suspect node of incidents closed since ``since``; not those
        of a shared outage's jobs (an action of theirs was held): the victims of one cause."""
        rows = self._exec(
            "SELECT job, suspects, closed_at FROM incidents WHERE status = 'closed' AND closed_at >= ? "
            "AND suspects IS NOT NULL AND suspects != '[]' AND id != ? AND job IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM actions a WHERE a.incident = incidents.id AND a.held_by IS NOT NULL)",
            (since, exclude or -1),
        )
        out = []
        for r in rows:
            for s in _suspects(r["suspects"]):
                if s.get("node"):
                    out.append((str(r["job"]), str(s["node"]), float(r["closed_at"])))
        return out

    def job_history(self, job: str, exclude: int | None = None) -> list[dict[str, Any]]:
        rows = self._exec(
            "SELECT id, attempt, decision, fault_class, fingerprint, closed_at FROM incidents "
            "WHERE job = ? AND status = 'closed' AND id != ? ORDER BY id",
            (job, exclude or -1),
        )
        return [dict(r) for r in rows]

    def incident(self, incident: int) -> IncidentRow | None:
        r = self._exec("SELECT * FROM incidents WHERE id = ?", (incident,)).fetchone()
        return _row_to_incident(r) if r else None

    def require_incident(self, incident: int) -> IncidentRow:
        """The incident with this id, which must exist (one this store just opened or was
        told of): a missing row is a ``StoreError``, never a ``None`` to trip on later."""
        row = self.incident(incident)
        if row is None:
            raise StoreError(f"{self.path}: no incident {incident}")
        return row

    def incidents(
        self, status: str | None = None, since: float | None = None, newest: int | None = None
    ) -> list[IncidentRow]:
        """In id order; ``newest``: only the last that many."""
        sql, args = "SELECT * FROM incidents WHERE 1=1", list[Any]()
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
            row = self._exec("SELECT COUNT(*) FROM incidents WHERE status = ?", (status,)).fetchone()
        else:
            row = self._exec("SELECT COUNT(*) FROM incidents").fetchone()
        return int(row[0]) if row is not None else 0

    # -- facts -----------------------------------------------------------------------------
    def add_fact(self, incident: int, fact: Fact, derived_by: int | None = None) -> None:
        attrs = _SORTED.encode({k: list(v) if isinstance(v, tuple) else v for k, v in fact.attrs.items()})
        with self._lock:
            if self._defer_rows:  # written at the commit (``Connection.flush``), after the counts before it
                key = (incident, fact.id)
                if key not in self._fact_rows:
                    row = [incident, fact.id, fact.kind, attrs, fact.at, fact.origin, derived_by, 1, None]
                    self._fact_rows[key] = row
                    self._rows_of.setdefault(fact.id, []).append(row)
                return
            bump = self._bumps.pop(fact.id, None)
            if bump is not None:  # counted before this row existed: it must not count it
                try:
                    self._write_bump(fact.id, *bump)
                except DB_ERRORS as exc:
                    raise StoreError(f"{self.path}: {exc}") from None
            self._exec(
                "INSERT INTO facts(incident, id, kind, attrs, at, origin, derived_by) VALUES (?,?,?,?,?,?,?) "
                "ON CONFLICT(incident, id) DO NOTHING",
                (incident, fact.id, fact.kind, attrs, fact.at, fact.origin, derived_by),
                pending_ok=True,
            )

    def bump_fact(self, fact_id: str, by: int = 1, flood: dict[str, Any] | None = None) -> None:
        """Count ``by`` more sightings; ``flood``: the last one's origin and text, nodes and ranks seen
        (buffered: see ``flush``)."""
        text = _SORTED.encode(flood) if flood is not None else None
        with self._lock:
            for row in self._rows_of.get(fact_id, ()):  # rows not written yet count it themselves
                row[7] += by
                if text is not None:
                    row[8] = text
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

    def facts(self, incident: int) -> list[tuple[Fact, int, int | None]]:
        out = []
        for r in self._exec("SELECT * FROM facts WHERE incident = ? ORDER BY at, rowid", (incident,)):
            f = Fact(r["kind"], json.loads(r["attrs"]), r["at"], r["origin"], r["id"])
            out.append((f, r["count"], r["derived_by"]))
        return out

    # -- firings ---------------------------------------------------------------------------
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
        text = _SORTED.encode(matched)
        with self._lock:
            if self._defer_rows:  # written at the commit, with the id AUTOINCREMENT would give it
                if self._next_firing is None:
                    row = self._exec(
                        "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'firings'), 0), "
                        "COALESCE((SELECT MAX(id) FROM firings), 0))",
                        pending_ok=True,
                    ).fetchone()
                    self._next_firing = int(row[0]) + 1
                firing = self._next_firing
                self._next_firing += 1
                self._firing_rows.append((firing, incident, rule, rule_mark, description, text, asserted, at))
                return firing
            cur = self._exec(
                "INSERT INTO firings(incident, rule, rule_mark, description, matched, asserted, at) VALUES (?,?,?,?,?,?,?)",
                (incident, rule, rule_mark, description, text, asserted, at),
                pending_ok=True,
            )
            return int(cur.lastrowid or 0)

    def assign_firing(self, firing: int, incident: int) -> None:
        self._exec("UPDATE firings SET incident = ? WHERE id = ? AND incident IS NULL", (incident, firing))

    def firings(self, incident: int) -> list[dict[str, Any]]:
        return [
            dict(r) | {"matched": json.loads(r["matched"])}
            for r in self._exec("SELECT * FROM firings WHERE incident = ? ORDER BY id", (incident,))
        ]

    def rules_fired(self, incident: int) -> list[str]:
        """Each rule once, in the order it first fired."""
        return [
            r["rule"]
            for r in self._exec(
                "SELECT rule FROM firings WHERE incident = ? GROUP BY rule ORDER BY MIN(id)", (incident,)
            )
        ]

    # -- job progress ----------------------------------------------------------------------
    def save_progress(
        self, job: str, attempt: int, step: int | None, checkpoint: int | None, last_at: float | None
    ) -> None:
        self._exec(
            "INSERT INTO progress(job, attempt, step, checkpoint, last_at) VALUES (?,?,?,?,?) "
            "ON CONFLICT(job, attempt) DO UPDATE SET step=GREATEST(COALESCE(progress.step, excluded.step), COALESCE(excluded.step, progress.step)), "
            "checkpoint=GREATEST(COALESCE(progress.checkpoint, excluded.checkpoint), COALESCE(excluded.checkpoint, progress.checkpoint)), "
            "last_at=excluded.last_at",
            (job, attempt, step, checkpoint, last_at),
        )

    def progress_of(self, job: str) -> dict[int, dict[str, Any]]:
        return {
            r["attempt"]: {"step": r["step"], "checkpoint": r["checkpoint"], "last_at": r["last_at"]}
            for r in self._exec("SELECT * FROM progress WHERE job = ?", (job,))
        }

    # -- reviews ---------------------------------------------------------------------------
    def add_review(self, incident: int, verdict: str, did: str | None, by: str | None, at: float | None = None) -> int:
        cur = self._exec(
            "INSERT INTO reviews(incident, verdict, did, by, at) VALUES (?,?,?,?,?)",
            (incident, verdict, did, by, at if at is not None else self.clock.wall()),
        )
        return int(cur.lastrowid or 0)

    def reviews(self, incident: int | None = None) -> list[dict[str, Any]]:
        if incident is None:
            return [dict(r) for r in self._exec("SELECT * FROM reviews ORDER BY id")]
        return [dict(r) for r in self._exec("SELECT * FROM reviews WHERE incident = ? ORDER BY id", (incident,))]
