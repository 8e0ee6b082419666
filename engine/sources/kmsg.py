"""Kernel-log source of the node agent: kernel-log lines → facts, with the rulebook's matchers.

The agent turns kernel-log lines into facts exactly as replay does: the kernel matchers of the
rulebook (``rules/11-matchers-kernel.yaml`` and any site file), scanned by the same ``Scanner``
and converted by the same ``HitConverter`` (which holds the one Xid decoder), so that a line
reaches the same facts, fault classes and decisions whichever side of the spool it is read on.
There is no second parser here.

* ``KernelLineFacts``: one kernel-log line → its facts (``xid``, ``log``).
* ``KernelLogSource``: follows a kernel-log file (rotation, truncation, persisted byte offset and
  line number) or ``/dev/kmsg`` (sequence numbers, per boot) and returns facts whose ids depend
  only on where the line was read, so a line read twice yields the same ``Fact.id``. Their
  origin is ``PATH:LINE`` (a line number, as ``explain`` shows it) or ``kmsg:NODE:SEQ``.

Nothing here raises on garbage input: bytes are decoded with replacement, over-long lines are
cut, unknown shapes give no fact.
"""

from __future__ import annotations

import calendar
import errno
import functools
import hashlib
import json
import logging
import os
import re
import time
from datetime import datetime
from typing import Any, Callable

from engine.facts import Fact, FactError
from engine.core.linefacts import FileContext, HitConverter, StreamFacts, normalize_pci
from engine.sources.files import fd_head

logger = logging.getLogger(__name__)

__all__ = [
    "normalize_pci",
    "kernel_line_time",
    "KernelLineFacts",
    "KernelLogSource",
    "default_rulebook",
]

#: a line is cut to this many characters before it is matched (the Xid head is at the start)
LINE_MAX = 8192

# prefixes: /dev/kmsg "prio,seq,usec,flags[,...];", syslog "<date> <host> kernel:"
_KMSG_RE = re.compile(r"^\s*(\d{1,5}),(\d{1,20}),(\d{1,20}),([^;]{0,64});(.*)$", re.DOTALL)
_ISO_RE = re.compile(r"^\s*(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d{1,9})?)(Z|[+-]\d\d:?\d\d)?\s+\S+\s+kernel:")
_BSD_RE = re.compile(r"^\s*([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d\d):(\d\d):(\d\d)\s+\S+\s+kernel:")
_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}
_NEWLINES = re.compile("[\r\n]")


@functools.lru_cache(maxsize=1)
def default_rulebook() -> Any:
    """The shipped rulebook, compiled once (for callers that were given none)."""
    from engine.rulebook import require_rulebook

    return require_rulebook()


def kernel_line_time(line: str, now: float | None = None) -> float | None:
    """The wall time a syslog-style prefix gives (ISO 8601 or ``Nov 29 17:00:01``), else ``None``.

    A BSD syslog stamp has no year and is local time: the year is chosen so that the stamp is
    not more than a day in the future of ``now``.
    """
    try:
        m = _ISO_RE.match(line)
        if m:
            stamp, zone = m.group(1).replace(" ", "T"), m.group(2)
            if "." in stamp:
                head, frac = stamp.split(".", 1)
                stamp = f"{head}.{frac[:6]}"
            if zone:
                zone = "+00:00" if zone == "Z" else (zone if ":" in zone else f"{zone[:3]}:{zone[3:]}")
                return datetime.fromisoformat(stamp + zone).timestamp()
            return datetime.fromisoformat(stamp).timestamp()
        m = _BSD_RE.match(line)
        if m:
            month = _MONTHS.get(m.group(1))
            if month is None:
                return None
            now = time.time() if now is None else now
            year = time.localtime(now).tm_year
            for y in (year, year - 1):
                tm = (y, month, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), 0, 0, -1)
                t = time.mktime(tm)
                if t <= now + 86400:
                    return t
            return None
    except (ValueError, OverflowError, OSError):
        return None
    return None


