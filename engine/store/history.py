"""What a job attempt's life looked like, for the goodput report (docs/goodput.md): the scheduler
states the controller saw (``job_events``), and the facts of its progress beyond its last step
(``progress``: its first progress, its last completed checkpoint and when, the step time it
printed). ``engine.core.ledger`` records them as the facts arrive; ``engine.ops.goodput`` only
reads them (nothing is re-read from logs at report time)."""

from __future__ import annotations

import json
from typing import Any, Sequence

from engine.errors import StoreError
from engine.store.connection import Connection

__all__ = ["JobHistoryTables", "PROGRESS_FIELDS"]

#: the columns of one progress row, as ``progress_rows`` gives them
PROGRESS_FIELDS = ("step", "checkpoint", "last_at", "first_at", "first_step", "checkpoint_at", "step_time")


class JobHistoryTables(Connection):
    """job_events, and the goodput columns of progress."""

    def add_job_event(
        self,
        job: str,
        attempt: int,
        state: str,
        at: float,
        nodes: Sequence[str] = (),
        reason: str | None = None,
        origin: str | None = None,
    ) -> int:
        """One state the scheduler gave a job attempt at ``at`` (engine time: wall time live)."""
        cur = self._exec(
            "INSERT INTO job_events(job, attempt, state, at, nodes, reason, origin) VALUES (?,?,?,?,?,?,?)",
            (job, int(attempt), state, at, json.dumps(list(nodes)), reason, origin),
            pending_ok=True,  # a table no buffered write touches
        )
        return int(cur.lastrowid or 0)

    def job_events(self, job: str | None = None) -> list[dict[str, Any]]:
        """In time order (then as recorded); ``nodes`` as a list."""
        sql, args = "SELECT * FROM job_events", list[Any]()
        if job is not None:
            sql += " WHERE job = ?"
            args.append(job)
        try:
            rows = self._exec(sql + " ORDER BY at, id", args, pending_ok=True)
        except StoreError as exc:
            if "no such table" in str(exc):  # opened read-only, a database from before schema 9
                return []
            raise
        return [dict(r) | {"nodes": json.loads(r["nodes"] or "[]")} for r in rows]

    def note_progress(
        self,
        job: str,
        attempt: int,
        *,
        step: int | None = None,
        last_at: float | None = None,
        first_at: float | None = None,
        first_step: int | None = None,
        checkpoint: int | None = None,
        checkpoint_at: float | None = None,
        step_time: float | None = None,
    ) -> None:
        """What an attempt's progress says so far, merged with what is stored: the highest step
        and checkpoint (a checkpoint's time moves only with a higher checkpoint), the latest
        progress, the earliest first progress (with its step), the latest step time."""
        self._exec(
            "INSERT INTO progress(job, attempt, step, checkpoint, last_at, first_at, first_step, checkpoint_at, step_time) "
            "VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(job, attempt) DO UPDATE SET "
            "step = GREATEST(COALESCE(progress.step, excluded.step), COALESCE(excluded.step, progress.step)), "
            "checkpoint_at = CASE WHEN excluded.checkpoint IS NOT NULL AND (progress.checkpoint IS NULL OR excluded.checkpoint > progress.checkpoint) "
            "THEN excluded.checkpoint_at ELSE progress.checkpoint_at END, "
            "checkpoint = GREATEST(COALESCE(progress.checkpoint, excluded.checkpoint), COALESCE(excluded.checkpoint, progress.checkpoint)), "
            "last_at = GREATEST(COALESCE(progress.last_at, excluded.last_at), COALESCE(excluded.last_at, progress.last_at)), "
            "first_step = CASE WHEN excluded.first_at IS NOT NULL AND (progress.first_at IS NULL OR excluded.first_at < progress.first_at) "
            "THEN excluded.first_step ELSE progress.first_step END, "
            "first_at = LEAST(COALESCE(progress.first_at, excluded.first_at), COALESCE(excluded.first_at, progress.first_at)), "
            "step_time = COALESCE(excluded.step_time, progress.step_time)",
            (job, int(attempt), step, checkpoint, last_at, first_at, first_step, checkpoint_at, step_time),
            pending_ok=True,  # a table no buffered write touches
        )

    def progress_rows(self, job: str | None = None) -> dict[tuple[str, int], dict[str, Any]]:
        """(job, attempt) -> every column of ``PROGRESS_FIELDS`` (None where not known)."""
        sql, args = "SELECT * FROM progress", list[Any]()
        if job is not None:
            sql += " WHERE job = ?"
            args.append(job)
        out: dict[tuple[str, int], dict[str, Any]] = {}
        for r in self._exec(sql, args, pending_ok=True):
            keys = r.keys()
            out[(str(r["job"]), int(r["attempt"]))] = {f: (r[f] if f in keys else None) for f in PROGRESS_FIELDS}
        return out

    def first_evidence(self, kinds: Sequence[str]) -> dict[int, float]:
        """incident id -> the time of its earliest fact of these kinds (its first evidence)."""
        marks = ",".join("?" * len(kinds)) or "NULL"
        rows = self._exec(
            f"SELECT incident, MIN(at) AS at FROM facts WHERE kind IN ({marks}) GROUP BY incident", list(kinds)
        )
        return {int(r["incident"]): float(r["at"]) for r in rows}
