"""The leader lease: one row naming the controller that may act, its term and its expiry, and the
controllers that share the store (leader and followers, for ``recover status``).

Every decision about the lease is one write transaction (SQLite's ``BEGIN IMMEDIATE``; on
PostgreSQL a lock on the lease table taken first) that reads and writes the row against the
database's own clock (``schema.NOW_SQL``: on SQLite the wall clock of the process that writes,
the one writer at a time; on PostgreSQL the server's), never the caller's: two controllers cannot
both see the lease free. A new holder gets the next term; the term is the fencing token that every acted
journal row and every leader transaction carries, checked by the database (schema migration 7).

    lease = store.acquire("host:123:1700000000", ttl=15.0)   # a LeaseView; .term set when ours
    store.renew(holder, term, ttl)                           # False: lost (taken, or ran out)
    store.release(holder, term)                              # at a clean stop: a follower takes it at once
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import StoreError
from engine.store.connection import Connection, store_error
from engine.store.dialect import DB_ERRORS
from engine.store.schema import NOW_SQL

__all__ = ["LeaseTables", "LeaseView"]


@dataclass(frozen=True)
class LeaseView:
    """The lease row as the database saw it, with its clock at that moment (``now``)."""

    holder: str
    term: int
    expires: float
    acquired_at: float
    renewed_at: float
    now: float
    #: True when this call made the caller the holder (or kept it so)
    ours: bool = False

    @property
    def live(self) -> bool:
        return self.expires > self.now

    @property
    def left_s(self) -> float:
        return self.expires - self.now


class LeaseTables(Connection):
    """lease, controllers."""

    def _locked(self, fn) -> Any:
        """``fn()`` in its own write transaction (the lease is never part of a batch)."""
        with self._lock:
            if self.db.in_transaction:
                raise RuntimeError("the lease is decided in its own transaction, not inside another")
            try:
                self.db.execute(self.dialect.begin)
                try:
                    if self.dialect.lock_lease:
                        self.db.execute(self.dialect.lock_lease)
                    out = fn()
                except BaseException:
                    self.db.execute("ROLLBACK")
                    raise
                self.db.execute("COMMIT")
                return out
            except DB_ERRORS as exc:
                if self.db.in_transaction:
                    try:
                        self.db.execute("ROLLBACK")
                    except DB_ERRORS:
                        pass
                raise store_error(self.path, exc) from None

    def _row(self) -> LeaseView | None:
        row = self._x(
            f"SELECT holder, term, expires, acquired_at, renewed_at, {NOW_SQL} FROM lease WHERE name = 'leader'"
        ).fetchone()
        if row is None:
            return None
        return LeaseView(str(row[0]), int(row[1]), float(row[2]), float(row[3]), float(row[4]), float(row[5]))

    def lease(self) -> LeaseView | None:
        """The lease as it stands (None: no controller ever led this store). Reads only."""
        with self._lock:
            try:
                return self._row()
            except DB_ERRORS as exc:
                raise store_error(self.path, exc) from None

    def acquire(self, holder: str, ttl: float, dead: str | None = None) -> LeaseView:
        """Take the lease if it is free (never held, released, or expired by the database's clock),
        or keep it when ``holder`` holds it live; a new holder gets the next term. Returns the row
        after the decision: ``.ours`` says whether ``holder`` holds it now. ``dead``: a holder the
        caller knows has exited (a process of its own host that is gone): its lease is free too."""

        def take() -> LeaseView:
            cur = self._row()
            if cur is None:
                self._x(
                    "INSERT INTO lease(name, holder, term, expires, acquired_at, renewed_at) "
                    f"VALUES ('leader', ?, 1, {NOW_SQL} + ?, {NOW_SQL}, {NOW_SQL})",
                    (holder, ttl),
                )
            elif cur.holder == holder and cur.live:
                self._x(
                    f"UPDATE lease SET expires = {NOW_SQL} + ?, renewed_at = {NOW_SQL} WHERE name = 'leader'", (ttl,)
                )
            elif not cur.live or (dead is not None and cur.holder == dead):
                # a holder that let it run out gets a new term too: what it did under the old one is
                # resumed from the journal like anyone else's
                self._x(
                    f"UPDATE lease SET holder = ?, term = term + 1, expires = {NOW_SQL} + ?, "
                    f"acquired_at = {NOW_SQL}, renewed_at = {NOW_SQL} WHERE name = 'leader'",
                    (holder, ttl),
                )
            else:
                return cur
            got = self._row()
            assert got is not None
            return LeaseView(**{**got.__dict__, "ours": True})

        out: LeaseView = self._locked(take)
        return out

    def renew(self, holder: str, term: int, ttl: float) -> bool:
        """Extend a live lease this holder holds under this term; False when it is no longer so."""

        def extend() -> bool:
            cur = self._x(
                f"UPDATE lease SET expires = {NOW_SQL} + ?, renewed_at = {NOW_SQL} "
                f"WHERE name = 'leader' AND holder = ? AND term = ? AND expires > {NOW_SQL}",
                (ttl, holder, term),
            )
            return cur.rowcount == 1

        ok: bool = self._locked(extend)
        return ok

    def release(self, holder: str, term: int) -> bool:
        """Give the lease up (a clean stop, or a renewal that failed): it expires now, so a
        follower takes it on its next try. The row stays, with its term: fencing goes on."""

        def give_up() -> bool:
            cur = self._x(
                f"UPDATE lease SET expires = LEAST(expires, {NOW_SQL}) WHERE name = 'leader' AND holder = ? AND term = ?",
                (holder, term),
            )
            return cur.rowcount == 1

        ok: bool = self._locked(give_up)
        return ok

    def close(self) -> None:
        """A store closed cleanly gives up the lease it leads under (its term is unique to it): a
        controller that stops, or a test that drops one, leaves the next one nothing to wait for."""
        term = self.term
        if term is not None:
            self.term = None
            try:
                self._locked(
                    lambda: self._x(
                        f"UPDATE lease SET expires = LEAST(expires, {NOW_SQL}) WHERE name = 'leader' AND term = ?",
                        (term,),
                    )
                )
            except DB_ERRORS + (StoreError, RuntimeError):
                pass  # it runs out by itself
        super().close()

    def heartbeat(
        self,
        holder: str,
        role: str,
        term: int | None,
        mode: str,
        started_at: float,
        info: str | None = None,
        forget_after: float | None = None,
    ) -> None:
        """This controller is alive, as leader or follower (``recover status`` lists them); those
        not heard of for ``forget_after`` seconds (killed, their host gone) leave the list."""

        def beat() -> None:
            if forget_after is not None:
                self._x(f"DELETE FROM controllers WHERE seen_at < {NOW_SQL} - ?", (forget_after,))
            self._x(
                "INSERT INTO controllers(holder, role, term, mode, started_at, seen_at, info) "
                f"VALUES (?, ?, ?, ?, ?, {NOW_SQL}, ?) ON CONFLICT(holder) DO UPDATE SET role = excluded.role, "
                "term = excluded.term, mode = excluded.mode, seen_at = excluded.seen_at, info = excluded.info",
                (holder, role, term, mode, started_at, info),
            )

        self._locked(beat)

    def forget_controller(self, holder: str) -> None:
        """A controller that stopped cleanly leaves the list."""
        self._locked(lambda: self._x("DELETE FROM controllers WHERE holder = ?", (holder,)))

    def controllers(self) -> list[dict[str, Any]]:
        """Every controller that said it was alive, with how long ago (``age_s``, database clock)."""
        rows = self._exec(
            f"SELECT holder, role, term, mode, started_at, seen_at, info, {NOW_SQL} - seen_at AS age_s FROM controllers "
            "ORDER BY role, holder"
        )
        return [dict(r) for r in rows]

    def backlog(self) -> dict[str, int]:
        """Acted actions not finished yet, by status (what a leader has still to do)."""
        from engine.store.journal import TERMINAL

        done = ", ".join(f"'{s}'" for s in sorted(TERMINAL))  # our statuses, never input
        rows = self._exec(
            f"SELECT status, COUNT(*) FROM actions WHERE mode = 'act' AND status NOT IN ({done}) GROUP BY status"
        )
        return {str(r[0]): int(r[1]) for r in rows}
