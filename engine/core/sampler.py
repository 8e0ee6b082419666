"""Progress sampling: a bounded rate of progress facts per file and matcher."""

from __future__ import annotations

#: progress lines of one matcher in one file: after a burst of PROGRESS_BURST, one per
#: PROGRESS_EVERY_S of the facts' clock, and never fewer than every PROGRESS_NTH-th line
PROGRESS_BURST = 32
PROGRESS_EVERY_S = 5.0
PROGRESS_NTH = 64


class ProgressSampler:
    """A bounded rate of progress points per file and matcher (a token bucket on the facts'
    clock), so that a log printing an iteration line every few milliseconds does not cost a
    fact per line. Always kept: the first line, a line that names a checkpoint (the retry
    policy's no-progress guard compares them across attempts), every line after the file's context changed
    (job, attempt, whether the attempt printed evidence yet, nodes, the cluster's assignment),
    every PROGRESS_NTH-th line, and the last line of each matcher in a scanned chunk (so the
    last progress a job printed is never lost: hang detection and a log's tail see it). A
    slowdown that stays is still a run of slow points among the kept ones; the hang bound
    (``factor`` x the longest gap, never below ``min_bound``) grows by at most PROGRESS_EVERY_S."""

    __slots__ = ("tokens", "at", "since", "sig")

    def __init__(self) -> None:
        self.tokens = float(PROGRESS_BURST)
        self.at: float | None = None
        self.since = 0
        self.sig: tuple | None = None

    def skip(self, at: float) -> bool:
        if self.at is not None and at > self.at:
            self.tokens = min(float(PROGRESS_BURST), self.tokens + (at - self.at) / PROGRESS_EVERY_S)
        if self.at is None or at > self.at:
            self.at = at
        if self.tokens >= 1.0 or self.since + 1 >= PROGRESS_NTH:
            return False
        self.since += 1
        return True

    def kept(self, sig: tuple) -> None:
        self.tokens = max(0.0, self.tokens - 1.0)
        self.since = 0
        self.sig = sig
