"""One scheduler snapshot per actuator step (issue 24, item 4).

The actuator verifies every unfinished action on every step, and before a requeue it looks at
each job sharing the node: each of those reads was a full ``squeue --json --states=all`` (Slurm
22.05's ``squeue --json`` ignores ``--jobs``), so slurmctld listed the whole cluster once per
action and per shared-node job. Inside ``SnapshotRunner.snapshot()`` the two whole-cluster
queries (``squeue --json --states=all``, ``sinfo --json``) are run once, and a repeat is
answered with the first answer, until a command that may change the cluster runs (anything that
is not a query: ``scontrol update``, ``scancel``, a site's command). Then the next read asks
again, so an action's effect is never verified against what the cluster said before it ran.

Only the thread that opened the snapshot sees it: the scheduler poller asks on a thread of its
own and always gets a fresh answer. A failed answer (non-zero exit, time-out, cut output) is not
kept: the next read asks again.

    with adapter.snapshot():      # SlurmAdapter.snapshot
        ...                       # jobs(), job(), job_detail(), nodes(): one squeue, one sinfo
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

from ..base import CommandResult, Runner

__all__ = ["SNAPSHOT_QUERIES", "SnapshotRunner", "is_query"]

#: the whole-cluster queries a snapshot answers once
SNAPSHOT_QUERIES = frozenset({("squeue", "--json", "--states=all"), ("sinfo", "--json")})


def is_query(argv: Sequence[str]) -> bool:
    """Whether a command only reads (squeue, sinfo, scontrol show): it leaves a snapshot valid."""
    if not argv:
        return False
    return argv[0] in ("squeue", "sinfo") or (argv[0] == "scontrol" and len(argv) > 1 and argv[1] == "show")


class SnapshotRunner:
    """A runner (``base.Runner``) that, inside ``snapshot()`` on the calling thread, runs each of
    ``SNAPSHOT_QUERIES`` at most once between commands that may change the cluster."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self._local = threading.local()
        self.runs = 0  # commands actually run (tests count them)

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        memo: dict[tuple[str, ...], CommandResult] | None = getattr(self._local, "memo", None)
        if memo is not None:
            key = tuple(argv)
            if key in memo:
                return memo[key]
            if not is_query(argv):
                memo.clear()  # it may change what the scheduler says: read again after it
        self.runs += 1
        result = self.runner(argv, timeout)
        if memo is not None and tuple(argv) in SNAPSHOT_QUERIES:
            if result.rc == 0 and not result.timed_out and not result.truncated:
                memo[tuple(argv)] = result
        return result

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads on this thread share one answer per whole-cluster query until the block ends or
        a command that is not a query runs. Nested blocks are the outer one."""
        if getattr(self._local, "memo", None) is not None:
            yield
            return
        self._local.memo = {}
        try:
            yield
        finally:
            self._local.memo = None
