"""The one reader of log-line timestamps: every stamp form, one time-zone rule, the year from the input.

Replay, the controller, ``recover rules test`` and the node agent all date a line here, so that
the same line gets the same time whichever side reads it and whatever ``TZ`` the process has.

The rule (docs/rulebook.md, "Line times"):

* A stamp that names its zone (``Z``, ``+02:00``, ``-0500``) is read in that zone.
* A stamp without one is wall time in the rulebook's ``policy.log_timezone`` (an IANA name such
  as ``Europe/Berlin``; default ``UTC``). The host's own ``TZ`` is never consulted: a replay on a
  laptop and the agent on the node read ``Nov 29 17:00:01`` as the same instant.
* A stamp without a year (BSD syslog ``Nov 29 17:00:01``, glog ``E1129 17:00:01.5``, vLLM
  ``INFO 11-29 17:00:01``) takes its year from the input: the year that puts it nearest the line
  dated before it in the same stream (so a log that runs from December into January moves to the
  next year, and a line a little out of order does not), else ``LineClock.year`` (a caller's
  explicit year), else the latest year that does not put it more than a day after
  ``LineClock.not_after`` (the file's modification time in replay, the time of reading live).
  With none of these it is undated. Nothing here reads the wall clock.
* A kernel ``[ 12.345678]`` stamp (dmesg, or ``[ +0.5]`` from ``dmesg -d``) counts from an
  unknown boot, not from the epoch: such a line is undated, as a line without any stamp is (the
  caller dates it by the line before it). ``dmesg -T`` stamps and kern.log's syslog prefix are
  wall times and are read.
* A stamp with only a time of day (``[17:36:51]``) takes the date that puts it nearest the line
  dated before it, and is undated without one.

Where several stamps are on a line, the leftmost one is the line's time (``18:11:06.680
[rank4]:[E205 18:11:06.3]`` is read by its first); an impossible date there (month 13) leaves
the line undated rather than dated by something later on it.
"""

from __future__ import annotations

import calendar
import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from engine.rulebook.zones import check_zone, zone as _zone

__all__ = ["LineClock", "parse_line_time", "has_stamp", "check_zone", "log_zone", "DEFAULT_ZONE", "HEAD"]

DEFAULT_ZONE = "UTC"
#: a line's stamp is looked for in this many characters of its head
HEAD = 96

_MON = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
MONTHS = {m: i for i, m in enumerate(_MON.split("|"), 1)}
_DAY = "Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_T = r"(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"  # the time of day, fraction with . or ,

# ISO 8601 and its log variants: "2026-11-29T17:00:01.5+01:00", "2026-11-29 17:00:01,123" (Python
# logging), "[2026-11-29T17:00:01.123]" (Slurm), "2024/01/24 02:50:32", "2024-01-16_18:04:01" (torchrun)
_ISO = re.compile(
    r"(\d{4})(?P<sep>[-/])(\d{2})(?P=sep)(\d{2})[T _](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?"
)
# everything else, each a (name, pattern) searched in the head; the leftmost match wins
_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # BSD syslog (rsyslog's kern.log), at the start, after an optional <PRI>; nextflow's "Oct-26"
    ("bsd", re.compile(rf"^\s*(?:<\d{{1,3}}>)?({_MON})[ -] ?(\d{{1,2}}) {_T}(?=[\s:\]]|$)")),
    # ctime / dmesg -T / LSF: "[Fri Aug 30 11:43:09 2024]", "Wed Nov 29 11:02:54 2023", "Tue Jul 30 21:43:38:"
    ("ctime", re.compile(rf"(?<![\w])(?:{_DAY}) ({_MON})  ?(\d{{1,2}}) {_T}(?: (\d{{4}})(?!\d)|(?=[:\]]))")),
    # RFC 2822: "Mon, 27 Jul 2026 11:04:56 CEST(+0200)", "Fri, 21 Apr 2017 23:38:59 +0300"
    (
        "rfc2822",
        re.compile(rf"(?:{_DAY}), (\d{{1,2}}) ({_MON}) (\d{{4}}) {_T}(?: ?[A-Z]{{0,5}} ?\(?([+-]\d{{4}})\)?)?"),
    ),
    # glog / c10 (PyTorch): "E1129 17:21:30.123456 1234 file.cc:1]", "[rank0]:[E1201 10:25:02.113452871 ...]",
    # "[W426 16:56:01.8 TCPStore.cpp:347]" (month not padded: 426 is April 26), abseil "I20260601 23:40:43"
    ("glog", re.compile(rf"(?:^|(?<=[\s\[\]:|]))[IWEF](\d{{3,4}}|\d{{8}}) {_T}(?=[\s\]]|$)")),
    # vLLM / SkyPilot: "ERROR 04-15 00:31:11 worker.py:574]", "I 09-12 22:49:49 controller.py:545]"
    (
        "level_md",
        re.compile(
            rf"(?:^|(?<=[\s\[(|]))(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|[IWEDF]) (\d{{2}})-(\d{{2}}) {_T}\s"
        ),
    ),
    # US dates at the start: PBS "04/18/2016 22:55:25;", TRT-LLM "[02/05/2026-06:58:48]", HTCondor
    # "07/27/11 19:42:50", detectron2 "[11/01 11:20:11 d2.utils.events]" (no year)
    ("us", re.compile(rf"^\s*\[?(\d{{2}})/(\d{{2}})(?:/(\d{{4}}|\d{{2}}))?[ -]{_T}(?=[\s;\]]|$)")),
    # a time of day alone, bracketed at the start: "[17:36:51] src/operator/..."
    ("clock", re.compile(rf"^\s*\[{_T}\]")),
    # the kernel's seconds since boot (dmesg, kern.log without a syslog stamp), or dmesg -d's delta:
    # recognised so that nothing later on the line is taken for its time, and left undated
    ("uptime", re.compile(r"^\s*\[\s*\+?\d{1,10}\.\d{1,9}\]")),
)

