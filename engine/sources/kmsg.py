"""Kernel-log source of the node agent: kernel-log lines → facts, with the rulebook's matchers.

The agent turns kernel-log lines into facts exactly as replay does: the kernel matchers of the
rulebook (``rules/11-matchers-kernel.yaml`` and any site file), scanned by the same ``Scanner``
and converted by the same ``HitConverter`` (which holds the one Xid decoder), so that a line
reaches the same facts, fault classes and decisions whichever side of the spool it is read on.
There is no second parser here.

* ``KernelLineFacts``: one kernel-log line → its facts (``xid``, ``log``).
* ``KernelLogSource``: follows a kernel-log file (``tail.LineTail``: rotation, truncation,
  persisted byte offset; line numbers are counted here) or ``/dev/kmsg`` (its records are parsed
  here: sequence numbers, per boot) and returns facts whose ids depend
  only on where the line was read, so a line read twice yields the same ``Fact.id``. Their
  origin is ``PATH:LINE`` (a line number, as ``explain`` shows it) or ``kmsg:NODE:SEQ``.

Nothing here raises on garbage input: bytes are decoded with replacement, over-long lines are
cut, unknown shapes give no fact.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import os
import re
from typing import Any, Callable, Sequence

from engine.clock import SYSTEM, Clock
from engine.facts import Fact, FactError
from engine.core.context import FileContext
from engine.core.converter import HitConverter
from engine.core.linefacts import StreamFacts
from engine.core.xid import normalize_pci
from engine.core.linetime import DEFAULT_ZONE, LineClock, log_zone
from engine.sources.state import atomic_write_json, load_json
from engine.sources.tail import LineTail, TailFile, int_or_zero

logger = logging.getLogger(__name__)

__all__ = [
    "normalize_pci",
    "kernel_line_time",
    "KernelLineFacts",
    "KernelLogSource",
    "default_rulebook",
    "launch_positions",
]

#: a line is cut to this many characters before it is matched (the Xid head is at the start)
LINE_MAX = 8192

# prefixes: /dev/kmsg "prio,seq,usec,flags[,...];", syslog "<date> <host> kernel:"
_KMSG_RE = re.compile(r"^\s*(\d{1,5}),(\d{1,20}),(\d{1,20}),([^;]{0,64});(.*)$", re.DOTALL)
_NEWLINES = re.compile("[\r\n]")


@functools.lru_cache(maxsize=1)
def default_rulebook() -> Any:
    """The shipped rulebook, compiled once (for callers that were given none)."""
    from engine.rulebook import require_rulebook

    return require_rulebook()


def kernel_line_time(line: str, now: float | None = None, zone: str = DEFAULT_ZONE) -> float | None:
    """The wall time a kernel-log line's stamp gives, read as replay reads it (``linetime``: a
    stamp without a zone is in ``zone``, the rulebook's ``policy.log_timezone``; one without a
    year is at most a day after ``now``), else ``None``. One line on its own: a source keeps a
    ``LineClock`` so that a log running into a new year moves with it."""
    return LineClock(zone=zone, not_after=now).time(line)


class KernelLineFacts:
    """Kernel-log lines → facts with the rulebook's kernel matchers, the way replay makes them.

    ``KernelLineFacts(compiled, "n3").feed(line, at, origin, fact_id)`` returns the facts of one
    line. The node is the agent's: a fact that names no node (dmesg, ``/dev/kmsg``) gets it, and
    a syslog host that names another node is kept only as ``logged_node`` (a spool file speaks
    for the node it is named after).
    """

    def __init__(self, compiled: Any, node: str, path: str = "kernel") -> None:
        from engine.core.scanner import scanner_for  # replay's own selection and compiled scanner, not a copy

        self.node = node
        self.zone = log_zone(compiled.policy.log_timezone)  # the one rule for stamps without a zone, as in replay
        scanner, index_map = scanner_for(compiled, "kernel")
        ctx = FileContext(path=path, source="kernel", nodes={node})
        # the scan -> fact loop replay and the controller share; floods are the controller's to
        # collapse. No progress sampling: a line fed on its own is the last of its chunk, never
        # left out, and lines scanned together (``scan``) must give what they give one by one
        self.stream = StreamFacts(
            scanner, HitConverter(compiled.matchers), ctx, index_map, collapse=False, sample=False
        )

    def feed(self, line: str | bytes, at: float, origin: str, fact_id: str | None = None) -> list[Fact]:
        try:
            return self._feed(line, at, origin, fact_id)
        except (FactError, ValueError, TypeError, OverflowError):
            return []

    def scan(self, lines: Sequence[bytes]) -> list[tuple[int, list[Any]]] | None:
        """Many lines (each without its newline) scanned as one buffer, as the follower scans a
        job log: ``(index, hits)`` of the lines a kernel matcher hit, in order, for ``finish`` to
        turn into facts once the caller knows their time, origin and id. The other lines cost
        nothing more here. None when they cannot be read together exactly as ``feed`` reads them
        one by one (bytes that are not UTF-8, a line longer than LINE_MAX): feed those."""
        if not lines:
            return []
        if max(map(len, lines)) > LINE_MAX:
            return None
        buf = b"\n".join(lines)
        try:
            buf.decode("utf-8")  # as feed decodes and encodes again: the same bytes
        except UnicodeDecodeError:
            return None
        return self._scan(buf.replace(b"\r", b" ") if b"\r" in buf else buf)

    def scan_text(self, lines: Sequence[str]) -> list[tuple[int, list[Any]]]:
        """``scan`` for lines already decoded (``/dev/kmsg`` records, at most LINE_MAX each)."""
        if not lines:
            return []
        text = "\n".join(line[:LINE_MAX] for line in lines)
        return self._scan(text.replace("\r", " ").encode("utf-8", "replace"))

    def _scan(self, buf: bytes) -> list[tuple[int, list[Any]]]:
        stream = self.stream
        before = stream.scanner.position[1]  # lines the scanner has consumed
        out: list[tuple[int, list[Any]]] = []
        for hit in stream.scan(buf + b"\n"):
            index = hit.line_no - before - 1
            if out and out[-1][0] == index:
                out[-1][1].append(hit)
            else:
                out.append((index, [hit]))
        return out

    def finish(self, hits: list[Any], at: float, origin: str, fact_id: str | None = None) -> list[Fact]:
        """The facts of one line's hits (from ``scan``): what ``feed`` gives for that line."""
        try:
            return self._facts([self.stream.item(h) for h in hits], at, origin, fact_id)
        except (FactError, ValueError, TypeError, OverflowError):
            return []

    def _feed(self, line: str | bytes, at: float, origin: str, fact_id: str | None) -> list[Fact]:
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        if not isinstance(line, str):
            return []
        text = _NEWLINES.sub(" ", line[:LINE_MAX])
        items = [item for _, _, item in self.stream.feed(text.encode("utf-8", "replace") + b"\n")]
        return self._facts(items, at, origin, fact_id)

    def _facts(self, items: list[Any], at: float, origin: str, fact_id: str | None) -> list[Fact]:
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


