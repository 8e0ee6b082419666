"""Kernel-log source of the node agent: NVRM Xid lines and "fallen off the bus" messages → facts.

Two layers:

* pure parsing: ``parse_kernel_line`` turns one kernel-log line (dmesg, syslog, journal or
  ``/dev/kmsg`` record, with or without its prefix) into an ``xid`` or ``gpu_state`` fact or
  ``None``; ``parse_gpu_uuid_line`` reads the ``NVRM: GPU at PCI:… GPU-<uuid>`` mapping line;
  ``KernelLineParser`` adds the little state that multi-line messages and the UUID mapping need.
* reading: ``KernelLogSource`` follows a kernel-log file (rotation, truncation, persisted byte
  offset) or ``/dev/kmsg`` (sequence numbers, per boot) and returns facts whose ids depend only
  on where the line was read, so a line read twice yields the same ``Fact.id``.

Nothing here raises on garbage input: bytes are decoded with replacement, over-long lines are
cut, unknown shapes return ``None``.
"""

from __future__ import annotations

import calendar
import errno
import hashlib
import json
import logging
import os
import re
import time
from collections import OrderedDict
from datetime import datetime
from typing import Any, Callable

from engine.facts import Fact, FactError
from engine.sources.spool import file_head

logger = logging.getLogger(__name__)

__all__ = [
    "parse_kernel_line",
    "parse_gpu_uuid_line",
    "normalize_pci",
    "kernel_line_time",
    "clean_text",
    "KernelLineParser",
    "KernelLogSource",
    "DETAIL_MAX",
]

#: bound on the free-text ``detail`` attribute
DETAIL_MAX = 512
#: a line is cut to this many characters before it is parsed (the Xid head is at the start)
LINE_MAX = 8192

_RECOVERY_ACTIONS = {
    # NVML_GPU_RECOVERY_ACTION_* values and the words the driver prints for them
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}
_RECOVERY_WORDS = {
    "none": "none",
    "gpu reset required": "gpu_reset",
    "gpu reset": "gpu_reset",
    "node reboot required": "node_reboot",
    "node reboot": "node_reboot",
    "drain p2p": "drain_p2p",
    "drain and reset": "drain_and_reset",
    "system reboot required": "system_reboot",
    "bus reset required": "bus_reset",
}

_HEX = "[0-9A-Fa-f]"
# a PCI address as the driver prints it: [PCI:]domain:bus:device[.function]
_PCI = rf"(?:PCI:)?({_HEX}{{1,8}}:{_HEX}{{1,2}}:{_HEX}{{1,2}}(?:\.[0-7])?)"

# "Xid" must not be the tail of "SXid" (NVSwitch errors use their own numbering)
_XID_RE = re.compile(
    rf"(?<![A-Za-z])Xid\s*\(\s*{_PCI}\s*\)\s*:\s*(\d{{1,6}})(?!\d)\s*,?\s*(.*)", re.DOTALL
)
_PID_RE = re.compile(r"pid\s*=\s*('?<unknown>'?|'?(\d+)'?|[^,]*)\s*(?:,\s*|$)")
_NAME_RE = re.compile(r"name\s*=\s*(.*?)(?:,\s+|,$|$)", re.DOTALL)
_UUID_RE = re.compile(
    rf"NVRM:\s*GPU at\s+{_PCI}\s*:\s*(GPU-{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}})"
)
_PCI_ANY_RE = re.compile(rf"(?<![0-9A-Za-z:]){_PCI}(?![0-9A-Za-z]|:{_HEX})")
_FALLEN_RE = re.compile(r"fallen\s+off\s+the\s+bus", re.IGNORECASE)
_HEADER_RE = re.compile(rf"NVRM:\s*The NVIDIA GPU\s+{_PCI}")
_PCI_ID_RE = re.compile(rf"\(PCI ID:\s*({_HEX}{{4}}:{_HEX}{{4}})\)")
_INIT_FAILED_RE = re.compile(r"NVRM:.*RmInitAdapter failed", re.IGNORECASE)
_RECOVERY_RE = re.compile(
    r"recovery action changed from\s+(?:0x([0-9A-Fa-f]+))?\s*(?:\(([^)]*)\))?\s*to\s+"
    r"(?:0x([0-9A-Fa-f]+))?\s*(?:\(([^)]*)\))?",
    re.IGNORECASE,
)
_CAUSED_BY_RE = re.compile(r"caused by previous Xid\s+(\d{1,6})", re.IGNORECASE)
_LINK_RE = re.compile(r"\blink\s+(\d{1,3})\b", re.IGNORECASE)