#: one day: a yearless stamp may be this far ahead of ``not_after`` (clocks of hosts differ a little)
_SLACK = 86400.0
_HALF_YEAR = 183 * 86400.0


def log_zone(value: str | None) -> str:
    """The zone stamps without one are read in: a rulebook's ``policy.log_timezone`` (the typed
    ``Policy.log_timezone``) when it names one, else DEFAULT_ZONE."""
    return value if isinstance(value, str) and check_zone(value) is None else DEFAULT_ZONE


@functools.lru_cache(maxsize=4096)
def _zone_offset(name: str, naive_minute: int) -> int:
    """Seconds east of UTC of the zone at this wall time. A wall time that happens twice (the
    night summer time ends) is its first, summer-time occurrence; one that never happens (the
    hour skipped when it starts) takes the offset from before the change (``fold=0``)."""
    wall = datetime(1970, 1, 1) + timedelta(seconds=naive_minute * 60)
    off = wall.replace(tzinfo=_zone(name)).utcoffset()
    return int(off.total_seconds()) if off is not None else 0


def _offset(text: str) -> int:
    """``+02:00``, ``-0530``, ``Z`` → seconds east of UTC."""
    if text in ("Z", "z"):
        return 0
    digits = text[1:].replace(":", "")
    return (1 if text[0] == "+" else -1) * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


def _valid(mo: int, d: int, h: int, mi: int, s: int) -> bool:
    return 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61


def _naive(y: int, mo: int, d: int, h: int, mi: int, s: int) -> int | None:
    """Whole seconds of these fields read as UTC, ``None`` if they are no time."""
    if not _valid(mo, d, h, mi, s):
        return None
    day = _day(y, mo, d)
    return None if day is None else day + h * 3600 + mi * 60 + s


@functools.lru_cache(maxsize=1024)
def _day(y: int, mo: int, d: int) -> int | None:
    """Seconds from the epoch to the start of this day (UTC), ``None`` if there is no such day."""
    try:
        if d > 28 and d > calendar.monthrange(y, mo)[1]:
            return None  # 30 Feb, or 29 Feb of a year that has none (timegm would roll it on)
        return calendar.timegm((y, mo, d, 0, 0, 0, 0, 0, 0))
    except (ValueError, OverflowError):
        return None


@functools.lru_cache(maxsize=256)
def _year_of_hour(hour: int) -> int:
    return datetime.fromtimestamp(hour * 3600, timezone.utc).year


