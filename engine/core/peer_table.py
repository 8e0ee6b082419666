"""Peers printed side by side: one of N like units far slower than the others, read from a job's
own tables (a per-rank timing table, a bandwidth matrix, a per-node dict on one line).

The matchers (``rules/10-matchers-job.yaml``, ``attrs: {table: ...}``) only find the parts of a
table; this module puts them together, per log file, and judges them:

- ``table: matrix`` — the title of a square matrix of one measurement between devices
  (``Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)``); its rows follow as ``table: row``
  hits (a device index, then one figure per device). Device k's figure is the median of its row
  and its column, the diagonal left out (a device's copy to itself is no link): one device
  whose every link is low has a low figure, while a topology (two sockets, NVLink pairs) lowers
  every device's row alike. A cell printed ``N/A`` (nvbandwidth's diagonal) is no link.
- ``table: header`` — the header of a per-unit table (``rank  data_time  step_time``): the
  first column names the units (``peer_col``), the others (``cols``) say what each figure is.
  A column whose name is a time (``time``, ``_s``, ``_ms``, ``latency``, ``elapsed``) is a cost;
  one whose name is a rate (``throughput``, ``speed``, ``bandwidth``, ``flops``, ``/s``) is
  turned into one (1 / rate). Other columns (counts, sizes, losses) are never compared, so a
  size column that grows by design says nothing. Its rows follow as ``table: row`` hits.
- ``table: dict`` — a whole ``{unit: figure, ...}`` on one line after a word that says what the
  figures are (``elapsed time``, ``throughput``).
- ``table: dicttitle`` — a title that says what the dicts below it hold (NVRx's "Relative
  section performance scores:"), group ``metric``; its ``table: dictrow`` hits (group ``peers``,
  ``0: 0.961, 1: 0.919, ...`` with or without a section's name and braces) follow as rows do,
  and each row is judged as a dict of that metric. A score (1.0 the best) is a rate. Its
  ``table: scorerow`` hits (groups ``peer``, ``score``: one unit a line, NeMo's "Rank=76
  Node=... Score=0.94") are gathered into one dict of the title, judged as it grows.
- ``table: minmax`` — one line that names the fastest and the slowest unit of one measurement
  (Megatron's StragglerDetector, ``MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0``: groups
  ``min``, ``min_peer``, ``max``, ``max_peer``, ``unit``): the worst unit is slow when its cost is
  ``table_factor`` x the best one's (a time also ``MIN_EXCESS_S`` more). Only the costs the
  matcher names (a round trip, a throughput), never a data-loading time of milliseconds.
- ``table: step`` — a figure printed at a step by units that do not say which they are
  (several workers' "Epoch[0] Batch [100]  Speed: 1326.73 samples/sec" lines in one log; groups
  ``step_key``, ``value``, ``unit``): the figures of one step are one measurement of the units.
  With at least ``STEP_GROUPS`` steps of ``min_peers`` + 1 figures (policy.straggler.min_peers),
  the worst figure of each step (their median over those steps) at ``table_factor`` x the median
  of the other figures, and at every step at least halfway to that factor x its step's others,
  is a straggler that cannot be named: a warm-up slow on every unit, or one slow step, is none. A
  single process never prints one step three times.
- ``table: line`` — one line that gives every unit's running figure in order (gpu-burn's
  "proc'd: 636 (2085 Gflop/s) - 612 (2070 Gflop/s) - ..."; group ``figures``): unit k is the
  k-th figure (``gpu0``, ``gpu1``...). After ``warmup`` lines, a unit whose figure is
  ``table_factor`` x worse than the median of the others' on ``slow_points`` lines in a row
  (with ``table_min_peers`` others) is slow; a figure of 0 (a unit not running) is no figure.
- ``table: pair`` — one figure measured between two hosts, a row a pair (nccl-tests run on each
  pair of nodes: "se02gn644,se02gn699  49.36"; groups ``host_a``, ``host_b``, ``value``,
  ``unit``). A figure with a unit of time is a cost; any other (GB/s, busbw, or none: a figure
  measured between two hosts is a link's) a rate. A host in at least ``PAIR_MIN`` pairs, every one
  of them at ``table_factor`` x the cost of the median pair it is not in (``table_min_peers`` such
  pairs at least), is slow: one slow pair (a link across a switch) names nobody, and a host whose
  partners are fast with others is the one both of its pairs share. Two hosts at the same ratio
  (the slow pair they share is the cheapest of each) go to the one printed first.

Rows belong to the table whose title or header came at most ``GAP`` lines before the first of
them, and each next row to the line after the previous one; any other row is no table's.

A table is one measurement of every unit, so its verdict needs no persistence: with at least
``policy.straggler.table_min_peers`` other units, the unit whose cost is at least
``policy.straggler.table_factor`` x the median of the others' (a rate at most 1/factor of
theirs) is slow at once, reported once per table. A time must also exceed the others' median by
``MIN_EXCESS_S`` (columns named ``_ms``/``_us`` are scaled), so that milliseconds of noise in a
data-loading column is never a straggler. The conclusion is a ``slow_node`` fact with
``scope: job`` and a ``peer`` (the unit as printed), and never a ``node``: the job's text does
not place the slow unit on a node (DESIGN.md, "who may say what").

Table parts are never sampled out like heartbeats (``StreamFacts``), so a table is read whole.
Pure and bounded: at most ``MAX_ROWS`` rows per table, ``MAX_COLS`` figures per row, one open
table per file.
"""