# prefixes: /dev/kmsg "prio,seq,usec,flags[,...];", syslog "<date> <host> kernel:",
# dmesg "[ 1234.5678]" or "[ T1946]"
_KMSG_RE = re.compile(r"^\s*(\d{1,5}),(\d{1,20}),(\d{1,20}),([^;]{0,64});(.*)$", re.DOTALL)
_ISO_RE = re.compile(
    r"^\s*(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d{1,9})?)(Z|[+-]\d\d:?\d\d)?\s+\S+\s+kernel:"
)
_BSD_RE = re.compile(r"^\s*([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d\d):(\d\d):(\d\d)\s+\S+\s+kernel:")
_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}

# C0/C1 controls and the invisible format characters that can reorder or hide text
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def clean_text(text: str, limit: int = DETAIL_MAX) -> str:
    """Drop control and invisible formatting characters, collapse blanks, bound the length."""
    text = _CONTROL_RE.sub(" ", text[: limit * 4])
    text = " ".join(text.split())
    return text[:limit]


def normalize_pci(text: str | None) -> str | None:
    """``00000000:3B:00.0``, ``PCI:0000:3b:00``, ``3b:00.0`` → ``0000:3b:00`` (``None`` if not PCI)."""
    if not isinstance(text, str):
        return None
    t = text.strip()
    if t[:4].upper() == "PCI:":
        t = t[4:]
    t = t.split(".", 1)[0]
    parts = t.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return None
    dom, bus, dev = parts
    try:
        if not (1 <= len(dom) <= 8 and 1 <= len(bus) <= 2 and 1 <= len(dev) <= 2):
            return None
        d, b, v = int(dom, 16), int(bus, 16), int(dev, 16)
    except ValueError:
        return None
    return f"{d & 0xFFFF:04x}:{b:02x}:{v:02x}"


def _message(line: str) -> str:
    """The kernel message without a /dev/kmsg record header."""
    m = _KMSG_RE.match(line)
    return m.group(5) if m else line


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


def parse_gpu_uuid_line(line: str) -> tuple[str, str] | None:
    """``NVRM: GPU at PCI:0000:01:00: GPU-8a47…`` → ``("0000:01:00", "GPU-8a47…")`` or ``None``."""
    if not isinstance(line, str) or "GPU-" not in line:
        return None
    m = _UUID_RE.search(line[:LINE_MAX])
    if not m:
        return None
    pci = normalize_pci(m.group(1))
    return (pci, "GPU-" + m.group(2)[4:].lower()) if pci else None


def _recovery_action(code: str | None, words: str | None) -> str | None:
    if words:
        key = " ".join(words.lower().split())
        if key in _RECOVERY_WORDS:
            return _RECOVERY_WORDS[key]
    if code:
        try:
            value = int(code, 16)
        except ValueError:
            value = None
        if value in _RECOVERY_ACTIONS:
            return _RECOVERY_ACTIONS[value]
    if words:
        slug = re.sub(r"[^a-z0-9]+", "_", words.lower()).strip("_")[:64]
        return slug or None
    return None


