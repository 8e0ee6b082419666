"""The actions journal: every action planned, with its rendered argv, mode, status and
idempotency key. The actuator moves an action along these statuses (engine/live/actuator.py).

Every write carries the store's leader term (``Connection.term``); once a controller has held the
lease, the database refuses an acted row whose term is not the lease's live one (the triggers of
schema migration 7), and the store raises ``Fenced``."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, Sequence

from engine.store.connection import Connection

__all__ = ["ActionStatus", "TERMINAL", "ActionsJournal"]


class ActionStatus(str, Enum):
    """Where a journaled action stands. A ``str``: the store and the rows it returns hold the plain
    value, and ``row["status"] == ActionStatus.VERIFIED`` holds."""

    RECOMMENDED = "recommended"  # recommend mode, or an autonomy that only recommends: never run
    PLANNED = "planned"  # journaled with its incident's close, not run yet
    STARTED = "started"  # about to run: after a crash it may or may not have run
    SUCCEEDED = "succeeded"  # ran with rc 0, its effect not seen yet
    FAILED = "failed"  # ran and failed: retried, or escalated
    VERIFIED = "verified"  # its effect was seen
    ESCALATED = "escalated"  # given up on: a person is told
    SKIPPED = "skipped"  # not needed, or refused (the note says which)
    HELD = "held"  # held back by a shared outage (held_by); released as planned/recommended when it ends

    def __str__(self) -> str:  # the value in logs and f-strings, on every Python version
        return self.value


#: statuses an action never leaves
TERMINAL: frozenset[str] = frozenset(
    {ActionStatus.VERIFIED, ActionStatus.ESCALATED, ActionStatus.SKIPPED, ActionStatus.RECOMMENDED}
)


def _terminal_sql() -> str:
    # the statuses are ours, never input: they can be written into the statement
    return ", ".join(f"'{s}'" for s in sorted(TERMINAL))


class ActionsJournal(Connection):
    """actions."""

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
        held_by: int | None = None,
    ) -> int | None:
        """Journal an action; returns its id, or None when the idempotency key is already there.
        ``held_by``: the shared outage incident that holds it (status ``held``)."""
        now = self.clock.wall()
        cur = self._exec(
            "INSERT INTO actions(incident, idem_key, action, target, argv, mode, status, note, created_at, updated_at, "
            "term, held_by) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(idem_key) DO NOTHING",
            (
                incident,
                idem_key,
                action,
                target,
                json.dumps(list(argv)),
                mode,
                str(status),
                note,
                now,
                now,
                self.term,
                held_by,
            ),
        )
        return int(cur.lastrowid or 0) if cur.rowcount else None

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
        now = self.clock.wall()
        # issued_at: when it was last started, i.e. when its command was about to run (goodput)
        self._exec(
            "UPDATE actions SET status=?, rc=COALESCE(?, rc), output=COALESCE(?, output), verified=COALESCE(?, verified), "
            "note=COALESCE(?, note), attempts=attempts + ?, updated_at=?, term=?, "
            "issued_at=CASE WHEN ? = 1 THEN ? ELSE issued_at END WHERE id=?",
            (
                str(status),
                rc,
                output,
                None if verified is None else int(verified),
                note,
                1 if attempt else 0,
                now,
                self.term,
                int(str(status) == ActionStatus.STARTED.value),
                now,
                action_id,
            ),
        )

    def set_action_argv(self, action_id: int, argv: Sequence[str]) -> None:
        """The command as rendered again just before it runs (live exclusions, the outcome so far)."""
        self._exec("UPDATE actions SET argv = ?, term = ? WHERE id = ?", (json.dumps(list(argv)), self.term, action_id))

    def unfinished_incidents(self) -> list[int]:
        """Incidents with an acted action not in a terminal status, in id order."""
        rows = self._exec(
            "SELECT DISTINCT incident FROM actions WHERE mode = 'act' AND status NOT IN (" + _terminal_sql() + ") "
            f"AND status != '{ActionStatus.HELD.value}' ORDER BY incident"
        )
        return [int(r[0]) for r in rows]

    def actions(self, incident: int | None = None, status: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM actions WHERE 1=1", list[Any]()
        if incident is not None:
            sql += " AND incident = ?"
            args.append(incident)
        if status is not None:
            sql += " AND status = ?"
            args.append(str(status))
        return [dict(r) | {"argv": json.loads(r["argv"])} for r in self._exec(sql + " ORDER BY id", args)]

    def recent_actions(self, action: str, since: float) -> list[tuple[str, float, int]]:
        """(target, engine time of its incident's close, incident) of actions planned since ``since``
        (engine time: wall time live, the logs' time in replay); neither skipped nor held ones."""
        return self.recent_actions_of((action,), since)[action]

    def recent_actions_of(self, actions: Sequence[str], since: float) -> dict[str, list[tuple[str, float, int]]]:
        """``recent_actions`` of each of ``actions``, in one pass over the window's incidents (a
        guard context reads drains and requeues: in a cascade the window holds hundreds)."""
        out: dict[str, list[tuple[str, float, int]]] = {a: [] for a in actions}
        marks = ",".join("?" * len(out))
        for r in self._exec(
            # from the recent incidents to their actions (CROSS JOIN keeps that order, and the unary
            # + keeps SQLite from scanning every action of those names instead): the
            # work is the window's incidents, not every drain ever journaled
            "SELECT a.action, a.target, i.closed_at, a.incident FROM incidents i CROSS JOIN actions a "
            f"ON a.incident = i.id WHERE i.closed_at >= ? AND +a.action IN ({marks}) AND a.status NOT IN "
            f"('{ActionStatus.SKIPPED.value}', '{ActionStatus.HELD.value}')",
            (since, *out),
        ):
            action, target, closed_at, incident = r  # by position: hundreds of rows in a cascade
            out[action].append((target, closed_at, incident))
        return out

    def held_actions(self, outage: int) -> list[dict[str, Any]]:
        """The actions the shared outage incident ``outage`` holds back now."""
        rows = self._exec(
            "SELECT * FROM actions WHERE held_by = ? AND status = ? ORDER BY id", (outage, ActionStatus.HELD.value)
        )
        return [dict(r) | {"argv": json.loads(r["argv"])} for r in rows]

    def release_held(self, outage: int, note: str) -> int:
        """The actions ``outage`` held, released: planned (acted ones) or recommended; how many."""
        cur = self._exec(
            "UPDATE actions SET status = CASE mode WHEN 'act' THEN ? ELSE ? END, note = ?, updated_at = ?, term = ? "
            "WHERE held_by = ? AND status = ?",
            (
                ActionStatus.PLANNED.value,
                ActionStatus.RECOMMENDED.value,
                note,
                self.clock.wall(),
                self.term,
                outage,
                ActionStatus.HELD.value,
            ),
        )
        return int(cur.rowcount or 0)

    def requeued_attempts(self, job: str) -> set[tuple[str, int]]:
        rows = self._exec(
            "SELECT i.job, i.attempt FROM incidents i CROSS JOIN actions a ON a.incident = i.id "
            "WHERE i.job = ? AND +a.action = 'requeue' AND a.mode = 'act'",
            (job,),
        )
        return {(r[0], int(r[1] or 0)) for r in rows}
