"""One SQLite transaction of the live controller and what it holds.

The facts, firings and incidents a piece of input produced are committed together with the read
positions of the files and the spool they came from, so a kill -9 neither loses nor repeats a
line. A burst is committed in pieces (``full()``), each with its positions, so that a stop is
honoured within a fraction of a second. Incidents closed inside a transaction are announced only
once it is committed (a rolled back close is done again later).

    batch = Batch(store, follower, metrics, limiter, on_commit=announce)
    batch.begin()
    engine.ingest(fact); batch.count_fact()
    batch.commit()          # offsets + facts together; then on_commit(closed incidents)
"""

from __future__ import annotations

import json
import logging
import sqlite3
from contextlib import AbstractContextManager
from typing import Any, Callable, Mapping

from engine.clock import SYSTEM, Clock
from engine.core.incidents import ClosedIncident
from engine.live.metrics import LogLimiter, Metrics
from engine.live.filestate import state_of
from engine.sources.follow import Follower, Tailed
from engine.store import Store, StoreError

logger = logging.getLogger(__name__)

__all__ = ["BATCH_HITS", "BATCH_SECONDS", "STORE_ERRORS", "Batch"]

#: one transaction holds at most this many scanner hits, or this much work: a burst of matching
#: lines is committed in pieces (each with its read offset), so a stop request is honoured within
#: a fraction of a second and a kill -9 loses at most the piece in progress (read again later)
BATCH_HITS = 500
BATCH_SECONDS = 0.25

#: the store's trouble, not the input's: input pauses until it takes writes again
STORE_ERRORS = (StoreError, sqlite3.Error)


def head_of(t: Tailed) -> str | None:
    """The fingerprint of the followed file's first bytes, taken once per inode (and again while
    the file is still shorter than the fingerprint's span): of the open file when it is the
    inode whose position is saved (no open and close by name; and the name may already be
    another file's), else of the file at the path."""
    from engine.sources.files import HEAD_BYTES, fd_file_head, file_head

    st = state_of(t)
    cached = st.head
    if cached is not None and cached[0] == t.inode and cached[1].startswith(f"{HEAD_BYTES}:"):
        return cached[1]  # a full-length fingerprint of this inode never changes
    fh = t.fh
    head = fd_file_head(fh.fd, HEAD_BYTES) if fh is not None and fh.ino == t.inode else file_head(t.path)
    if head is not None:
        st.head = (t.inode, head)
    return head


