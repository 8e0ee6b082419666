"""What is held aside: silences (nodes whose evidence is not acted on for a while) and the
quarantine (inputs whose handling failed, kept with the error so one poison line never stops the
rest)."""

from __future__ import annotations

from typing import Any

from engine.errors import StoreError
from engine.store.connection import Connection

__all__ = ["AsideTables", "QUARANTINE_TEXT"]

#: the most a quarantined input keeps of its text
QUARANTINE_TEXT = 2000


class AsideTables(Connection):
    """silences, quarantine."""

    def add_silence(self, node: str, until: float, reason: str, by: str | None, start: float | None = None) -> int:
        """A silence holds from ``start`` (default: now) until ``until``; replayed evidence older than
        its start is judged as it would have been then."""
        cur = self._exec(
            "INSERT INTO silences(node, until, reason, by, created_at) VALUES (?,?,?,?,?)",
            (node, until, reason, by, self.clock.wall() if start is None else start),
        )
        return int(cur.lastrowid or 0)

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

    def quarantine(self, origin: str, text: str, error: str, at: float | None = None) -> None:
        """Keep aside an input whose handling failed (the same input and error again is counted).
        ``at``: when (default now; 0.0 is a time like any other)."""
        text, error, origin = text[:QUARANTINE_TEXT], error[:QUARANTINE_TEXT], origin[:500]
        when = self.clock.wall() if at is None else at
        row = self._exec(
            "SELECT id FROM quarantine WHERE origin = ? AND input = ? AND error = ?", (origin, text, error)
        ).fetchone()
        if row is not None:
            self._exec("UPDATE quarantine SET count = count + 1, at = ? WHERE id = ?", (when, row[0]))
        else:
            self._exec("INSERT INTO quarantine(origin, input, error, at) VALUES (?,?,?,?)", (origin, text, error, when))

    def quarantined(self, limit: int = 1000) -> list[dict[str, Any]]:
        try:
            return [dict(r) for r in self._exec("SELECT * FROM quarantine ORDER BY id DESC LIMIT ?", (limit,))]
        except StoreError as exc:
            if "no such table" in str(exc):  # opened read-only, a database from before the quarantine
                return []
            raise