def _year_of(t: int) -> int:
    """The UTC year of an instant (memoised by the hour: lines come in time order)."""
    return _year_of_hour(t // 3600)


def _frac(text: str | None) -> float:
    return int(text) / (10 ** len(text)) if text else 0.0


# ISO lines of one second share all but the fraction: their whole seconds are memoised by text
_ISO_MEMO: dict[Any, "tuple[int, int | None] | bool"] = {}


def _iso(fields: tuple[Any, ...]) -> "tuple[int, int | None] | bool":
    y, _sep, mo, d, h, mi, s, _f, tz = fields
    key = (y, mo, d, h, mi, s, tz)
    memo = _ISO_MEMO.get(key)
    if memo is None:
        t = _naive(int(y), int(mo), int(d), int(h), int(mi), int(s))
        memo = False if t is None else (t, None if tz is None else _offset(tz))
        if len(_ISO_MEMO) >= 4096:
            _ISO_MEMO.clear()
        _ISO_MEMO[key] = memo
    return memo


# every form in one pattern: one scan finds the leftmost stamp (at a position, the forms are tried
# in this order, ISO first); a line without a time of day ("HH:MM:SS") has no wall time at all
_ALL = re.compile("|".join(f"(?P<{name}>{rx.pattern})" for name, rx in (("iso", _ISO), *_FORMS)))
_GROUP = {name: _ALL.groupindex[name] for name, _ in (("iso", _ISO), *_FORMS)}
_FIELDS = {name: rx.groups for name, rx in (("iso", _ISO), *_FORMS)}
_A_TIME = re.compile(r"\d\d:\d\d:\d\d")
_BSD, _GLOG = dict(_FORMS)["bsd"], dict(_FORMS)["glog"]
_RANK = re.compile(r"\[rank\d{1,6}\]:\[?")


def _leftmost(head: str) -> tuple[str, tuple[Any, ...]] | None:
    """(form, its fields) of the leftmost stamp in ``head``, or ``None``."""
    # the common heads first, each where nothing can start before it: ISO ("2026-...",
    # "[2026-..."), syslog and glog at the start, PyTorch's "[rank0]:[E1201 ..."
    m = _ISO.match(head) or _ISO.match(head, 1)
    if m is not None and (m.start() == 0 or head[0] in " [("):
        return "iso", m.groups()
    if head[:5] == "[rank":
        r = _RANK.match(head)
        m = _GLOG.match(head, r.end()) if r is not None else None
        if m is not None:
            return "glog", m.groups()
    else:
        m = _BSD.match(head)
        if m is not None:
            return "bsd", m.groups()
        m = _GLOG.match(head)
        if m is not None:
            return "glog", m.groups()
    if _A_TIME.search(head) is None:
        return None  # no time of day: only an uptime stamp could be there, and it dates nothing
    m = _ALL.search(head)
    if m is None:
        return None
    name = m.lastgroup
    assert name is not None
    first = _GROUP[name] + 1
    return name, m.group(*range(first, first + _FIELDS[name]))


@dataclass
class LineClock:
    """Dates the lines of one stream (a file, a kernel log), in the order they are read.

    ``zone``: where stamps without a zone are wall time (``policy.log_timezone``). ``year``: the
    year of a yearless stamp when nothing dated comes before it. ``not_after``: when the stream
    was last written (a file's mtime, the time of reading), which puts a yearless first stamp in
    the latest year that is not more than a day after it. ``ref``: the time of the last dated
    line, kept here.
    """

    zone: str = DEFAULT_ZONE
    year: int | None = None
    not_after: float | None = None
    ref: float | None = None

    def time(self, line: str) -> float | None:
        """Seconds since the epoch the line's stamp says, or ``None`` when it has none."""
        t = self._read(line[:HEAD])
        if t is not None:
            self.ref = t
        return t

    def peek(self, line: str) -> float | None:
        """The line's time, leaving the stream's state as it was (for lines read out of order)."""
        return self._read(line[:HEAD])

    def _read(self, head: str) -> float | None:
        found = _leftmost(head)
        if found is None:
            return None
        form, g = found
        if form == "iso":
            memo = _iso(g)
            if not isinstance(memo, tuple):
                return None
            return self._zoned(memo[0], memo[1]) + _frac(g[7])
        if form == "uptime":
            return None
        if form == "clock":
            h, mi, s, frac = g
            return self._time_of_day(int(h), int(mi), int(s), frac)
        y: int | None
        off: int | None = None
        if form == "bsd":
            mon, d, h, mi, s, frac = g
            y, mo = None, MONTHS[mon]
        elif form == "ctime":
            mon, d, h, mi, s, frac, yr = g
            y, mo = (int(yr) if yr else None), MONTHS[mon]
        elif form == "rfc2822":
            d, mon, yr, h, mi, s, frac, tz = g
            y, mo, off = int(yr), MONTHS[mon], (_offset(tz) if tz else None)
        elif form == "glog":
            md, h, mi, s, frac = g
            if len(md) == 8:
                y, mo, d = int(md[:4]), int(md[4:6]), md[6:]
            else:
                y, mo, d = None, int(md[:-2]), md[-2:]
        elif form == "level_md":
            mo_s, d, h, mi, s, frac = g
            y, mo = None, int(mo_s)
        else:  # us
            mo_s, d, yr, h, mi, s, frac = g
            y, mo = (None if yr is None else int(yr) if len(yr) == 4 else 2000 + int(yr)), int(mo_s)
        return self._date(y, mo, int(d), int(h), int(mi), int(s), frac, off)

    def _zoned(self, whole: int, off: int | None) -> float:
        """Whole seconds read as UTC → the instant, by the stamp's own offset or the log zone's."""
        if off is None:
            off = 0 if self.zone == DEFAULT_ZONE else _zone_offset(self.zone, whole // 60)
        return float(whole - off)

    def _date(
        self, y: int | None, mo: int, d: int, h: int, mi: int, s: int, frac: str | None, off: int | None
    ) -> float | None:
        if not _valid(mo, d, h, mi, s):
            return None
        if y is None:
            y = self._year(mo, d, h, mi, s)
            if y is None:
                return None
        whole = _naive(y, mo, d, h, mi, s)
        if whole is None:
            return None
        return self._zoned(whole, off) + _frac(frac)

    def _year(self, mo: int, d: int, h: int, mi: int, s: int) -> int | None:
        """The year of a yearless stamp, from the input (see the module's docstring)."""
        ref = self.ref
        if ref is not None:
            base = _year_of(int(ref))
            t = _naive(base, mo, d, h, mi, s)
            if t is not None and abs(t - ref) <= _HALF_YEAR:
                return base  # nearly always: the same year as the line before
            best: tuple[float, int] | None = None
            for y in (base - 1, base, base + 1):
                t = _naive(y, mo, d, h, mi, s)
                if t is not None and (best is None or abs(t - ref) < best[0]):
                    best = (abs(t - ref), y)
            return None if best is None else best[1]
        if self.year is not None:
            return self.year
        if self.not_after is not None:
            try:
                base = datetime.fromtimestamp(self.not_after, timezone.utc).year
            except (OverflowError, OSError, ValueError):
                return None  # a file stamped in no year datetime knows
            for y in (base + 1, base, base - 1, base - 2, base - 3, base - 4):  # Feb 29 waits for a leap year
                t = _naive(y, mo, d, h, mi, s)
                if t is not None and t <= self.not_after + _SLACK:
                    return y
        return None

    def _time_of_day(self, h: int, mi: int, s: int, frac: str | None) -> float | None:
        if self.ref is None or not (h < 24 and mi < 60 and s < 61):
            return None
        # the day of the last dated line, in the log zone, or the one before or after it: the nearest
        local = self.ref + (0 if self.zone == DEFAULT_ZONE else _zone_offset(self.zone, int(self.ref) // 60))
        day = int(local // 86400) * 86400
        cands = [day + k * 86400 + h * 3600 + mi * 60 + s for k in (-1, 0, 1)]
        whole = min(cands, key=lambda t: abs(t - local))
        return self._zoned(whole, None) + _frac(frac)


def has_stamp(line: str) -> bool:
    """Whether the line carries a stamp that can date it (a kernel uptime stamp cannot)."""
    found = _leftmost(line[:HEAD])
    return found is not None and found[0] != "uptime"


def parse_line_time(line: str, year: int | None = None, zone: str = DEFAULT_ZONE) -> float | None:
    """The time of one line on its own (no stream before it): a yearless stamp takes ``year``
    and is undated without one; see ``LineClock`` for a stream's lines."""
    return LineClock(zone=zone, year=year).time(line)
