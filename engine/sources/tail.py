"""The one rotation-safe tail reader: every growing file Recover reads (the followed job logs,
the agent spool, the agent's kernel-log file) is opened, identified, read and followed across
rotation and truncation here.

* ``TailFile``: one regular file opened safely (no link, FIFO or device: never blocks), with its
  inode, device and the read position; bounded reads at that position; ``identify()`` says
  whether it is the file remembered as (inode, device, offset, head bytes); ``change()`` says
  what its path names now (the same file, a shorter one, another one, none).
* ``Lines``: complete lines out of pieces of a file read in any size, an over-long line cut to
  its head once; the unfinished last line waits, or is ``flush()``-ed when the file will not
  grow any more (it was rotated away).
* ``LineTail``: the complete lines of one path, across rotation by rename, copytruncate and
  restarts from a saved position; a rotated file is read to its end before the new one.
* ``open_failure()``: why an open failed, in the words the callers count (gone, not a regular
  file, out of descriptors, unreadable).

Usage::

    f = TailFile.open(path, pos)            # OSError: missing, a link, a FIFO, a device...
    data = f.read(65536)                    # at most that much, from f.pos (which advances)
    f.change()                              # SAME, TRUNCATED, REPLACED, MOVED or DELETED
    f.identify(offset, head, ino, dev)      # SAME, TRUNCATED or OTHER (identify(path, ...) too)

    tail = LineTail("/var/log/kern.log", position=saved)
    for ino, gen, offset, line in tail.read():
        ...
    saved = tail.position()                 # after the lines are stored
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Any

from engine.sources.files import NOT_REGULAR, fd_file_head, fd_head, open_regular

logger = logging.getLogger(__name__)

__all__ = [
    "TailFile",
    "Lines",
    "LineTail",
    "open_failure",
    "identify",
    "SAME",
    "TRUNCATED",
    "REPLACED",
    "MOVED",
    "DELETED",
    "OTHER",
    "GONE",
    "NOT_REGULAR_FILE",
    "NO_DESCRIPTORS",
    "UNREADABLE",
]

#: what a path shows compared with the file opened there (``TailFile.change``)
SAME = "same"  # the same file, at least as long as what was read
TRUNCATED = "truncated"  # the same file, now shorter than what was read (copytruncate, > file)
REPLACED = "replaced"  # the path names another file (rotation by rename and re-create)
MOVED = "moved"  # the path names nothing, the open file lives on under another name
DELETED = "deleted"  # the path names nothing and the open file is unlinked
#: ``TailFile.identify``: not the remembered file (another inode, or the same number re-used)
OTHER = "other"

#: why an open failed (``open_failure``)
GONE = "gone"
NOT_REGULAR_FILE = "not_regular"
NO_DESCRIPTORS = "no_descriptors"
UNREADABLE = "unreadable"


def open_failure(exc: OSError) -> str:
    """The reason an open of a followed file failed: GONE (no such file: it may come back),
    NOT_REGULAR_FILE (a link, FIFO or device: never read), NO_DESCRIPTORS (EMFILE/ENFILE: close
    something and try again) or UNREADABLE (permissions, I/O: try again later)."""
    if isinstance(exc, FileNotFoundError):
        return GONE
    if exc.errno == errno.ELOOP or exc.strerror == NOT_REGULAR:
        return NOT_REGULAR_FILE
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return NO_DESCRIPTORS
    return UNREADABLE


def identify(
    path: str, offset: int, head: str | None = None, ino: int | None = None, dev: int | None = None
) -> str | None:
    """``TailFile.identify`` of the file at ``path`` now; None when it cannot be opened."""
    try:
        f = TailFile.open(path)
    except OSError:
        return None
    try:
        return f.identify(offset, head, ino, dev)
    finally:
        f.close()


class TailFile:
    """One regular file open for reading at ``pos`` (``pread``: the descriptor's own offset is
    never used, so a position is only what this object says)."""

    __slots__ = ("path", "fd", "ino", "dev", "pos", "last_stat")

    def __init__(self, path: str, fd: int, st: os.stat_result, pos: int = 0) -> None:
        self.path, self.fd, self.ino, self.dev, self.pos = path, fd, st.st_ino, st.st_dev, pos
        self.last_stat: os.stat_result | None = None  # what change() saw at the path, last time

    @classmethod
    def open(cls, path: str, pos: int = 0) -> "TailFile":
        """Open ``path`` if it is a regular file reached without a link (O_NOFOLLOW, O_NONBLOCK,
        then fstat); raises OSError otherwise (see ``open_failure``)."""
        fd, st = open_regular(path)
        return cls(path, fd, st, pos)

    def fileno(self) -> int:
        return self.fd

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def linked(self) -> bool:
        """Does the open file still have a name (False: deleted while open)?"""
        try:
            return os.fstat(self.fd).st_nlink > 0
        except OSError:
            return False

    def read(self, n: int) -> bytes:
        """At most ``n`` bytes from ``pos`` (b"" at the end); ``pos`` moves past them."""
        data = os.pread(self.fd, n, self.pos)
        self.pos += len(data)
        return data

    def count_lines(self, start: int = 0, end: int | None = None) -> tuple[int, int]:
        """Newlines between ``start`` and ``end`` (the end of the file: None), and the offset just
        past the last of them (``start`` if none): where the last complete line ends. Raises OSError."""
        count, last = 0, start
        self.pos = start
        while end is None or self.pos < end:
            at = self.pos
            data = self.read(1 << 20 if end is None else min(1 << 20, end - at))
            if not data:
                break
            n = data.count(b"\n")
            if n:
                count += n
                last = at + data.rfind(b"\n") + 1
        return count, last

    def head(self, offset: int) -> str:
        """The fingerprint of the bytes before ``offset`` (at most HEAD_BYTES), to remember
        with the offset (see ``identify``)."""
        return fd_head(self.fd, offset)

    def identify(self, offset: int, head: str | None = None, ino: int | None = None, dev: int | None = None) -> str:
        """Is this the file that was read to ``offset`` when it had inode ``ino`` on ``dev`` and
        began with ``head`` (``TailFile.head``, or ``files.file_head``'s "N:hash")? Inode numbers
        are re-used, so the head decides. SAME, TRUNCATED (that file, now shorter than the
        offset: read it again from 0) or OTHER (another file: start it afresh). None for a part
        not remembered."""
        if (ino is not None and ino != self.ino) or (dev is not None and dev and dev != self.dev):
            return OTHER
        try:
            if self.size() < offset:
                return TRUNCATED
        except OSError:
            return OTHER
        if head is None:
            return SAME
        length, sep, _ = head.partition(":")
        if sep:  # "N:hash": the first N bytes, all of them still there
            try:
                n = int(length)
            except ValueError:
                return OTHER
            return SAME if fd_file_head(self.fd, n) == head else OTHER
        return SAME if self.head(offset) == head else OTHER

    def change(self) -> str | None:
        """What the path names now compared with this open file: SAME, TRUNCATED (shorter than
        ``pos``), REPLACED (another file), MOVED (nothing; this file has another name) or DELETED
        (nothing; this file is unlinked). None when the path cannot be looked at now."""
        self.last_stat = None
        try:
            st = os.lstat(self.path)  # a link put in its place is another file (and never read)
        except FileNotFoundError:
            return MOVED if self.linked() else DELETED
        except OSError:
            return None
        self.last_stat = st
        if st.st_ino != self.ino or st.st_dev != self.dev:
            return REPLACED
        return TRUNCATED if st.st_size < self.pos else SAME

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1


#: one complete line: (offset of its first byte, the line without its newline, cut to max_line?)
Line = tuple[int, bytes, bool]


class Lines:
    """Complete lines out of a file read in pieces of any size. ``start`` is the offset of the
    first byte of the unfinished line (where a reader resumes without losing or repeating a
    line); a line longer than ``max_line`` is returned once, cut to its head, and the rest of it
    up to its newline is dropped."""

    __slots__ = ("max_line", "pos", "start", "_buf", "_skipping")

    def __init__(self, max_line: int, pos: int = 0) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self.reset(pos)

    def reset(self, pos: int = 0) -> None:
        self.pos = self.start = pos
        self._buf.clear()
        self._skipping = False

    @property
    def partial(self) -> bool:
        """Is a line begun and not finished?"""
        return bool(self._buf) or self._skipping

    def feed(self, data: bytes) -> list[Line]:
        """The lines that ``data`` (the bytes at ``pos``) completes."""
        out: list[Line] = []
        cap = self.max_line
        data_start = self.pos
        self.pos += len(data)
        i = 0
        while True:
            nl = data.find(b"\n", i)
            if nl < 0:
                break
            if not self._skipping:
                line = data[i : min(nl, i + cap + 1)]
                if self._buf:
                    line = bytes(self._buf) + line
                cut = len(line) > cap
                out.append((self.start, line[:cap] if cut else line, cut))
            self._skipping = False
            self._buf.clear()
            self.start = data_start + nl + 1
            i = nl + 1
        if not self._skipping:
            self._buf += data[i : i + cap + 1]
            if len(self._buf) > cap:  # its head now, the rest is dropped up to its newline
                out.append((self.start, bytes(self._buf[:cap]), True))
                self._buf.clear()
                self._skipping = True
        return out

    def flush(self) -> Line | None:
        """The file will not grow any more: its unfinished last line is a line."""
        got = (self.start, bytes(self._buf), False) if self._buf and not self._skipping else None
        self._buf.clear()
        self._skipping = False
        self.start = self.pos
        return got


class _Reading:
    """An open file and the lines read from it."""

    __slots__ = ("file", "lines")

    def __init__(self, file: TailFile, lines: Lines) -> None:
        self.file, self.lines = file, lines

    def seek(self, offset: int) -> None:
        self.file.pos = offset
        self.lines.reset(offset)


def int_or_zero(value: Any) -> int:
    """``int(value)``, 0 for what is not a number (positions read back from JSON)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


class LineTail:
    """Complete lines of one growing file, across rotation (rename) and truncation (copytruncate).

    ``position()`` names the inode, device and the offset of the first byte not yet returned as
    part of a complete line (and the head bytes before it); a partial last line is read again
    after a restart. A rotated file is read to its end (its last line even without a newline)
    before the new file is started, also when the rotation happened while nobody was reading
    (the old file is found by its inode among the names that begin with the path's). ``gen``
    counts truncations, so that offsets read again give new line identities. A first start with
    no saved position begins at the end of the file unless ``replay``.
    """

    def __init__(
        self,
        path: str,
        position: dict[str, Any] | None = None,
        replay: bool = False,
        max_line: int = 65536,
        chunk: int = 1 << 20,
    ) -> None:
        self.path = os.path.abspath(path)
        self.replay = replay
        self.max_line = max_line
        self.chunk = chunk
        self.gen = 0  # bumped on truncation, so re-used offsets give new fact ids
        self.cut_lines = 0
        self.cur: _Reading | None = None
        self.drain: _Reading | None = None
        self._saved = position if isinstance(position, dict) and int_or_zero(position.get("ino")) else None
        self._started = False

    def position(self) -> dict[str, Any]:
        c = self.drain or self.cur
        if c is not None:
            return {
                "path": self.path,
                "ino": c.file.ino,
                "dev": c.file.dev,
                "offset": c.lines.start,
                "gen": self.gen,
                "head": c.file.head(c.lines.start),
            }
        if self._saved is not None:
            return dict(self._saved)
        return {"path": self.path, "ino": 0, "dev": 0, "offset": 0, "gen": self.gen}

    def close(self) -> None:
        for c in (self.cur, self.drain):
            if c is not None:
                c.file.close()
        self.cur = self.drain = None

    def _open(self, path: str) -> _Reading | None:
        try:
            return _Reading(TailFile.open(path), Lines(self.max_line))
        except OSError as exc:
            if open_failure(exc) != GONE:
                logger.debug("%s: cannot open: %s", path, exc)
            return None

    @staticmethod
    def _same_file(c: _Reading, saved: dict[str, Any]) -> bool:
        """The saved inode and the bytes before the saved offset match (shorter: truncated in place)."""
        head = saved.get("head")
        offset = max(0, int_or_zero(saved.get("offset")))
        found = c.file.identify(
            offset,
            head if isinstance(head, str) else None,
            int_or_zero(saved.get("ino")),
            int_or_zero(saved.get("dev")),
        )
        return found != OTHER

    def _find_rotated(self, ino: int, dev: int) -> str | None:
        directory, base = os.path.split(self.path)
        try:
            names = os.listdir(directory or ".")
        except OSError:
            return None
        for name in sorted(names):
            if name == base or not name.startswith(base):
                continue
            candidate = os.path.join(directory, name)
            try:
                st = os.lstat(candidate)
            except OSError:
                continue
            if st.st_ino == ino and st.st_dev == dev:
                return candidate
        return None

    def _start(self) -> None:
        opened = self._open(self.path)
        saved = self._saved
        if saved is None:
            if opened is None:
                self._started = True  # it does not exist yet: all it will hold is new
                return
            if not (self._started or self.replay):
                try:  # first start: only what is written from now on
                    opened.seek(opened.file.size())
                except OSError:
                    pass
            self.cur, self._started = opened, True
            return
        ino, dev, offset = (
            int_or_zero(saved.get("ino")),
            int_or_zero(saved.get("dev")),
            max(0, int_or_zero(saved.get("offset"))),
        )
        self.gen = int_or_zero(saved.get("gen"))
        if opened is not None and self._same_file(opened, saved):
            try:
                size = opened.file.size()
            except OSError:
                size = offset
            if offset > size:
                logger.warning("%s: shorter than the saved offset (truncated while away); reading from 0", self.path)
                offset, self.gen = 0, self.gen + 1
            opened.seek(offset)
            self.cur = opened
        else:
            old = self._find_rotated(ino, dev)
            old_cur = self._open(old) if old else None
            if old_cur is not None and not self._same_file(old_cur, saved):
                old_cur.file.close()
                old_cur = None
            if old_cur is not None:
                old_cur.seek(offset)
                self.drain = old_cur
            elif opened is None:
                return  # neither the file nor its rotated copy is there yet: try again later
            else:
                logger.warning(
                    "%s: rotated away while nobody read it; unread lines of the old file are lost", self.path
                )
            self.cur = opened
        self._saved, self._started = None, True

    def read(self) -> list[tuple[int, int, int, bytes]]:
        """New complete lines as ``(ino, gen, offset, line_bytes)``, at most ``chunk`` bytes' worth."""
        out: list[tuple[int, int, int, bytes]] = []
        budget = self.chunk
        if not self._started:
            self._start()
            if not self._started:
                return out
        if self.drain is not None:
            used, eof = self._read(self.drain, out, budget)
            budget -= used
            if not eof:
                return out
            self._finish(self.drain, out)
            self.drain = None
        if self.cur is None:
            self.cur = self._open(self.path)
            if self.cur is None:
                return out
            self._saved = None
        cur = self.cur
        change = cur.file.change()
        rotated = change in (REPLACED, MOVED, DELETED)
        if change == TRUNCATED:
            logger.info("%s: truncated; reading from the start", self.path)
            self.gen += 1
            cur.seek(0)
        used, eof = self._read(cur, out, budget)
        if rotated and eof:
            # the old inode is complete: finish it, then follow the new file from its start
            self._finish(cur, out)
            self.cur = self._open(self.path)
            if self.cur is not None:
                self._saved = None
                self._read(self.cur, out, max(0, budget - used))
        return out

    def _finish(self, c: _Reading, out: list) -> None:
        """A rotated file read to its end: its last line counts, and its end is the position
        until the next file is open."""
        last = c.lines.flush()
        if last is not None:
            out.append((c.file.ino, self.gen, last[0], last[1]))
        self._saved = {"path": self.path, "ino": c.file.ino, "dev": c.file.dev, "offset": c.file.pos, "gen": self.gen}
        c.file.close()

    def _read(self, c: _Reading, out: list, budget: int) -> tuple[int, bool]:
        """Lines from ``c`` until its end or ``budget`` bytes; (bytes used, reached the end)."""
        used = 0
        while used < budget:
            try:
                data = c.file.read(min(65536, budget - used))
            except OSError as exc:
                logger.debug("%s: read failed: %s", c.file.path, exc)
                return used, True
            if not data:
                return used, True
            used += len(data)
            for offset, line, cut in c.lines.feed(data):
                self.cut_lines += cut
                out.append((c.file.ino, self.gen, offset, line))
        return used, False