class Batch:
    """The transaction in progress, the counters it holds until commit, and the totals since start."""

    def __init__(
        self,
        store: Store,
        follower: Follower,
        metrics: Metrics,
        limiter: LogLimiter,
        on_commit: Callable[[list[ClosedIncident]], None],
        clock: Clock = SYSTEM,
    ):
        self.store = store
        self.follower = follower
        self.metrics = metrics
        self.limiter = limiter
        #: called with the incidents closed in each committed transaction (a follower swaps in its own)
        self.on_commit = on_commit
        self.clock = clock
        self._tx: AbstractContextManager[Any] | None = None  # Store.transaction(), entered
        self._started = 0.0
        self.hits = 0
        self._lines = 0
        self._facts = 0
        self._latency: list[float] = []
        self._spool: dict | str | None = None  # the spool's positions (or their JSON already)
        self._garbage = 0
        self._closed: list[ClosedIncident] = []
        #: files whose position the ingest moved since the last commit (with the follower's own
        #: ``touched``, the only ones commit looks at: not every followed file)
        self._touched: dict[str, Tailed] = {}
        #: lines and facts committed since start (the gauges' rates)
        self.lines_total = 0
        self.facts_total = 0

    # -- what a transaction holds ----------------------------------------------------------------
    def touch(self, t: Tailed) -> None:
        """``t``'s position was moved (what its lines produced is in this transaction): it is
        saved with them at the next commit."""
        self._touched[t.path] = t

    def count_hit(self) -> None:
        self.hits += 1

    def count_fact(self) -> None:
        self._facts += 1

    def count_lines(self, n: int) -> None:
        self._lines += n

    def opened(self, written_at: float, n: int) -> None:
        """``n`` incidents opened by bytes written at ``written_at`` (the detection latency metric)."""
        self._latency += [written_at] * n

    @property
    def opened_incidents(self) -> bool:
        """A new incident is in this transaction: it should be committed at once."""
        return bool(self._latency)

    def spool_read(self, offsets: dict | str, garbage: int) -> None:
        """The spool's new positions (saved with this transaction) and the garbage lines it skipped."""
        self._spool = offsets
        self._garbage += garbage

    def closed(self, incident: ClosedIncident) -> None:
        """The engine's on_close: announced once this transaction is committed."""
        self._closed.append(incident)

    def quarantine(self, kind: str, origin: str, text: str, exc: BaseException) -> None:
        """One input whose handling raised: kept in the store with its error (``recover incidents
        --errors``), counted, logged (rate-limited); the batch it came in goes on without it."""
        error = f"{type(exc).__name__}: {exc}"
        self.metrics.quarantined.labels(kind=kind).inc()
        if self.limiter.ok("quarantine"):
            logger.error("%s: input set aside (quarantined), the rest goes on: %s", origin, error)
        logger.debug("quarantined %s", origin, exc_info=exc)
        self.store.quarantine(origin, text, error)

    # -- the transaction ---------------------------------------------------------------------------
    def begin(self) -> None:
        if self._tx is None:
            tx = self.store.transaction()
            tx.__enter__()
            self._tx = tx
            self._started = self.clock.monotonic()
            self.hits = 0

    def full(self) -> bool:
        return self._tx is not None and (
            self.hits >= BATCH_HITS or self.clock.monotonic() - self._started >= BATCH_SECONDS
        )

    def commit(self) -> None:
        """Commit facts, incidents and the read offsets of the files they came from, together."""
        if self._tx is None:
            return
        tx = self._tx
        # every followed file whose position moved since its last commit (read, rotated, handed a
        # rotated file's position, truncated): saved with the facts those bytes produced. Only
        # the files read, opened or converted since are looked at (10,000 followed logs: 14 ms
        # a commit to look at them all); they are looked at again until a commit succeeds
        touched = self.follower.touched
        if touched:
            self._touched.update(touched)
            touched.clear()
        moved = [t for t in self._touched.values() if state_of(t).committed != (t.inode, t.offset, t.line_no)]
        try:
            self.store.save_offsets([(t.path, t.inode, t.offset, t.line_no, head_of(t)) for t in moved])
            if self._spool is not None:
                spool = self._spool
                self.store.set_meta("spool_offsets", spool if isinstance(spool, str) else json.dumps(spool))
        except BaseException as exc:
            self.abort(exc)
            raise
        self._tx = None
        try:
            tx.__exit__(None, None, None)
        except BaseException:
            self._discard()
            raise
        now = self.clock.wall()
        for t in moved:
            state_of(t).committed = (t.inode, t.offset, t.line_no)
        self._touched = {}
        if self._lines:
            self.metrics.lines.inc(self._lines)
        if self._facts:
            self.metrics.facts.inc(self._facts)
        self.lines_total += self._lines
        self.facts_total += self._facts
        for start in self._latency:
            self.metrics.latency.observe(max(0.0, now - start))
        if self._garbage:
            self.metrics.source_errors.labels(kind="spool", reason="garbage").inc(self._garbage)
        self._discard()
        closed, self._closed = self._closed, []
        self.on_commit(closed)

    def abort(self, exc: BaseException | None = None) -> None:
        """Roll back the transaction in progress (if any) and forget what it held."""
        tx, self._tx = self._tx, None
        self._discard()
        self._closed.clear()
        if tx is not None:
            try:
                tx.__exit__(type(exc) if exc else RuntimeError, exc, None)
            except Exception as e:  # e.g. the rollback itself failed: SQLite already rolled back
                logger.debug("rollback: %s", e)

    def back_to(self, committed: Mapping[str, tuple[int | None, int, int]]) -> None:
        """Every followed file back at the position the store holds for it (``Store.offsets()``;
        from its start when it holds none), to be read again from there: memory was ahead of a
        rolled back transaction."""
        for t in list(self.follower.files.values()):
            inode, offset, line_no = committed.get(t.path, (t.inode, 0, 0))
            t.inode, t.offset, t.line_no = inode, offset, line_no
            state_of(t).committed = (inode, offset, line_no)
            self.follower.rewind(t)

    def _discard(self) -> None:
        self._lines = self._facts = self._garbage = 0
        self._latency = []
        self._spool = None
