"""A follower kept warm: it reads and evaluates what the leader does, and writes none of it.

A controller that does not lead runs ``Standby.step`` instead of the leader's pass: the followed
files, the agents' spool and the scheduler's answers go through the same parts as the leader's
(``FileIngest``, ``SpoolIngest``, ``SchedulerPoll``, ``Batch``), into an engine of its own whose
store is a scratch SQLite database in memory. Nothing reaches the shared store: no incident,
no journal row, no read position, no job state (the leader lease and the heartbeat are
``Leadership``'s, as before). What a cold start would pay for at takeover is already paid: the
rulebook compiled and its Rete ruleset registered, the job logs the scheduler names followed and
open with their scanners, the cluster context (which job runs where, partitions, comments) and the
poll worker's thread.

At takeover (``leave``) the scratch is thrown away with everything the follower concluded, and the
leader's engine starts from what the old leader committed, as after a restart: its open
incidents, its journal, its job states, and its read positions. Each followed file is set back to
the position the store holds for it, so the lines after it are read once more, by the leader, from
files already open and in the page cache: what the old leader committed is never read twice into
the store, and nothing after its positions is lost, whatever the follower had read. The follower's
own reading decides nothing. What is kept is what the sources and the scheduler said, not what the
engine concluded: the cluster context, and each file's context (its job and nodes, and what its
own lines taught about it: the hosts that printed, the date of undated lines), as after a reload.

    standby = Standby(controller)
    standby.step()            # a follower's pass (the first one enters the standby)
    standby.leave()           # this controller took the lease: its parts write the shared store again
    standby.behind_bytes      # how far its reading trails the leader's committed positions

The scratch database is replaced every ``RECYCLE_S`` (what the follower concluded is worth nothing
once the leader has acted on the same lines); the scheduler's and the spool's positions are kept.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from engine.live.batch import STORE_ERRORS
from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = ["LAG_EVERY_S", "RECYCLE_S", "Standby"]

#: the follower's scratch store and engine are started afresh this often (seconds)
RECYCLE_S = 600.0
#: how often the follower compares its read positions with the leader's committed ones (seconds:
#: one query of the offsets table)
LAG_EVERY_S = 5.0


class Standby:
    """The follower's side of a ``Controller`` (``ctl``): its parts pointed at a scratch store."""

    def __init__(self, ctl: Any):
        self.ctl = ctl
        self.scratch: Store | None = None
        self._since = 0.0
        self._lag_at = -math.inf
        #: bytes the leader has committed in followed files that this follower has not read yet
        #: (None until measured)
        self.behind_bytes: int | None = None
        self.passes = 0  # follower passes run
        #: incidents the follower's engine closed (and threw away): its evaluation goes on
        self.closed = 0

    @property
    def active(self) -> bool:
        return self.scratch is not None

    # -- entering and leaving ---------------------------------------------------------------------
    def enter(self) -> None:
        """Point the parts that write at a new scratch store, with a new engine on it (at a
        follower's first pass, after losing the lease, and every RECYCLE_S)."""
        ctl = self.ctl
        ctl.batch.abort()  # nothing is in flight between passes; to be sure
        scratch = Store(":memory:", clock=ctl.clock)
        scratch.context = ctl.store.context
        self._point(scratch)
        ctl.batch.on_commit = self._discard
        old, ctl.engine = ctl.engine, ctl._new_engine(ctl.compiled)
        old.session.close()
        if self.scratch is not None:
            self.scratch.close()
        self.scratch = scratch
        self._since = ctl.clock.monotonic()
        logger.debug("follower: evaluating into a scratch store (nothing is recorded)")

    def leave(self) -> None:
        """This controller took the lease: the parts write the shared store again. The caller
        then starts the leader's engine from what the store committed (``Controller._take_over``)."""
        if self.scratch is None:
            return
        ctl = self.ctl
        ctl.batch.abort()
        self._point(ctl.store)
        ctl.batch.on_commit = ctl._announce
        self.scratch.close()
        self.scratch = None

    def _point(self, store: Store) -> None:
        ctl = self.ctl
        ctl.batch.store = store
        if ctl.spool_in is not None:
            ctl.spool_in.store = store
        if ctl.sched is not None:
            ctl.sched.store = store  # its job states are saved there (restored from the shared one at takeover)

    def _discard(self, closed: list) -> None:
        """The scratch batch's commit: what the follower's engine concluded is neither
        recommended nor acted on."""
        self.ctl.engine.closed.clear()
        self.closed += len(closed)

    # -- a follower's pass ---------------------------------------------------------------------
    def step(self) -> None:
        """Read and evaluate what changed, as the leader does, into the scratch store."""
        ctl = self.ctl
        if self.scratch is None or ctl.clock.monotonic() - self._since >= RECYCLE_S:
            self.enter()
        self.passes += 1
        try:
            ctl.read_and_evaluate(dumps=False)
        except Exception as exc:  # the follower's trouble is its own: the scratch starts afresh
            ctl.batch.abort(exc)
            ctl.metrics.errors.inc()
            if ctl.limiter.ok("follower-step"):
                logger.exception("follower pass failed (its scratch store starts afresh)")
            if self.scratch is not None:
                self.scratch.close()
                self.scratch = None
        self._measure_lag()

    def _measure_lag(self) -> None:
        ctl = self.ctl
        now = ctl.clock.monotonic()
        if now - self._lag_at < LAG_EVERY_S:
            return
        self._lag_at = now
        try:
            committed = ctl.store.offsets()
        except STORE_ERRORS as exc:
            logger.debug("follower lag: %s", exc)
            return
        behind = 0
        for path, t in ctl.follower.files.items():
            inode, offset, _ = committed.get(path, (None, 0, 0))
            if offset > t.offset and (inode is None or inode == t.inode):
                behind += offset - t.offset
        self.behind_bytes = behind
        ctl.metrics.follower_behind.set(behind)