def _boot_time(clock: Clock = SYSTEM) -> float:
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as fh:
            for row in fh:
                if row.startswith("btime "):
                    return float(row.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return clock.wall() - clock.boottime()


class _KmsgReader:
    """Records of ``/dev/kmsg`` (``prio,seq,usec,flags;message``), one per ``read``.

    On first start it seeks to the end unless ``replay``; with a saved position of the same
    boot it re-reads the ring buffer and skips sequence numbers already seen.
    """

    def __init__(
        self,
        path: str = "/dev/kmsg",
        position: dict[str, Any] | None = None,
        replay: bool = False,
        clock: Clock = SYSTEM,
    ) -> None:
        self.path = path
        self.replay = replay
        self.boot_id = _boot_id()
        self.btime = _boot_time(clock)
        self.fd: int | None = None
        self.last_seq = -1
        self.buf = bytearray()
        saved = position if isinstance(position, dict) else None
        self._skip_to = -1
        self._from_start = replay
        if saved is not None and saved.get("boot_id") == self.boot_id:
            self._skip_to = int_or_zero(saved.get("seq"))
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

    def _record(self, raw: bytes | bytearray, out: list) -> None:
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
        clock: Clock = SYSTEM,
        rulebook: Any = None,
    ) -> None:
        if (path is None) == (not kmsg):
            raise ValueError("give exactly one of path= or kmsg=True")
        self.node = node
        self.state_file = state_file
        self.on_commit = on_commit
        self.clock = clock
        self._lines_path = f"kmsg:{node}" if kmsg else str(path)
        self.lines = self.lines_for(rulebook if rulebook is not None else default_rulebook())
        self.lines_read = 0
        # the file's lines are dated in order, as replay dates them: the log zone, the year
        self.dates = LineClock(zone=self.lines.zone)
        if position is None and state_file:
            position = load_json(state_file)
        position = position if isinstance(position, dict) else None
        # (inode, generation, offset of the next line, its number - 1): line numbers for origins
        self._line_at: tuple[int, int, int, int] | None = None
        saved_line = position.get("line") if position else None
        if isinstance(saved_line, list) and len(saved_line) == 4 and all(isinstance(x, int) for x in saved_line):
            self._line_at = (saved_line[0], saved_line[1], saved_line[2], saved_line[3])
        self._file: LineTail | None = None
        self._kmsg: _KmsgReader | None = None
        if kmsg:
            self._kmsg = _KmsgReader(kmsg_path, position, replay, clock)
            self.name = f"kmsg:{node}"
        else:
            # the operator names this file, so a link there (a kern.log kept on another disk) is
            # resolved once, here; the file it names is then read without following links
            self._file = LineTail(os.path.realpath(str(path)), position, replay)
            self.name = str(path)

    def lines_for(self, compiled: Any) -> KernelLineFacts:
        """This source's lines -> facts with the kernel matchers of ``compiled``. A reload builds
        it first and then sets ``lines``: the position is not touched, so no line is lost or read
        twice by the swap."""
        return KernelLineFacts(compiled, self.node, self._lines_path)

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
            f = TailFile.open(self._file.path)
        except OSError:
            return 0
        try:
            if f.ino != ino:
                return 0  # the file was rotated away: numbers restart with the new one
            return f.count_lines(start, end)[0]
        except OSError:
            return 0
        finally:
            f.close()

    def commit(self) -> dict[str, Any]:
        """Persist the current position (call after the facts from ``poll()`` are stored)."""
        pos = self.position()
        if self.state_file:
            atomic_write_json(self.state_file, pos)
        if self.on_commit is not None:
            self.on_commit(pos)
        return pos

    def poll(self) -> list[Fact]:
        """The facts of the lines read since the last call. The lines of one read are scanned as
        one buffer; only the lines a matcher hit are dated, numbered and given an id (see
        ``_file_facts``)."""
        facts: list[Fact] = []
        try:
            if self._kmsg is not None:
                if self._kmsg.fd is None:
                    return facts
                records = self._kmsg.read()
                self.lines_read += len(records)
                lines = self.lines
                for index, hits in lines.scan_text([msg for _, _, msg in records]):
                    seq, at, _ = records[index]
                    fid = _line_id("kmsg", self.node, self._kmsg.boot_id, seq)
                    facts.extend(lines.finish(hits, at, f"kmsg:{self.node}:{seq}", fid))
            else:
                assert self._file is not None
                now = self.clock.wall()
                dates = self.dates
                dates.not_after = now  # a yearless stamp with nothing dated before it is not after now
                dates.zone = self.lines.zone  # a reload swaps ``lines``: its rulebook's zone from then on
                batch = self._file.read()
                self.lines_read += len(batch)
                if not self._file_facts(batch, now, facts):
                    for ino, gen, offset, raw in batch:
                        facts.extend(self._line_facts(ino, gen, offset, raw, now))
        except Exception:  # a source must never take the agent down
            logger.exception("%s: unexpected error while reading", self.name)
        return facts

    def _line_facts(self, ino: int, gen: int, offset: int, raw: bytes, now: float) -> list[Fact]:
        """One line of the file on its own: dated, numbered, its id, then matched."""
        text = raw.decode("utf-8", "replace")
        stamp = self.dates.time(text)
        if stamp is None:  # undated: the line dated before it, as replay does; else now
            stamp = self.dates.ref
        origin = f"{self._file_path()}:{self._line_number(ino, gen, offset, len(raw))}"
        fid = _line_id("file", self.node, ino, gen, offset, hashlib.blake2b(raw, digest_size=8).hexdigest())
        return self.lines.feed(text, now if stamp is None else stamp, origin, fid)

    def _file_path(self) -> str:
        assert self._file is not None
        return self._file.path

    def _file_facts(self, batch: list[tuple[int, int, int, bytes]], now: float, facts: list[Fact]) -> bool:
        """The facts of one read of the file, its lines scanned as one buffer; False (nothing
        done) when the read is not one run of whole lines of one file (a rotation or truncation
        in it, a cut line) or cannot be scanned together: then each line goes on its own.

        Same facts as line by line: a line is numbered by counting from the first of the run, and
        the line numbers saved at the end are those of its last line. A hit is dated by its own
        stamp, or else by the nearest line before it that has one (looked for backwards, as far
        as the previous hit); at the end, the last dated line of the run is what the next read
        dates from. One difference: a yearless stamp takes the year nearest to the last line
        dated *here* (the previous hit), not to the line just before it, which differs only if
        more than half a year of log lies between two hits of one read."""
        if not batch:
            return True
        ino, gen, first, _ = batch[0]
        last_ino, last_gen, last, last_raw = batch[-1]
        raws = [raw for _, _, _, raw in batch]
        if (ino, gen) != (last_ino, last_gen) or last - first != sum(map(len, raws)) - len(last_raw) + len(raws) - 1:
            return False
        found = self.lines.scan(raws)
        if found is None:
            return False
        dates, path, node = self.dates, self._file_path(), self.node
        number = self._line_number(ino, gen, first, len(raws[0]))  # the run's first line
        lo = 0  # the lines before this one were looked at for a stamp
        for index, hits in found:
            raw = raws[index]
            stamp = dates.time(raw.decode("utf-8", "replace"))
            if stamp is None:
                self._date_back(raws, index - 1, lo)
                stamp = dates.ref
            lo = index + 1
            offset = batch[index][2]
            fid = _line_id("file", node, ino, gen, offset, hashlib.blake2b(raw, digest_size=8).hexdigest())
            facts.extend(self.lines.finish(hits, now if stamp is None else stamp, f"{path}:{number + index}", fid))
        self._date_back(raws, len(raws) - 1, lo)
        self._line_at = (ino, gen, last + len(last_raw) + 1, number + len(raws) - 1)
        return True

    def _date_back(self, raws: list[bytes], hi: int, lo: int) -> None:
        """The stream's clock set by the last line of ``raws[lo:hi + 1]`` that has a stamp, if any."""
        dates = self.dates
        for i in range(hi, lo - 1, -1):
            t = dates.peek(raws[i].decode("utf-8", "replace"))
            if t is not None:
                dates.ref = t
                return

    def close(self) -> None:
        if self._kmsg is not None:
            self._kmsg.close()
        if self._file is not None:
            self._file.close()