from __future__ import annotations

import bisect
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from engine.facts import Fact

__all__ = ["PeerTables", "outlier", "unit_cost"]

STEP_GROUPS = 2  # steps whose worst figure must be far from the others' (anonymous units)
MAX_STEPS = 8  # steps of one way of printing kept per file
GAP = 3  # lines between a table's title or header and its first row (a column header, a rule)
MAX_ROWS = 256
MAX_COLS = 64
MIN_EXCESS_S = 0.05
PAIR_MIN = 2  # pairs a host must be in, all slow, to be the slow one of a pair table

_CELL = re.compile(r"-?\d+(?:\.\d+)?|N/A")  # a figure, or no figure where one is expected (a diagonal)
_LINE_FIGURE = re.compile(r"\((\d+(?:\.\d+)?)\s*([GT])flop/s\)", re.IGNORECASE)  # gpu-burn's per-GPU figures
_DICT_ITEM = re.compile(r"""['"]?([\w.:-]{1,64})['"]?\s*:\s*(\d+(?:\.\d+)?)""")
_TIME_COL = re.compile(r"(?:time|_s$|_sec$|_secs$|_ms$|_us$|latency|elapsed|duration|\(s\)|\(ms\)|\(us\)|\bsec\b)")
_RATE_COL = re.compile(r"(?:throughput|speed|bandwidth|\bbw\b|_bw$|flops|/s\b|per_s|per_sec|samples|tokens)")
_RATE_WORD = re.compile(r"(?:throughput|speed|bandwidth|flops|/s\b|per sec|per_s|score)", re.IGNORECASE)

#: a unit as printed -> (scale to seconds, or -1 for a rate turned into 1 / rate)
_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "ms": 1e-3,
    "msec": 1e-3,
    "us": 1e-6,
    "usec": 1e-6,
    "min": 60.0,
}


def unit_cost(value: float, unit: str) -> float | None:
    """A figure and its unit as a cost (larger is slower, seconds where it is a time); None when
    the unit is neither a time nor a rate."""
    if value <= 0:
        return None
    u = unit.strip().lower()
    scale = _UNITS.get(u)
    if scale is not None:
        return value * scale
    if "/" in u or "flop" in u or u.endswith("ps"):
        return 1.0 / value
    return None


def outlier(
    costs: dict[str, float], factor: float, min_peers: int, time_scale: float | None
) -> tuple[str, float, float] | None:
    """The unit whose cost is at least ``factor`` x the median of the others' (``min_peers``
    others at least): (unit, ratio, the others' median), the worst such unit; None if none.
    ``time_scale`` (seconds per printed unit) is given for times, whose excess must also be
    ``MIN_EXCESS_S`` or more; None for rates."""
    if len(costs) < min_peers + 1:
        return None
    ordered = sorted(costs.values())
    n = len(ordered)
    best: tuple[str, float, float] | None = None
    for who, c in costs.items():
        # the median of the others: the sorted list without one copy of c
        i = ordered.index(c)
        rest = ordered[:i] + ordered[i + 1 :]
        typical = statistics.median(rest) if n > 1 else 0.0
        if typical <= 0 or c < factor * typical:
            continue
        if time_scale is not None and (c - typical) * time_scale < MIN_EXCESS_S:
            continue
        ratio = c / typical
        if best is None or ratio > best[1]:
            best = (who, ratio, typical)
    return best


