"""Progress sampling: a bounded rate of progress facts per file and matcher.

Two stages. In the scanner (``engine.core.blockscan``), the lines of a dense progress matcher are
reported at most once per block of at most ``progress_block()`` bytes (and after each boundary
hit, and the last of each chunk): the rest never become a ``Hit``. Then here, the lines reported are thinned
again on the facts' clock (``ProgressSampler``). Live, of the lines kept, at most one per file and
matcher per ``progress_fact_every()`` seconds becomes a fact; the others only touch the progress
tracker (``StreamFacts._touch``, docs/scaling.md)."""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

#: bytes of log per progress point the scanner keeps in a dense log (``RECOVER_PROGRESS_BLOCK``;
#: 0 keeps every line); the time this is depends on how fast the job prints, see docs/scaling.md
PROGRESS_BLOCK = 64 * 1024
#: the scanner's block is measured over progress points at least this many seconds of log apart,
#: and is 0 (every line) while PROGRESS_EVERY_S of log is fewer bytes than BLOCK_MIN
PACE_WINDOW_S = 30.0
BLOCK_MIN = 4096
_warned: set[tuple[str, str]] = set()


#: live, a progress line that need not be a fact only touches the progress tracker (its time,
#: step and speed; ``StreamFacts.into``): at most one progress fact per file and matcher per this
#: many seconds (``RECOVER_PROGRESS_FACT_EVERY``; 0: every line kept is a fact, as in replay)
PROGRESS_FACT_EVERY_S = 60.0


def _setting(name: str, default: float, unit: str, whole: bool) -> float:
    """A setting from the environment: a number, 0 or more (a whole one if ``whole``), else
    ``default`` (a bad value is logged once and not used)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(int(raw.strip()) if whole else float(raw.strip()))
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        if (name, raw) not in _warned:
            _warned.add((name, raw))
            logger.error("%s=%r is not a %s (0 or more); using %g", name, raw[:40], unit, default)
        return default
    return value


def progress_block() -> int:
    """The scanner's progress block in bytes: ``RECOVER_PROGRESS_BLOCK`` if it is a whole number
    of bytes (0 or more; 0: every progress line), else ``PROGRESS_BLOCK``."""
    return int(_setting("RECOVER_PROGRESS_BLOCK", PROGRESS_BLOCK, "whole number of bytes", True))


def progress_fact_every() -> float:
    """Seconds between progress facts of one file and matcher live (``RECOVER_PROGRESS_FACT_EVERY``
    if it is a number of seconds, 0 or more; else ``PROGRESS_FACT_EVERY_S``)."""
    return _setting("RECOVER_PROGRESS_FACT_EVERY", PROGRESS_FACT_EVERY_S, "number of seconds", False)


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
