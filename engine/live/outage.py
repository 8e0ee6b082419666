"""When the incident store refuses writes (a full disk, a lock held too long), or a step fails
with an unexpected error: input pauses, nothing is lost.

The transaction in progress was rolled back, so what lives in memory only (open incidents, read
positions, job states) may be ahead of the store. ``StoreOutage`` is the state machine that says
when to probe the store again: every ``STORE_RETRY_S`` after a refused write, with a growing
backoff after unexpected errors in a row. Once a probe is accepted the controller rebuilds memory
from what the store has committed and reads again from there.

    outage.failed(exc)       # a write was refused: down, retry in STORE_RETRY_S
    outage.bug()             # an unexpected error: down, retry after a backoff
    if outage.down and outage.due():
        ... probe; on success: why = outage.recovered()
"""

from __future__ import annotations

import logging
import os

from engine.clock import SYSTEM, Clock
from engine.live.metrics import LogLimiter, Metrics
from engine.store.dialect import is_postgres

logger = logging.getLogger(__name__)

__all__ = ["STORE_RETRY_S", "StoreOutage", "db_identity", "db_lost", "describe"]

#: while the store refuses writes, try again this often
STORE_RETRY_S = 1.0
#: after unexpected errors in a row, the wait grows up to this
BUG_BACKOFF_MAX_S = 30.0


def db_identity(db: str) -> tuple[int, int] | None:
    """The SQLite file's (device, inode); None for PostgreSQL (no file to delete or replace) or
    when there is no file."""
    if db == ":memory:" or is_postgres(db):
        return None
    try:
        st = os.stat(db)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def db_lost(db: str, identity: tuple[int, int] | None) -> str | None:
    """Why the database opened as ``identity`` is no longer the one at its path (deleted,
    replaced), or None. A controller that went on would forget what it did and redo it."""
    if identity is None:
        return None
    now = db_identity(db)
    if now is None:
        return f"incident store {db} was deleted while running"
    if now != identity:
        return f"incident store {db} was replaced by another file while running"
    return None


def describe(exc: BaseException) -> str:
    """The error and what caused it (a failed ROLLBACK can hide the real cause, e.g. a full disk)."""
    parts: list[str] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(parts) < 3:
        seen.add(id(e))
        parts.append(str(e) or type(e).__name__)
        e = e.__cause__ or e.__context__
    return "; after: ".join(parts)


class StoreOutage:
    """Whether input is paused, since when, when to probe again, and why (for the log)."""

    def __init__(
        self,
        path: str,
        metrics: Metrics,
        limiter: LogLimiter,
        *,
        clock: Clock = SYSTEM,
    ):
        self.path = path
        self.metrics = metrics
        self.limiter = limiter
        self.clock = clock
        self.down_since: float | None = None  # wall time the pause began
        self.retry_at = 0.0  # monotonic time of the next probe
        self.failures = 0  # unexpected errors in a row
        self._reason: str | None = None  # why memory is rebuilt, when not a store outage

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, exc: BaseException) -> None:
        """The store refused a write: input pauses; probe again in STORE_RETRY_S."""
        self.metrics.store_errors.inc()
        self.metrics.store_healthy.set(0)
        self._reason = None
        if self.down_since is None:
            self.down_since = self.clock.wall()
            logger.error(
                "incident store %s refused a write (%s): input paused; nothing is lost, reading resumes "
                "from the last committed positions once it accepts writes again",
                self.path,
                describe(exc),
            )
        elif self.limiter.ok("store-down"):
            logger.error(
                "incident store %s still refuses writes (%s), down for %.0f s",
                self.path,
                describe(exc),
                self.clock.wall() - self.down_since,
            )
        self.retry_at = self.clock.monotonic() + STORE_RETRY_S

    def bug(self) -> None:
        """A step failed unexpectedly (its transaction was rolled back): memory is made to agree
        with the store again as after an outage, after a backoff that grows while it repeats."""
        self.failures += 1
        self.down_since = self.down_since or self.clock.wall()
        self.retry_at = self.clock.monotonic() + min(BUG_BACKOFF_MAX_S, 0.5 * 2 ** min(self.failures, 6))
        self._reason = "after an unexpected error"

    def succeeded(self) -> None:
        """A step went through: the unexpected errors in a row are over."""
        self.failures = 0

    def due(self) -> bool:
        return self.clock.monotonic() >= self.retry_at

    def wait_s(self, tick: float) -> float:
        """How long the loop may sleep while down: until the next probe, at most a tick."""
        return min(tick, max(0.0, self.retry_at - self.clock.monotonic())) or tick

    def recovered(self) -> str:
        """The store took a probe's write: input resumes. Returns why memory is rebuilt (for the log)."""
        down = self.clock.wall() - (self.down_since if self.down_since is not None else self.clock.wall())
        why = self._reason or f"incident store {self.path} accepts writes again after {down:.1f} s"
        self.down_since = None
        self._reason = None
        self.metrics.store_healthy.set(1)
        return why