def _parse_xid(msg: str, node: str) -> dict[str, Any] | None:
    m = _XID_RE.search(msg)
    if not m:
        return None
    pci = normalize_pci(m.group(1))
    if pci is None:
        return None
    code = int(m.group(2))
    rest = m.group(3)
    attrs: dict[str, Any] = {"code": code, "pci": pci, "node": node}
    pm = _PID_RE.match(rest)
    if pm:
        if pm.group(2):
            attrs["pid"] = int(pm.group(2))
        rest = rest[pm.end():]
        nm = _NAME_RE.match(rest)
        if nm:
            name = clean_text(nm.group(1), 64).strip("'\"")
            if name and name != "<unknown>":
                attrs["process"] = name
            rest = rest[nm.end():]
    detail = clean_text(rest)
    attrs["detail"] = detail
    if code == 154:
        rm = _RECOVERY_RE.search(detail)
        if rm:
            action = _recovery_action(rm.group(3), rm.group(4))
            if action:
                attrs["recovery_action"] = action
            previous = _recovery_action(rm.group(1), rm.group(2))
            if previous:
                attrs["recovery_action_previous"] = previous
    elif code == 45:
        cm = _CAUSED_BY_RE.search(detail)
        if cm:
            attrs["caused_by"] = int(cm.group(1))
    elif code == 74 or 144 <= code <= 150:
        lm = _LINK_RE.search(detail)
        if lm:
            attrs["link"] = int(lm.group(1))
    return attrs


def _after_nvrm(msg: str) -> str:
    i = msg.find("NVRM:")
    return msg[i + 5:] if i >= 0 else msg


def _parse(line: str, node: str) -> tuple[str, dict[str, Any]] | None:
    """The kind and attributes one kernel-log line gives, or ``None``."""
    if not isinstance(line, str):
        return None
    line = line[:LINE_MAX]
    if "Xid" not in line and "NVRM" not in line:
        return None
    msg = _message(line)
    attrs = _parse_xid(msg, node)
    if attrs is not None:
        return "xid", attrs
    if "NVRM" not in msg:
        return None
    text = _after_nvrm(msg)
    if _FALLEN_RE.search(text):
        attrs = {"code": 79, "node": node, "inferred": True}
        pm = _PCI_ANY_RE.search(text)
        pci = normalize_pci(pm.group(1)) if pm else None
        if pci:
            attrs["pci"] = pci
        attrs["detail"] = clean_text(text)
        return "xid", attrs
    if _INIT_FAILED_RE.search(msg):
        attrs = {"state": "init_failed", "node": node, "detail": clean_text(text)}
        pm = _PCI_ANY_RE.search(text)
        pci = normalize_pci(pm.group(1)) if pm else None
        if pci:
            attrs["pci"] = pci
        return "gpu_state", attrs
    return None


def parse_kernel_line(
    line: str, node: str, at: float, origin: str, *, fact_id: str | None = None
) -> Fact | None:
    """One kernel-log line → an ``xid`` fact (or a ``gpu_state`` fact for an adapter that failed
    to initialise), else ``None``. Never raises on any ``str``.

    Xid attributes: ``code``, ``pci`` (``dddd:bb:dd``), ``node``, ``pid`` and ``process`` when the
    driver printed them, ``detail`` (cleaned, at most ``DETAIL_MAX`` characters); Xid 154 adds
    ``recovery_action`` (``none``, ``drain_p2p``, ``drain_and_reset``, ``gpu_reset``,
    ``node_reboot``…), Xid 45 ``caused_by``, Xid 74/144–150 ``link``. A "fallen off the bus"
    message without an Xid becomes code 79 with ``inferred: true``.
    """
    try:
        parsed = _parse(line, node)
        if parsed is None:
            return None
        kind, attrs = parsed
        return Fact.make(kind, attrs, at, origin, id=fact_id)
    except (FactError, ValueError, TypeError, OverflowError):
        return None