class KernelLineFacts:
    """Kernel-log lines → facts with the rulebook's kernel matchers, the way replay makes them.

    ``KernelLineFacts(compiled, "n3").feed(line, at, origin, fact_id)`` returns the facts of one
    line. The node is the agent's: a fact that names no node (dmesg, ``/dev/kmsg``) gets it, and
    a syslog host that names another node is kept only as ``logged_node`` (a spool file speaks
    for the node it is named after).
    """

    def __init__(self, compiled: Any, node: str, path: str = "kernel") -> None:
        from engine.core.replay import scanner_for  # replay's own selection and compiled scanner, not a copy

        self.node = node
        scanner, index_map = scanner_for(compiled, "kernel")
        ctx = FileContext(path=path, source="kernel", nodes={node})
        # the scan -> fact loop replay and the controller share; floods are the controller's to collapse
        self.stream = StreamFacts(scanner, HitConverter(list(compiled.matchers)), ctx, index_map, collapse=False)

    def feed(self, line: str | bytes, at: float, origin: str, fact_id: str | None = None) -> list[Fact]:
        try:
            return self._feed(line, at, origin, fact_id)
        except (FactError, ValueError, TypeError, OverflowError):
            return []

    def _feed(self, line: str | bytes, at: float, origin: str, fact_id: str | None) -> list[Fact]:
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        if not isinstance(line, str):
            return []
        text = _NEWLINES.sub(" ", line[:LINE_MAX])
        items = [item for _, _, item in self.stream.feed(text.encode("utf-8", "replace") + b"\n")]
        out: list[Fact] = []
        for n, fact in enumerate(items):
            if not isinstance(fact, Fact):
                continue
            attrs = dict(fact.attrs)
            logged = attrs.get("node")
            if logged is not None and logged != self.node:
                attrs["logged_node"] = logged
            attrs["node"] = self.node
            fid = None if fact_id is None else (fact_id if n == 0 else f"{fact_id}.{n}")
            out.append(Fact.make(fact.kind, attrs, at, origin, id=fid))
        return out


def _line_id(*parts: Any) -> str:
    payload = json.dumps([str(p) for p in parts], separators=(",", ":"))
    return hashlib.blake2b(payload.encode("utf-8", "replace"), digest_size=10).hexdigest()


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return "unknown"


