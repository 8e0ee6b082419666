"""What the follower keeps per followed file (``Tailed``): where it was read to, its open file, its
health, and the flags the follower and its caller hand each other (see ``engine.sources.follow``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.sources.tail import TailFile

__all__ = ["Tailed"]


@dataclass
class Tailed:
    path: str
    fh: TailFile | None = None  # the open file (its ``pos`` is the next byte to read)
    inode: int | None = None
    offset: int = 0  # bytes consumed from the current inode (the caller sets it)
    line_no: int = 0
    #: the caller's own per-file state (the controller's ``live.filestate.FileState``): carried,
    #: never read here
    state: Any = None
    #: the caller's scanner must start again at (offset, line_no): set when the file is reopened or
    #: rewound (and by the caller after a finished old inode); the caller clears it
    reset: bool = False
    #: set while the empty read that ends an old inode (rotated, deleted, truncated) is handed on
    eof_old: bool = False
    #: the caller's answer to that read: (offset, line_no) where the old file ends, so that a file
    #: that lives on renamed is read on from there
    eof_position: tuple[int, int] | None = None
    gone: bool = False  # the path does not exist (deleted, not yet re-created)
    errors: int = 0  # failed opens/reads in a row (0: healthy)
    read_pos: int = 0  # file offset of the first byte of the data last yielded
    read_at: float = 0.0  # wall time of the last read that returned data
    checked_at: float = 0.0  # monotonic time of the last check for rotation/truncation
    gone_since: float | None = None
    last_error: str | None = None
    #: the caller has not consumed all it was given yet (it converts a burst across passes):
    #: nothing more is read from the file until the caller clears this (or rewinds the file)
    held: bool = False
    #: the caller does not want this file read at all until it says whose it is (a file a glob
    #: found that the scheduler names as no job's log yet); a rewind does not clear it
    waiting: bool = False
    #: (inode, size, mtime) of the path when a read last found nothing more: a rescan reads the
    #: file again only when its stat differs (None: not known to be read to its end)
    seen: tuple[int, int, int] | None = None
    #: where the open file was read to when the open-file budget closed it: reopened there (the
    #: caller's scanner goes on as it was) while it is the same file, not shorter
    resume_pos: int | None = None

    @property
    def healthy(self) -> bool:
        return self.errors == 0 and not self.gone
