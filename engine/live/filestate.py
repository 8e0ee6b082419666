"""What the controller keeps per followed file (``Tailed.state``): typed, instead of a dict of keys.

The follower (``sources.follow``) only carries it; ``live.ingest`` creates and reads it, and
``live.batch`` records what each file's last commit saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from engine.core.context import FileContext
    from engine.core.linefacts import StreamFacts
    from engine.core.scanner import Scanner
    from engine.sources.follow import Tailed

__all__ = ["FileState", "Pending", "state_of"]


@dataclass
class Pending:
    """What a file was given and has not all converted yet (see ingest.PASS_SECONDS)."""

    hits: list[Any]
    next: int  # the first hit not converted
    end: tuple[int, int]  # the position after all of them
    lines: int
    data: bytes
    read_pos: int  # file offset of data[0]


@dataclass
class FileState:
    #: what the scheduler said when it named the file (a job's StdOut/StdErr); a file found by a
    #: glob has none, and its job comes from its name (unscheduled) or later from the scheduler
    job: str | None = None
    attempt: int | None = None
    source: str = "job"
    ctx: FileContext | None = None  # the file's job context (set by ingest when it starts following)
    scanner: Scanner | None = None  # this file's clone of the rulebook's scanner
    index_map: Sequence[int] = ()  # scanner matcher -> rulebook matcher
    stream: StreamFacts | None = None  # the scan -> fact loop over scanner and ctx
    pending: Pending | None = None  # hits left to convert while the file is paused (Tailed.held)
    long_lines: int = 0  # the scanner's count of cut lines already reported
    #: the (inode, offset, line_no) the last commit saved for this file (batch saves it again when it moves)
    committed: tuple[int | None, int, int] | None = None
    head: tuple[int | None, str] | None = None  # (inode, fingerprint of its first bytes), cached by batch
    rulebook: Any = None  # the CompiledRulebook the scanner was made for


def state_of(t: Tailed) -> FileState:
    """The file's state, created empty for a file that the follower found by itself."""
    st = t.state
    if not isinstance(st, FileState):
        st = t.state = FileState()
    return st