def launch_positions(kernel_log: str | None = None, kmsg: bool = False, kmsg_path: str = "/dev/kmsg") -> dict:
    """Where the kernel logs end now, as saved positions (``{"kernel_log": ..., "kmsg": ...}``)
    for the agent's first start. Taken at launch, before the slow parts of starting (the
    rulebook, NVML, asking Slurm): a first start that began where the log ends once it is ready
    would never read an Xid logged while it started. A file that does not exist yet, or a kmsg
    that cannot be read, has no entry (the former is read from its start when it appears)."""
    out: dict[str, Any] = {}
    if kernel_log:
        pos = _file_end(os.path.realpath(kernel_log))
        if pos is not None:
            out["kernel_log"] = pos
    if kmsg:
        reader = _KmsgReader(kmsg_path, replay=True)
        try:
            reader.open()
            while reader.read():  # the records already there, to learn the last sequence number
                pass
            out["kmsg"] = reader.position()
        except OSError:
            pass  # the agent says so when it opens it
        finally:
            reader.close()
    return out


def _file_end(path: str) -> dict[str, Any] | None:
    """The position just past the last complete line of ``path`` now (a line being written is
    read whole, later), in ``LineTail.position``'s form; None when it cannot be opened."""
    try:
        f = TailFile.open(path)
    except OSError:
        return None
    try:
        size = f.size()
        window = 65536 + 1
        found, end = f.count_lines(max(0, size - window), size)
        if not found:  # no newline near the end: a line longer than any kept, or none yet
            end = size if size > window else 0
        return {"path": path, "ino": f.ino, "dev": f.dev, "offset": end, "gen": 0, "head": f.head(end)}
    except OSError:
        return None
    finally:
        f.close()