class KernelLineParser:
    """``parse_kernel_line`` plus the state a stream of lines needs.

    * The three-line "The NVIDIA GPU <pci> / (PCI ID: …) installed in this system has / fallen off
      the bus and is not responding to commands." message: the address comes from the first line.
    * ``NVRM: GPU at PCI:… GPU-<uuid>`` lines: later facts for that address carry ``uuid``.
    """

    #: how many lines after "The NVIDIA GPU …" the address is remembered
    HEADER_SPAN = 4

    def __init__(self, node: str, uuids: dict[str, str] | None = None) -> None:
        self.node = node
        self.uuids: OrderedDict[str, str] = OrderedDict(uuids or {})
        self._header: tuple[str, str | None] | None = None
        self._header_age = 0

    def feed(self, line: str, at: float, origin: str, fact_id: str | None = None) -> Fact | None:
        try:
            return self._feed(line, at, origin, fact_id)
        except (FactError, ValueError, TypeError, OverflowError):
            return None

    def _feed(self, line: str, at: float, origin: str, fact_id: str | None) -> Fact | None:
        if not isinstance(line, str):
            return None
        line = line[:LINE_MAX]
        if self._header is not None:
            self._header_age += 1
            if self._header_age > self.HEADER_SPAN:
                self._header = None
        if "NVRM" not in line and "Xid" not in line:
            return None
        mapping = parse_gpu_uuid_line(line)
        if mapping:
            pci, uuid = mapping
            self.uuids[pci] = uuid
            self.uuids.move_to_end(pci)
            while len(self.uuids) > 256:
                self.uuids.popitem(last=False)
            return None
        hm = _HEADER_RE.search(line)
        if hm and not _FALLEN_RE.search(line):
            idm = _PCI_ID_RE.search(line)
            self._header = (normalize_pci(hm.group(1)) or "", idm.group(1).lower() if idm else None)
            self._header_age = 0
            return None
        if self._header is not None and self._header[1] is None:
            idm = _PCI_ID_RE.search(line)
            if idm:
                self._header = (self._header[0], idm.group(1).lower())
        parsed = _parse(line, self.node)
        if parsed is None:
            return None
        kind, attrs = parsed
        if kind == "xid" and attrs.get("inferred") and "pci" not in attrs and self._header:
            pci, pci_id = self._header
            if pci:
                attrs["pci"] = pci
            if pci_id:
                attrs["pci_id"] = pci_id
            self._header = None
        pci = attrs.get("pci")
        if pci and pci in self.uuids:
            attrs["uuid"] = self.uuids[pci]
        return Fact.make(kind, attrs, at, origin, id=fact_id)


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
                "path": self.path, "ino": c.ino, "dev": c.dev, "offset": c.line_start, "gen": self.gen,
                "head": file_head(c.fd, c.line_start),
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
        return size < offset or file_head(c.fd, offset) == head  # shorter: truncated in place

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
                logger.warning("%s: rotated away while the agent was down; unread lines of the old file are lost", self.path)
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
    ) -> None:
        if (path is None) == (not kmsg):
            raise ValueError("give exactly one of path= or kmsg=True")
        self.node = node
        self.state_file = state_file
        self.on_commit = on_commit
        self.clock = clock
        self.parser = KernelLineParser(node)
        self.lines_read = 0
        if position is None and state_file:
            position = _load_json(state_file)
        position = position if isinstance(position, dict) else None
        if position and isinstance(position.get("uuids"), dict):
            for k, v in list(position["uuids"].items())[-256:]:
                if isinstance(k, str) and isinstance(v, str):
                    self.parser.uuids[k] = v
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
        if self.parser.uuids:
            pos["uuids"] = dict(self.parser.uuids)
        return pos

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
                    fact = self.parser.feed(msg, at, origin, fid)
                    if fact is not None:
                        facts.append(fact)
            else:
                assert self._file is not None
                now = self.clock()
                for ino, gen, offset, raw in self._file.read():
                    self.lines_read += 1
                    text = raw.decode("utf-8", "replace")
                    at = kernel_line_time(text, now)
                    origin = f"{self._file.path}:{offset}"
                    fid = _line_id("file", self.node, ino, gen, offset, hashlib.blake2b(raw, digest_size=8).hexdigest())
                    fact = self.parser.feed(text, now if at is None else at, origin, fid)
                    if fact is not None:
                        facts.append(fact)
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