@dataclass
class _Table:
    kind: str  # matrix | header | dict | pair
    path: str
    line: int  # the line of the title/header, then of the last row
    rate: bool = False  # matrix: its figures are rates
    cols: list[tuple[int, bool, float]] = field(default_factory=list)  # header: (cell index, rate, scale)
    ncols: int = 0  # header: the figures a row has
    rows: dict[str, list[float | None]] = field(default_factory=dict)  # None: a cell printed N/A
    metric: str = ""  # dict: what its rows' figures are (the title)
    hosts: dict[str, dict[str, float]] = field(default_factory=dict)  # pair: host -> its pairs' costs
    ordered: list[float] = field(default_factory=list)  # pair: every pair's cost, in order (one a pair)
    reported: bool = False


class PeerTables:
    """The open table of each file (job, attempt, path), and the verdict on it."""

    def __init__(self, factor: float, min_peers: int, min_steps_peers: int = 2, warmup: int = 3, slow_points: int = 3):
        self.factor = factor
        self.min_peers = min_peers
        self.min_steps_peers = min_steps_peers  # others at one step (policy.straggler.min_peers)
        self.warmup = warmup  # lines of a `line` table never judged (policy.straggler.warmup)
        self.slow_points = slow_points  # its slow lines in a row (policy.straggler.slow_points)
        #: (job, attempt, path, matcher) -> [lines seen, {unit: slow lines in a row}, reported]
        self._lines: dict[tuple[str, int, str, str], list[Any]] = {}
        self._open: dict[tuple[str, int, str], _Table] = {}
        #: (job, attempt, path, matcher) -> step -> the costs printed at it (anonymous units)
        self._steps: dict[tuple[str, int, str, str], dict[str, list[float]]] = {}
        self._steps_reported: set[tuple[str, int, str, str]] = set()

    def observe(self, job: str, attempt: int, fact: Fact) -> list[Fact]:
        kind = fact.get("table")
        path, line = _where(fact.origin)
        key = (job, attempt, path)
        if kind == "dict":
            return self._dict(job, attempt, fact)
        if kind == "minmax":
            return self._minmax(job, attempt, fact)
        if kind == "line":
            return self._line(job, attempt, (job, attempt, path, str(fact.get("matcher") or "-")), fact)
        if kind == "step":
            return self._step(job, attempt, (job, attempt, path, str(fact.get("matcher") or "-")), fact)
        if kind == "pair":
            return self._pair(job, attempt, key, line, fact)
        if kind == "dicttitle":
            self._open[key] = _Table("dict", path, line, metric=str(fact.get("metric") or ""))
            return []
        if kind == "scorerow":
            return self._score_row(job, attempt, key, line, fact)
        if kind == "dictrow":
            t = self._dict_row(key, line, 1)  # one dict a line, with no line between them
            if t is None:
                return []
            t.rows[str(len(t.rows))] = []
            if t.reported:
                return []
            out = self._dict(job, attempt, fact, t.metric)
            t.reported = bool(out)
            return out
        if kind == "matrix":
            unit = str(fact.get("unit") or "")
            self._open[key] = _Table("matrix", path, line, rate="/" in unit)
            return []
        if kind == "header":
            cols = _columns(str(fact.get("cols") or ""))
            if cols:
                self._open[key] = _Table("header", path, line, cols=cols, ncols=len(str(fact.get("cols")).split()))
            else:
                self._open.pop(key, None)
            return []
        if kind != "row":
            return []
        t = self._open.get(key)
        if t is None:
            return []
        gap = line - t.line
        if gap <= 0 or gap > (GAP if not t.rows else 1) or len(t.rows) >= MAX_ROWS:
            self._open.pop(key, None)  # the table ended before this row
            return []
        t.line = line
        cells = _cells(str(fact.get("cells") or fact.get("cell1") or ""))
        peer = str(fact.get("peer") or fact.get("peer1"))
        if t.kind == "header" and len(cells) != t.ncols:
            self._open.pop(key, None)
            return []
        t.rows[peer] = cells
        if t.reported:
            return []
        found = self._matrix(t) if t.kind == "matrix" else self._columns_of(t)
        if found is None:
            return []
        t.reported = True
        who, ratio, typical, what = found
        return [_slow(job, attempt, fact, who, ratio, typical, len(t.rows), what)]

    def _matrix(self, t: _Table) -> tuple[str, float, float, str] | None:
        """Device k's figure: the median of its row and column without the diagonal; judged once
        the matrix is square."""
        n = len(next(iter(t.rows.values())))
        if len(t.rows) != n or n < self.min_peers + 1 or not t.rate:
            return None
        rows = list(t.rows.items())
        if any(len(cells) != n for _, cells in rows):
            return None
        costs: dict[str, float] = {}
        for k, (who, cells) in enumerate(rows):
            out_links = [cells[j] for j in range(n) if j != k]
            in_links = [rows[i][1][k] for i in range(n) if i != k]
            links = [x for x in out_links + in_links if x is not None]
            if not links:
                return None
            figure = statistics.median(links)
            if figure <= 0:
                return None
            costs[who] = 1.0 / figure
        found = outlier(costs, self.factor, self.min_peers, None)
        if found is None:
            return None
        who, ratio, typical = found
        return who, ratio, typical, "bandwidth matrix: every link of one device"

    def _columns_of(self, t: _Table) -> tuple[str, float, float, str] | None:
        for index, rate, scale in t.cols:
            costs: dict[str, float] = {}
            for who, cells in t.rows.items():
                v = cells[index]
                if v is not None and v > 0:
                    costs[who] = 1.0 / v if rate else v
            found = outlier(costs, self.factor, self.min_peers, None if rate else scale)
            if found is not None:
                return (*found, f"per-unit table, column {index + 1}")
        return None

    def _dict(self, job: str, attempt: int, fact: Fact, metric: str | None = None) -> list[Fact]:
        metric = str(fact.get("metric") or "") if metric is None else metric
        rate = bool(_RATE_WORD.search(metric))
        costs: dict[str, float] = {}
        for who, v in _DICT_ITEM.findall(str(fact.get("peers") or ""))[:MAX_ROWS]:
            x = float(v)
            if x > 0:
                costs[who] = 1.0 / x if rate else x
        found = outlier(costs, self.factor, self.min_peers, None if rate else 1.0)
        if found is None:
            return []
        who, ratio, typical = found
        return [_slow(job, attempt, fact, who, ratio, typical, len(costs), f"one line of {metric.strip()} per unit")]

    def _dict_row(self, key: tuple[str, int, str], line: int, row_gap: int) -> _Table | None:
        """The open dict table a row at ``line`` belongs to (its first row at most ``GAP`` lines
        after the title, each later one at most ``row_gap`` after the row before; under
        ``MAX_ROWS`` rows), moved on to that line; None, and a table too far or too long closed,
        when there is none. Shared by the ``dictrow`` and ``scorerow`` kinds."""
        t = self._open.get(key)
        if t is None or t.kind != "dict":
            return None
        gap = line - t.line
        if gap <= 0 or gap > (row_gap if t.rows else GAP) or len(t.rows) >= MAX_ROWS:
            self._open.pop(key, None)
            return None
        t.line = line
        return t

    def _score_row(self, job: str, attempt: int, key: tuple[str, int, str], line: int, fact: Fact) -> list[Fact]:
        """One unit's score on a line of its own under a title (``Rank=76 Node=... Score=0.94``,
        NVRx's worst and best ranks as NeMo prints them): the rows so far are one dict of rates.
        A row may be up to ``GAP`` lines after the previous one (the "Best performing" line)."""
        t = self._dict_row(key, line, GAP)
        if t is None:
            return []
        score = _figure(fact.get("score"))
        if score is None or score <= 0:
            return []
        t.rows[str(fact.get("peer") or len(t.rows))[:64]] = [score]
        if t.reported:
            return []
        costs = {who: 1.0 / float(cells[0] or 1.0) for who, cells in t.rows.items()}
        found = outlier(costs, self.factor, self.min_peers, None)
        if found is None:
            return []
        t.reported = True
        who, ratio, typical = found
        return [_slow(job, attempt, fact, who, ratio, typical, len(costs), f"{t.metric.strip()}: one score per unit")]

    def _pair(self, job: str, attempt: int, key: tuple[str, int, str], line: int, fact: Fact) -> list[Fact]:
        """A figure measured between two hosts, one pair a row (rows at most ``GAP`` lines apart):
        the host all of whose ``PAIR_MIN`` or more pairs are slow against the pairs it is not in.
        Kept as it grows (each host's pairs, every figure in order), so a row costs one pass over
        the hosts, not over every pair for every host."""
        a, b = str(fact.get("host_a") or "")[:64], str(fact.get("host_b") or "")[:64]
        value, unit = _figure(fact.get("value")), str(fact.get("unit") or "")
        if not a or not b or a == b or value is None or value <= 0:
            return []
        t = self._open.get(key)
        if t is None or t.kind != "pair" or not 0 < line - t.line <= GAP or len(t.ordered) >= MAX_ROWS:
            t = self._open[key] = _Table("pair", path=key[2], line=line)
        t.line = line
        cost = value if _is_time_unit(unit) else 1.0 / value
        pair_key = f"{a}\t{b}"
        before = t.hosts.get(a, {}).get(pair_key)
        if before is not None:  # the same pair printed again: its new figure replaces the old
            t.ordered.pop(bisect.bisect_left(t.ordered, before))
        bisect.insort(t.ordered, cost)
        t.hosts.setdefault(a, {})[pair_key] = cost
        t.hosts.setdefault(b, {})[pair_key] = cost
        if t.reported:
            return []
        worst = self._slow_host(t, unit)
        if worst is None:
            return []
        t.reported = True
        who, ratio, typical = worst
        apart = len(t.ordered) - len(t.hosts[who])
        what = f"every pair of hosts it is in, against the {apart} pairs it is not in"
        return [_slow(job, attempt, fact, who, ratio, typical, len(t.ordered), what)]

    def _slow_host(self, t: _Table, unit: str) -> tuple[str, float, float] | None:
        """The host of a pair table whose cheapest pair costs ``factor`` x the median of the pairs
        it is not in, the worst such host. The pairs a host is not in are the table without its
        own, so the k-th cheapest of them costs at least the k-th cheapest of the table: a host
        whose cheapest pair is under ``factor`` x that bound is passed over without the median."""
        n = len(t.ordered)
        scale = _UNITS.get(unit.strip().lower())
        worst: tuple[str, float, float] | None = None
        for host, pairs in t.hosts.items():
            rest_n = n - len(pairs)
            if len(pairs) < PAIR_MIN or rest_n < self.min_peers:
                continue
            cheapest = min(pairs.values())
            if cheapest < self.factor * t.ordered[(rest_n - 1) // 2]:
                continue
            rest = list(t.ordered)
            for c in pairs.values():
                rest.pop(bisect.bisect_left(rest, c))
            typical = statistics.median(rest)
            if typical <= 0 or cheapest < self.factor * typical:
                continue
            if scale is not None and (cheapest - typical) * scale < MIN_EXCESS_S:
                continue
            if worst is None or cheapest / typical > worst[1]:
                worst = (host, cheapest / typical, typical)
        return worst

    def _minmax(self, job: str, attempt: int, fact: Fact) -> list[Fact]:
        """The best and the worst unit of one measurement on one line: the worst is slow at
        ``factor`` x the best's cost."""
        unit = str(fact.get("unit") or "")
        best, worst = _figure(fact.get("min")), _figure(fact.get("max"))
        if best is None or worst is None:
            return []
        slow_peer = str(fact.get("max_peer") or "")
        if not _is_time_unit(unit):
            # a rate: the lowest figure is the slowest unit
            best, worst, slow_peer = worst, best, str(fact.get("min_peer") or "")
        c_best, c_worst = unit_cost(best, unit), unit_cost(worst, unit)
        if c_best is None or c_worst is None or not slow_peer or c_worst < self.factor * c_best:
            return []
        if _is_time_unit(unit) and (c_worst - c_best) < MIN_EXCESS_S:
            return []
        what = f"the slowest of all units against the fastest ({unit})"
        return [_slow(job, attempt, fact, slow_peer, c_worst / c_best, c_best, 2, what)]

    def _step(self, job: str, attempt: int, key: tuple[str, int, str, str], fact: Fact) -> list[Fact]:
        """Figures of units that do not name themselves, grouped by the step they were printed at."""
        unit = str(fact.get("unit") or "")
        value = _figure(fact.get("value"))
        cost = unit_cost(value, unit) if value is not None else None
        step = str(fact.get("step_key") or "")
        if cost is None or not step or key in self._steps_reported:
            return []
        steps = self._steps.setdefault(key, {})
        if step not in steps and len(steps) >= MAX_STEPS:
            del steps[next(iter(steps))]  # the oldest step
        figures = steps.setdefault(step, [])
        if len(figures) >= MAX_ROWS:
            return []
        figures.append(cost)
        full = [sorted(f) for f in steps.values() if len(f) >= self.min_steps_peers + 1]
        if len(full) < STEP_GROUPS:
            return []
        worst = statistics.median([f[-1] for f in full])
        typical = statistics.median([c for f in full for c in f[:-1]])
        if typical <= 0 or worst < self.factor * typical:
            return []
        # slow at every step, not one step's hiccup averaged in: each step's worst at least
        # halfway to factor x that step's others
        if any(f[-1] < (1 + (self.factor - 1) / 2) * statistics.median(f[:-1]) for f in full):
            return []
        if _is_time_unit(unit) and (worst - typical) < MIN_EXCESS_S:
            return []
        self._steps_reported.add(key)
        what = f"the worst of each of {len(full)} steps printed by units that do not name themselves"
        return [_slow(job, attempt, fact, "unnamed", worst / typical, typical, len(full[-1]), what)]

    def _line(self, job: str, attempt: int, key: tuple[str, int, str, str], fact: Fact) -> list[Fact]:
        """Every unit's running figure on one line, in order: a unit slow against the others on
        ``slow_points`` lines in a row, after ``warmup`` lines."""
        state = self._lines.setdefault(key, [0, {}, False])
        if state[2]:
            return []
        state[0] += 1
        costs: dict[str, float] = {}
        for i, (value, scale) in enumerate(_LINE_FIGURE.findall(str(fact.get("figures") or ""))[:MAX_COLS]):
            v = float(value) * (1000.0 if scale.upper() == "T" else 1.0)
            if v > 0:
                costs[f"gpu{i}"] = 1.0 / v
        if state[0] <= self.warmup or len(costs) < self.min_peers + 1:
            return []
        runs: dict[str, int] = state[1]
        worst: tuple[str, float, float] | None = None
        for who, c in costs.items():
            typical = statistics.median([v for k, v in costs.items() if k != who])
            slow = typical > 0 and c >= self.factor * typical
            runs[who] = runs.get(who, 0) + 1 if slow else 0
            if slow and runs[who] >= max(1, self.slow_points) and (worst is None or c / typical > worst[1]):
                worst = (who, c / typical, typical)
        if worst is None:
            return []
        state[2] = True
        who, ratio, typical = worst
        what = f"one line of every unit's figure, slow on {runs[who]} lines in a row"
        return [_slow(job, attempt, fact, who, ratio, typical, len(costs), what)]

    def forget(self, job: str, attempt: int) -> None:
        for lkey in [k for k in self._lines if k[0] == job and k[1] == attempt]:
            del self._lines[lkey]
        for key in [k for k in self._open if k[0] == job and k[1] == attempt]:
            del self._open[key]
        for skey in [k for k in self._steps if k[0] == job and k[1] == attempt]:
            del self._steps[skey]
        self._steps_reported = {k for k in self._steps_reported if not (k[0] == job and k[1] == attempt)}


def _where(origin: str) -> tuple[str, int]:
    path, _, line = str(origin).rpartition(":")
    return (path, int(line)) if line.isdigit() else (str(origin), 0)


def _figure(value: object) -> float | None:
    """A group's figure as a float (None when absent or no number)."""
    try:
        return float(str(value)) if value is not None else None
    except ValueError:
        return None


def _is_time_unit(unit: str) -> bool:
    """Whether a printed unit is a time (``_UNITS``), not a rate."""
    return unit.strip().lower() in _UNITS


def _cells(text: str) -> list[float | None]:
    """A row's figures in order, None for a cell printed N/A (nvbandwidth's diagonal)."""
    return [None if x == "N/A" else float(x) for x in _CELL.findall(text)[:MAX_COLS]]


def _columns(text: str) -> list[tuple[int, bool, float]]:
    """The comparable columns of a header after its unit column: (index, is a rate, seconds per
    printed unit)."""
    out = []
    for i, name in enumerate(text.lower().split()[:MAX_COLS]):
        if _RATE_COL.search(name):
            out.append((i, True, 1.0))
        elif _TIME_COL.search(name):
            scale = 1e-3 if "ms" in name else 1e-6 if "us" in name.replace("bus", "") else 1.0
            out.append((i, False, scale))
    return out


def _slow(job: str, attempt: int, fact: Fact, who: str, ratio: float, typical: float, peers: int, what: str) -> Fact:
    matcher = fact.get("matcher") or "progress"
    attrs: dict[str, Any] = {
        "job": job,
        "attempt": attempt,
        "scope": "job",
        "peer": who[:64],
        "ratio": round(ratio, 3),
        "peer_step_time": round(typical, 6),
        "peers": peers,
        "matcher": matcher,
        "evidence": f"{matcher}: unit {who[:64]} at x{ratio:.2f} the cost of its {peers - 1} peers ({what})",
    }
    return Fact.make("slow_node", attrs, fact.at, "straggler-tracker")