def _boot_time() -> float:
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as fh:
            for row in fh:
                if row.startswith("btime "):
                    return float(row.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return time.time() - time.monotonic()


class _Cursor:
    """Reading state of one open file: the next byte to read and the start of the unfinished line."""

    __slots__ = ("fd", "ino", "dev", "read_pos", "line_start", "buf", "skipping")

    def __init__(self, fd: int, ino: int, dev: int, offset: int) -> None:
        self.fd, self.ino, self.dev = fd, ino, dev
        self.read_pos = self.line_start = offset
        self.buf = bytearray()  # head of the unfinished line
        self.skipping = False  # inside an over-long line whose head was already returned

    def reset(self) -> None:
        self.read_pos = self.line_start = 0
        self.buf.clear()
        self.skipping = False

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def _open_cursor(path: str) -> tuple[_Cursor, int] | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    return _Cursor(fd, st.st_ino, st.st_dev, 0), st.st_size


class _FileFollower:
    """Complete lines of a growing file, across rotation (rename) and truncation (copytruncate).

    ``position()`` names the inode and the byte offset of the first byte not yet returned as
    part of a complete line; a partial last line is re-read after a restart. A rotated file is
    read to its end (its last line even without a newline) before the new file is started.
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
        self.cur: _Cursor | None = None
        self.drain: _Cursor | None = None
        self._saved = position if isinstance(position, dict) and _int(position.get("ino")) else None
        self._started = False

    def position(self) -> dict[str, Any]:
        c = self.drain or self.cur
        if c is not None:
            return {
                "path": self.path,
                "ino": c.ino,
                "dev": c.dev,
                "offset": c.line_start,
                "gen": self.gen,
                "head": fd_head(c.fd, c.line_start),
            }
        if self._saved is not None:
            return dict(self._saved)
        return {"path": self.path, "ino": 0, "dev": 0, "offset": 0, "gen": self.gen}

    def close(self) -> None:
        for c in (self.cur, self.drain):
            if c is not None:
                c.close()
        self.cur = self.drain = None

    @staticmethod
    def _same_file(c: _Cursor, saved: dict[str, Any]) -> bool:
        """The saved inode and the bytes before the saved offset match (inode numbers are re-used)."""
        if c.ino != _int(saved.get("ino")) or c.dev != _int(saved.get("dev")):
            return False
        head = saved.get("head")
        if not isinstance(head, str):
            return True
        try:
            size = os.fstat(c.fd).st_size
        except OSError:
            return False
        offset = max(0, _int(saved.get("offset")))
        return size < offset or fd_head(c.fd, offset) == head  # shorter: truncated in place

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
                st = os.stat(candidate)
            except OSError:
                continue
            if st.st_ino == ino and st.st_dev == dev:
                return candidate
        return None

    def _start(self) -> None:
        opened = _open_cursor(self.path)
        saved = self._saved
        if saved is None:
            if opened is None:
                self._started = True  # it does not exist yet: all it will hold is new
                return
            cur, size = opened
            if not (self._started or self.replay):
                cur.read_pos = cur.line_start = size  # first start: only what is written from now on
            self.cur, self._started = cur, True
            return
        ino, dev, offset = _int(saved.get("ino")), _int(saved.get("dev")), max(0, _int(saved.get("offset")))
        self.gen = _int(saved.get("gen"))
        if opened is not None and self._same_file(opened[0], saved):
            cur, size = opened
            if offset > size:
                logger.warning("%s: shorter than the saved offset (truncated while away); reading from 0", self.path)
                offset, self.gen = 0, self.gen + 1
            cur.read_pos = cur.line_start = offset
            self.cur = cur
        else:
            old = self._find_rotated(ino, dev)
            old_cur = _open_cursor(old) if old else None
            if old_cur is not None and not self._same_file(old_cur[0], saved):
                old_cur[0].close()
                old_cur = None
            if old_cur is not None:
                self.drain = old_cur[0]
                self.drain.read_pos = self.drain.line_start = offset
            elif opened is None:
                return  # neither the file nor its rotated copy is there yet: try again later
            else:
                logger.warning(
                    "%s: rotated away while the agent was down; unread lines of the old file are lost", self.path
                )
            self.cur = opened[0] if opened else None
        self._saved, self._started = None, True

    def read(self) -> list[tuple[int, int, int, bytes]]:
        """New complete lines as ``(ino, gen, offset, line_bytes)``."""
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
            self._flush(self.drain, out)
            self._saved = self._end_of(self.drain)
            self.drain.close()
            self.drain = None
        if self.cur is None:
            opened = _open_cursor(self.path)
            if opened is None:
                return out
            self.cur, self._saved = opened[0], None
        cur = self.cur
        try:
            st = os.stat(self.path)
            rotated = st.st_ino != cur.ino or st.st_dev != cur.dev
        except OSError:
            rotated = True
        if not rotated and st.st_size < cur.read_pos:
            logger.info("%s: truncated; reading from the start", self.path)
            self.gen += 1
            cur.reset()
        used, eof = self._read(cur, out, budget)
        if rotated and eof:
            # the old inode is complete: finish it, then follow the new file from its start
            self._flush(cur, out)
            self._saved = self._end_of(cur)
            cur.close()
            self.cur = None
            opened = _open_cursor(self.path)
            if opened is not None:
                self.cur, self._saved = opened[0], None
                self._read(self.cur, out, max(0, budget - used))
        return out

    def _end_of(self, c: _Cursor) -> dict[str, Any]:
        return {"path": self.path, "ino": c.ino, "dev": c.dev, "offset": c.read_pos, "gen": self.gen}

    def _read(self, c: _Cursor, out: list, budget: int) -> tuple[int, bool]:
        used = 0
        while used < budget:
            try:
                data = os.pread(c.fd, min(65536, budget - used), c.read_pos)
            except OSError as exc:
                logger.debug("%s: read failed: %s", self.path, exc)
                return used, True
            if not data:
                return used, True
            used += len(data)
            self._split(c, data, out)
        return used, False

    def _split(self, c: _Cursor, data: bytes, out: list) -> None:
        data_start = c.read_pos
        c.read_pos += len(data)
        pos = 0
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            if not c.skipping:
                line = bytes(c.buf) + data[pos : min(nl, pos + self.max_line + 1)]
                if len(line) > self.max_line:
                    self.cut_lines += 1
                    line = line[: self.max_line]
                out.append((c.ino, self.gen, c.line_start, line))
            c.skipping = False
            c.buf.clear()
            c.line_start = data_start + nl + 1
            pos = nl + 1
        if not c.skipping:
            c.buf += data[pos : pos + self.max_line + 1]
            if len(c.buf) > self.max_line:
                # an over-long line: return its head now, drop the rest up to its newline
                self.cut_lines += 1
                out.append((c.ino, self.gen, c.line_start, bytes(c.buf[: self.max_line])))
                c.buf.clear()
                c.skipping = True

    def _flush(self, c: _Cursor, out: list) -> None:
        """The file will not grow any more: its unfinished last line is a line."""
        if c.buf and not c.skipping:
            out.append((c.ino, self.gen, c.line_start, bytes(c.buf)))
        c.buf.clear()
        c.skipping = False
        c.line_start = c.read_pos


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


class _KmsgReader:
    """Records of ``/dev/kmsg`` (``prio,seq,usec,flags;message``), one per ``read``.

    On first start it seeks to the end unless ``replay``; with a saved position of the same
    boot it re-reads the ring buffer and skips sequence numbers already seen.
    """

    def __init__(self, path: str = "/dev/kmsg", position: dict[str, Any] | None = None, replay: bool = False) -> None:
        self.path = path
        self.replay = replay
        self.boot_id = _boot_id()
        self.btime = _boot_time()
        self.fd: int | None = None
        self.last_seq = -1
        self.buf = bytearray()
        saved = position if isinstance(position, dict) else None
        self._skip_to = -1
        self._from_start = replay
        if saved is not None and saved.get("boot_id") == self.boot_id:
            self._skip_to = _int(saved.get("seq"))
            self.last_seq = self._skip_to
            self._from_start = True
        elif saved is not None:
            self._from_start = True  # a new boot: everything in the buffer is new to us

    def open(self) -> None:
        """Open the device; raises ``OSError`` (e.g. permission) for the caller to report."""
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        if not self._from_start:
            try:
                os.lseek(fd, 0, os.SEEK_END)
            except OSError:
                pass
        self.fd = fd

    def position(self) -> dict[str, Any]:
        return {"path": self.path, "boot_id": self.boot_id, "seq": self.last_seq}

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def read(self, max_records: int = 10000) -> list[tuple[int, float, str]]:
        """New records as ``(seq, wall_time, message)``."""
        out: list[tuple[int, float, str]] = []
        if self.fd is None:
            return out
        reads = 0
        while reads < max_records:
            reads += 1
            try:
                data = os.read(self.fd, 16384)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    logger.info("%s: records were overwritten before they were read", self.path)
                    continue
                logger.debug("%s: read failed: %s", self.path, exc)
                break
            if not data:
                break  # a regular file (tests) at its end
            self.buf += data
            *records, rest = self.buf.split(b"\n")
            self.buf = bytearray(rest[:65536])
            for raw in records:
                self._record(raw, out)
        return out

    def _record(self, raw: bytes, out: list) -> None:
        if not raw or raw[:1] in (b" ", b"\t"):
            return  # dictionary continuation line (" SUBSYSTEM=pci")
        text = raw[:LINE_MAX].decode("utf-8", "replace")
        m = _KMSG_RE.match(text)
        if not m:
            return
        try:
            seq, usec = int(m.group(2)), int(m.group(3))
        except ValueError:
            return
        if seq <= self._skip_to:
            return
        self._skip_to = -1
        self.last_seq = seq
        out.append((seq, self.btime + usec / 1e6, m.group(5)))


class KernelLogSource:
    """Follows a kernel-log file or ``/dev/kmsg`` and turns new lines into facts.

    ``poll()`` returns the facts of the lines read since the last call and advances the read
    position in memory only; ``position()`` is that position as a JSON-serialisable dict. The
    caller stores the facts first and then persists the position (``commit()`` does it through
    ``on_commit`` and/or ``state_file``), so that a crash in between re-reads lines instead of
    losing them; a re-read line has the same ``Fact.id`` (it depends on node, inode, offset and
    the line itself, or on boot id and sequence number for ``/dev/kmsg``).

    ``KernelLogSource(node, path="/var/log/kern.log")`` or ``KernelLogSource(node, kmsg=True)``.
    """

    def __init__(
        self,
        node: str,
        path: str | None = None,
        *,
        kmsg: bool = False,
        kmsg_path: str = "/dev/kmsg",
        replay: bool = False,
        position: dict[str, Any] | None = None,
        state_file: str | None = None,
        on_commit: Callable[[dict[str, Any]], None] | None = None,
        clock: Callable[[], float] = time.time,
        rulebook: Any = None,
    ) -> None:
        if (path is None) == (not kmsg):
            raise ValueError("give exactly one of path= or kmsg=True")
        self.node = node
        self.state_file = state_file
        self.on_commit = on_commit
        self.clock = clock
        self.lines = KernelLineFacts(
            rulebook if rulebook is not None else default_rulebook(), node, f"kmsg:{node}" if kmsg else str(path)
        )
        self.lines_read = 0
        if position is None and state_file:
            position = _load_json(state_file)
        position = position if isinstance(position, dict) else None
        # (inode, generation, offset of the next line, its number - 1): line numbers for origins
        self._line_at: tuple[int, int, int, int] | None = None
        saved_line = position.get("line") if position else None
        if isinstance(saved_line, list) and len(saved_line) == 4 and all(isinstance(x, int) for x in saved_line):
            self._line_at = (saved_line[0], saved_line[1], saved_line[2], saved_line[3])
        self._file: _FileFollower | None = None
        self._kmsg: _KmsgReader | None = None
        if kmsg:
            self._kmsg = _KmsgReader(kmsg_path, position, replay)
            self.name = f"kmsg:{node}"
        else:
            self._file = _FileFollower(str(path), position, replay)
            self.name = str(path)

    def open(self) -> None:
        """Open the source now. For ``/dev/kmsg`` this raises ``OSError`` when it cannot be read;
        a file that does not exist yet is not an error (it is opened when it appears)."""
        if self._kmsg is not None and self._kmsg.fd is None:
            self._kmsg.open()

    def position(self) -> dict[str, Any]:
        pos = self._kmsg.position() if self._kmsg is not None else self._file.position()  # type: ignore[union-attr]
        if self._line_at is not None:
            pos["line"] = list(self._line_at)
        return pos

    def _line_number(self, ino: int, gen: int, offset: int, length: int) -> int:
        """The 1-based number of the line that starts at ``offset`` (counted, not guessed, when
        the reader skipped ahead: a first start at the end of the file, a cut over-long line)."""
        known = self._line_at
        if known is not None and known[0] == ino and known[1] == gen and offset >= known[2]:
            base_off, before = known[2], known[3]
        else:
            base_off, before = 0, 0
        if offset > base_off:
            before += self._count_lines(ino, base_off, offset)
        self._line_at = (ino, gen, offset + length + 1, before + 1)
        return before + 1

    def _count_lines(self, ino: int, start: int, end: int) -> int:
        assert self._file is not None
        try:
            fd = os.open(self._file.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return 0
        try:
            if os.fstat(fd).st_ino != ino:
                return 0  # the file was rotated away: numbers restart with the new one
            count, pos = 0, start
            while pos < end:
                data = os.pread(fd, min(1 << 20, end - pos), pos)
                if not data:
                    break
                count += data.count(b"\n")
                pos += len(data)
            return count
        except OSError:
            return 0
        finally:
            os.close(fd)

    def commit(self) -> dict[str, Any]:
        """Persist the current position (call after the facts from ``poll()`` are stored)."""
        pos = self.position()
        if self.state_file:
            atomic_write_json(self.state_file, pos)
        if self.on_commit is not None:
            self.on_commit(pos)
        return pos

    def poll(self) -> list[Fact]:
        facts: list[Fact] = []
        try:
            if self._kmsg is not None:
                if self._kmsg.fd is None:
                    return facts
                for seq, at, msg in self._kmsg.read():
                    self.lines_read += 1
                    origin = f"kmsg:{self.node}:{seq}"
                    fid = _line_id("kmsg", self.node, self._kmsg.boot_id, seq)
                    facts.extend(self.lines.feed(msg, at, origin, fid))
            else:
                assert self._file is not None
                now = self.clock()
                for ino, gen, offset, raw in self._file.read():
                    self.lines_read += 1
                    text = raw.decode("utf-8", "replace")
                    at = kernel_line_time(text, now)
                    origin = f"{self._file.path}:{self._line_number(ino, gen, offset, len(raw))}"
                    fid = _line_id("file", self.node, ino, gen, offset, hashlib.blake2b(raw, digest_size=8).hexdigest())
                    facts.extend(self.lines.feed(text, now if at is None else at, origin, fid))
        except Exception:  # a source must never take the agent down
            logger.exception("%s: unexpected error while reading", self.name)
        return facts

    def close(self) -> None:
        if self._kmsg is not None:
            self._kmsg.close()
        if self._file is not None:
            self._file.close()


def _load_json(path: str) -> Any:
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read(1 << 22))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("%s: unreadable state (%s); starting without it", path, exc)
        return None


def atomic_write_json(path: str, data: Any) -> None:
    """Write JSON to ``path`` so that a crash leaves either the old or the new content."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    payload = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(payload)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
