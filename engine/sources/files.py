"""The file primitives every reader of a growing file shares (the followed job logs, the spool, the
kernel log): open only regular files, never through a link, and fingerprint a file's first bytes
so a file re-created under the same name (even with the same inode number) is told apart.

    fd, st = open_regular(path)          # OSError for a link, a FIFO, a device, a missing file
    fd_head(fd, offset)                  # hash of the bytes before offset (at most HEAD_BYTES)
    file_head(path)                      # "N:hash" of the first HEAD_BYTES bytes, None if unreadable
    fd_file_head(fd, n)                  # the same of an open file's first n bytes

Reading such a file across rotation and truncation is ``engine.sources.tail``'s.
"""

from __future__ import annotations

import hashlib
import os
import stat

__all__ = ["OPEN_FLAGS", "HEAD_BYTES", "NOT_REGULAR", "open_regular", "fd_head", "file_head", "fd_file_head"]

#: O_NOFOLLOW: a link to /dev/zero or out of the folder is refused (ELOOP); O_NONBLOCK: opening a
#: FIFO never blocks the opener
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
HEAD_BYTES = 256
NOT_REGULAR = "not a regular file"


def open_regular(path: str, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """Open a file to read only if it is a regular file reached without a symbolic link, checked
    with fstat on what was opened; ``dir_fd``: ``path`` is a name inside that open folder. Raises
    OSError (errno ELOOP for a link; 0 and NOT_REGULAR for a FIFO or a device, which would block
    or never end)."""
    fd = os.open(path, OPEN_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, NOT_REGULAR)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _digest(fd: int, n: int) -> tuple[int, str] | None:
    try:
        data = os.pread(fd, n, 0)
    except OSError:
        return None
    return len(data), hashlib.blake2b(data, digest_size=8).hexdigest()


def fd_head(fd: int, offset: int) -> str:
    """A short hash of the first ``min(offset, HEAD_BYTES)`` bytes of an append-only file: those
    bytes were already read, so they cannot change while the file is the same ("" for none)."""
    n = max(0, min(int(offset), HEAD_BYTES))
    got = _digest(fd, n) if n else None
    return got[1] if got else ""


def fd_file_head(fd: int, length: int = HEAD_BYTES) -> str | None:
    """A fingerprint of an open file's first ``length`` bytes (fewer if it is shorter): "N:hash"."""
    got = _digest(fd, length)
    return f"{got[0]}:{got[1]}" if got else None


def file_head(path: str, length: int = HEAD_BYTES) -> str | None:
    """``fd_file_head`` of the regular file at ``path``; None if it cannot be read."""
    try:
        fd, _ = open_regular(path)
    except OSError:
        return None
    try:
        return fd_file_head(fd, length)
    finally:
        os.close(fd)
