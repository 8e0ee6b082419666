r"""Multi-pattern scanning of log bytes: the hot path from raw log data to matcher hits.

A :class:`Scanner` is fed chunks of one byte stream, keeps the incomplete trailing line for the
next call and reports, for each complete line, every matcher whose regex is found in it. Most
lines match nothing, so a chunk is never walked line by line in Python: one engine call over
the whole buffer proposes candidate lines, and only those are looked at again.

Semantics, identical for every backend (the pattern dialect is ``engine.rulebook.patterns``'s):

* A line is the bytes before ``\n`` without one trailing ``\r``, cut to ``max_line`` bytes; a
  cut line is matched on that head. A matcher hits when its RE2 regex is found in the line;
  ``^ $ \A \z`` refer to the line. The truth is always RE2 on the line: buffer scans only
  propose candidates and must never miss one.
* Patterns work on bytes (RE2 Latin-1): ``.`` and classes match one byte and ``\w \d \s \b``
  are ASCII, so invalid UTF-8 never stops a match. A pattern with non-ASCII characters or
  ``\p{..}`` classes is compiled for UTF-8 instead and matches characters.

Backends:

* ``hyperscan`` (x86-64): the non-sampled patterns in one block-mode database. Its copy of a
  pattern drops ``^ $ \A \z`` (this build misses some multi-line anchor matches) and spells
  ``\s \S \v`` the RE2 way; reports are mapped to lines, deduplicated, and checked with RE2,
  which extracts the groups. Fallback, per pattern, to the RE2 path (logged at INFO): UTF-8
  patterns, ``\C``, ``{,n}``, numeric escapes under ignore-case, and anything hyperscan fails
  to compile, e.g. ``(?U)``. After ``_STORM`` (65536) reports in one call the scan stops, the
  line it stopped in is checked with RE2, and the scan resumes after it.
* ``re2`` (portable): per encoding, one alternation searched over the buffer in multi-line
  mode; an ``re2.Set`` says which patterns hit each candidate line; the search resumes at the
  next line.
* ``auto``: hyperscan when it imports and compiles, else re2.

Sampled matchers are searched over windows that tile the buffer from its end (16 KiB, then 4x
larger) until a line really matches: no callback per heartbeat line. Patterns that can match a
cut head but not the whole line (``$ \z \b \B``, UTF-8) are also checked on each cut head.

A Scanner is not thread-safe; ``clone()`` gives another stream its own, which may run in another
thread. ``scanner_for(compiled, source)`` is the one place scanners of a rulebook are made: the
patterns are compiled once per rulebook and source kind, and each stream gets a clone.
"""

from __future__ import annotations

import logging
import operator
import threading
import weakref
from typing import TYPE_CHECKING, Any, Sequence

import re2

from engine.core.blockscan import block_records, blocks
from engine.core.heads import head_records, long_lines
from engine.core.hsdb import block_database, hyperscan_databases, log_fallback, sampled_database
from engine.core.matching import CompiledSpec, Hit, MatcherSpec, Re2Group, hs
from engine.rulebook.patterns import DIGITS_TO_ZERO, re2_options

if TYPE_CHECKING:
    from engine.rulebook.compile import CompiledRulebook

logger = logging.getLogger(__name__)

__all__ = ["Scanner", "scanner_for", "matchers_for", "matcher_specs"]

_WINDOW = 16 * 1024  # first tail window for sampled matchers; grows x4
_STORM = 1 << 16  # hyperscan reports in one call before the scan stops and resumes after the line
_MEMO_MAX = 8192  # (matcher, line with digits masked) -> RE2's answer, per template and its clones
_MEMO_LINE = 2048  # longer lines are always matched afresh
_LINE_SPEC = operator.itemgetter(0, 1)  # records in line, then spec order


class Scanner:
    """Stateful multi-pattern scanner over one byte stream; see the module docstring."""

    #: what a clone shares with its template: the compiled patterns, read-only once built, and
    #: the memo (a pure function of the patterns; one dict get or set is atomic). Everything
    #: else is the stream's own and is set by ``_new_stream``.
    _SHARED = (
        "specs",
        "max_line",
        "_cap",
        "_c",
        "_memo",
        "_digit_insensitive",
        "_hs_main",
        "_hs_sampled",
        "_hs_lazy",
        "_hs_made",
        "_block",
        "_block_set",
        "_single",
        "backend",
        "hyperscan_specs",
        "_groups",
        "_re2_sampled",
        "_sampled",
        "_cut_sensitive",
        "_in_main",
        "_hs_proto",
        "derived",
    )

    def __init__(self, specs: Sequence[MatcherSpec], backend: str = "auto", max_line: int = 65536):
        if backend not in ("auto", "hyperscan", "re2"):
            raise ValueError(f"unknown backend {backend!r}: use auto, hyperscan or re2")
        if max_line < 1:
            raise ValueError("max_line must be at least 1")
        if backend == "hyperscan" and hs is None:
            raise ValueError("backend 'hyperscan' requested but the hyperscan module is missing")
        self.specs = tuple(specs)
        self.max_line = int(max_line)
        self._cap = self.max_line + 2  # bytes of a pending line kept: enough to judge the cut
        self._c = [CompiledSpec(i, s) for i, s in enumerate(self.specs)]
        # RE2's answer (spans or None) per (matcher, line with digits masked), for
        # digit-insensitive matchers: a flood's repeats are not matched again. Shared with the
        # clones (see _SHARED), so its bound is per rulebook and source kind, not per file.
        self._memo: dict[tuple[int, bytes], object] = {}
        self._digit_insensitive = [c.digit_insensitive for c in self._c]

        self._hs_main: Any = None  # one database: every non-sampled pattern hyperscan takes
        #: sampled or block spec -> its own database, made on its first search (``_sampled_db``)
        self._hs_sampled: dict[int, Any] = {}
        self._hs_lazy: dict[int, int] = {}  # sampled or block spec -> the flags of its own database
        #: "block": the block specs' single-match database, made on the first block scan
        #: (``_block_db``; False: hyperscan refused it)
        self._hs_made: dict[str, Any] = {}
        on_hs: set[int] = set()
        in_main: set[int] = set()
        blocked: set[int] = set()
        if backend in ("auto", "hyperscan") and hs is not None:
            self._hs_main, self._hs_lazy, on_hs, in_main, blocked = hyperscan_databases(
                self._c, strict=backend == "hyperscan"
            )
            # a block spec is sampled only in the main database; else it is matched as any other
            on_hs = {i for i in on_hs if i in in_main or self._c[i].spec.sample}
        self.backend = "hyperscan" if on_hs else "re2"
        self.hyperscan_specs = frozenset(on_hs)  # indexes matched by hyperscan (for reports)
        rest = [c for c in self._c if c.idx not in on_hs]
        self._groups = [
            Re2Group(m, utf8)
            for utf8 in (False, True)
            if (m := [c for c in rest if not c.spec.sample and c.utf8 == utf8])
        ]
        self._re2_sampled = {c.idx: c for c in rest if c.spec.sample}
        for c in self._re2_sampled.values():
            c.buf_rx = re2.compile(c.buffer_source(), re2_options(c.utf8))
        self._sampled = [c.idx for c in self._c if c.spec.sample]
        # progress specs sampled per block (engine.core.blockscan); on the RE2 path every line
        self._block = [c.idx for c in self._c if c.spec.block and c.idx in in_main and c.idx in blocked]
        self._block_set = frozenset(self._block)
        # specs in the main database in single-match mode: sampled ones report whether they occur
        self._single = frozenset(self._block) | {i for i in in_main if self._c[i].spec.sample}
        self._cut_sensitive = [c for c in self._c if c.cut_sensitive]
        self._in_main = frozenset(in_main)  # specs of the main database (engine.core.heads)
        # each stream's scratch is cloned from this one, never scanned with (~0.02 ms; a new one ~0.5)
        self._hs_proto = hs.Scratch(self._hs_main) if self._hs_main is not None else None
        self.derived: dict[Any, Any] = {}  # readers' tables, shared by the clones (linefacts._tables)
        self._new_stream()

    def _new_stream(self) -> None:
        """The state of one stream, at its start: counters, position, pending line, and hyperscan
        scratch space (a scan writes it: two scans at once must never share one)."""
        self.lines_seen = 0
        self.long_lines_cut = 0
        self.bytes_seen = 0
        self.reset(0, 0)
        self._hs_scratch = self._hs_proto.clone() if self._hs_proto is not None else None
        # made on first use: most streams never search most sampled or block specs alone
        self._hs_sampled_scratch: dict[int, Any] = {}
        self._hs_block_scratch: Any = None
        #: bytes of a block of progress lines (engine.core.blockscan); 0: every line is reported
        self.block = 0

    def clone(self) -> Scanner:
        """A scanner of the same compiled patterns at the start of a new stream: it shares what
        ``_SHARED`` names and has its own stream state and scratch, so it may be used in another
        thread than this one. Costs microseconds; compiling the patterns costs up to a second."""
        twin = object.__new__(Scanner)
        for name in self._SHARED:
            setattr(twin, name, getattr(self, name))
        twin._new_stream()
        return twin

    # -- public API ---------------------------------------------------------------------------

    @property
    def position(self) -> tuple[int, int]:
        """(byte offset, lines consumed) of the first byte not yet consumed.

        The offset is where the pending partial line starts; the next complete line will be
        number ``lines consumed + 1``. ``reset(*position)`` on a new Scanner resumes there.
        """
        return self._off, self._lines

    @property
    def pending(self) -> int:
        """Bytes of the incomplete last line held back: the next chunk starts this far past ``position``."""
        return self._pend_total

    def group_names(self, index: int) -> tuple[str, ...]:
        """The named groups of spec ``index``."""
        return tuple(self._c[index].index)

    def reset(self, offset: int = 0, line_no: int = 0) -> None:
        """Forget the pending line and resume at a known position (see ``position``)."""
        self._off = int(offset)
        self._lines = int(line_no)
        self._pend = bytearray()
        self._pend_total = 0

    def feed(self, data: bytes) -> list[Hit]:
        """Consume ``data``; return the hits of the lines it completes, in line then spec order."""
        if not data:
            return []
        if not isinstance(data, bytes):
            data = bytes(data)
        self.bytes_seen += len(data)
        nl = data.rfind(b"\n")
        if nl < 0:
            self._keep(data)
            return []
        # parts: (buffer, lo, hi, stream offset of buffer[0], lines before buffer[lo])
        parts: list[tuple[bytes, int, int, int, int]] = []
        start = 0
        if self._pend_total:  # the pending line ends in this chunk: join just that line
            f = data.find(b"\n")
            line = b"".join((self._pend, memoryview(data)[: f + 1]))
            parts.append((line, 0, len(line), self._off, self._lines))
            start = f + 1
        data_off = self._off + self._pend_total
        if start <= nl:  # the rest is scanned in place, without a copy
            parts.append((data, start, nl + 1, data_off, self._lines + len(parts)))
        hits, nlines = self._scan(parts)
        self._off = data_off + nl + 1
        self._lines += nlines
        self.lines_seen += nlines
        self._pend = bytearray()
        self._pend_total = 0
        if nl + 1 < len(data):
            self._keep(memoryview(data)[nl + 1 :])
        return hits

    def flush(self) -> list[Hit]:
        """End of stream: scan the pending partial line, if any, as a last line."""
        if self._pend_total == 0:
            return []
        line = bytes(self._pend) + b"\n"
        hits, _ = self._scan([(line, 0, len(line), self._off, self._lines)])
        self._off += self._pend_total
        self._lines += 1
        self.lines_seen += 1
        self._pend = bytearray()
        self._pend_total = 0
        return hits

    # -- internals ------------------------------------------------------------------------

    def _keep(self, data) -> None:
        room = self._cap - len(self._pend)
        if room > 0:
            self._pend += data[:room]
        self._pend_total += len(data)

    def _scan(self, parts) -> tuple[list[Hit], int]:
        """Hits of the complete lines of each part, and the number of lines in the parts."""
        per_part = []
        sampled_owner: dict[int, int] = {}  # sampled spec -> index of the last part that has it
        for k, (buf, lo, hi, _, _) in enumerate(parts):
            records, sampled, trunc = self._scan_part(buf, lo, hi)
            per_part.append((records, sampled, trunc))
            for idx in sampled:
                sampled_owner[idx] = k
        hits: list[Hit] = []
        total = 0
        for k, ((buf, lo, hi, base_off, base_line), (records, sampled, trunc)) in enumerate(zip(parts, per_part)):
            for idx, (ls, text, m) in sampled.items():
                if sampled_owner[idx] == k:
                    records.append((ls, idx, text, m, None))
            records.sort(key=_LINE_SPEC)
            count = buf.count
            cs = self._c
            add, new = hits.append, Hit.__new__
            prev, nlines = lo, 0
            for ls, idx, text, m, masked in records:
                nlines += count(b"\n", prev, ls)
                prev = ls
                c = cs[idx]
                if masked is None and c.digit_insensitive:
                    masked = text.translate(DIGITS_TO_ZERO)
                h = new(Hit)  # set here, not in __init__: this loop runs once per hit; groups decoded on use
                h.matcher, h.line, h.line_no, h.offset, h.truncated, h.blank = (
                    idx,
                    text,
                    base_line + 1 + nlines,
                    base_off + ls,
                    ls in trunc,
                    masked,
                )
                h._c, h._spans, h._groups = c, m, None if m is not None and c.has_groups else {}
                add(h)
            total += nlines + count(b"\n", prev, hi)
        return hits, total

    def _scan_part(self, buf: bytes, lo: int, hi: int):
        """Records (line start, spec, line, match) of buf[lo:hi], the last line of each sampled
        spec, and the cut lines."""
        trunc = long_lines(self, buf, lo, hi)
        ml = self.max_line

        def line_at(ls: int, le: int) -> bytes:
            if ls in trunc:
                return buf[ls : ls + ml]
            if le > ls and buf[le - 1] == 13:
                le -= 1
            return buf[ls:le]

        records: list[tuple] = []
        proposed: list[tuple[int, int]] = []  # (line, spec) of the single-match specs' reports
        cuts = None
        if self._hs_main is not None:
            if self.block > 0 and self._block:  # a call per block: its first progress line
                cuts = blocks(buf, lo, hi, self.block)
                for b0, b1 in zip([lo, *cuts], cuts):
                    self._hs_scan(buf, b0, b1, trunc, records, proposed)
            else:
                self._hs_scan(buf, lo, hi, trunc, records, proposed)
        for g in self._groups:
            self._re2_scan(g, buf, lo, hi, line_at, records)
        floors = dict.fromkeys(self._sampled, lo)
        tails: dict[int, tuple] = {}
        if trunc and self._cut_sensitive:
            # a head can match where the whole line does not ($, \b at the cut): check heads directly
            head_records(self, buf, trunc, records, tails, floors)
        if self._single:
            if self._block:
                block_records(self, buf, lo, hi, line_at, records, proposed, cuts)
            # a sampled spec that occurs nowhere in the part has no last line to look for
            present = {i for _, i in proposed}
            floors = {i: f for i, f in floors.items() if i in present or i not in self._single}
        sampled: dict[int, tuple] = {}
        if floors:
            self._last_sampled(buf, lo, hi, floors, line_at, sampled)
        for idx, rec in tails.items():
            if idx not in sampled or sampled[idx][0] < rec[0]:
                sampled[idx] = rec
        return records, sampled, trunc

    def _hs_scan(self, buf: bytes, lo: int, hi: int, trunc: dict[int, int], records: list, proposed: list) -> None:
        """One hyperscan call over buf[lo:hi] (more only after a storm of reports on one line).
        The reports of single-match specs go to ``proposed``; a sampled one's stop there."""
        rx = [c.search for c in self._c]
        single, sampled = self._single, self._single - self._block_set
        insensitive, memo = self._digit_insensitive, self._memo
        rfind, find = buf.rfind, buf.find
        ml = self.max_line
        masked = None
        pos = lo
        while pos < hi:
            ends: list[tuple[int, int]] = []
            add = ends.append

            # hyperscan calls it only inside this pass's scan, so the pass's own list is the one
            def on_match(ident, _from, to, _flags, _ctx):
                add((to, ident))  # noqa: B023
                return len(ends) >= _STORM  # noqa: B023 -- stop; the line is then checked with RE2

            view = buf if pos == 0 and hi == len(buf) else memoryview(buf)[pos:hi]
            stopped = False
            try:
                self._hs_main.scan(view, match_event_handler=on_match, scratch=self._hs_scratch)
            except hs.ScanTerminated:
                stopped = True
            ends.sort()
            ls = le = -1
            text = b""
            last = None
            for report in ends:
                if report == last:
                    continue  # (a pattern reports a line once: its copy is stretched to the newline)
                last = report
                to, ident = report
                to += pos - 1  # the newline that ends the reported line
                if not ls <= to <= le:  # not in the line of the previous report
                    ls = rfind(b"\n", 0, to) + 1
                    if ls >= hi:
                        stopped = False  # only reports after the last line are left
                        break
                    le = find(b"\n", to, hi)
                    if ls in trunc:  # as _scan_part's line_at
                        text = buf[ls : ls + ml]
                    else:
                        text = buf[ls : le - 1 if le > ls and buf[le - 1] == 13 else le]
                    masked = None
                if ident in single:
                    proposed.append((ls, ident))
                    if ident in sampled:
                        continue
                if insensitive[ident] and len(text) <= _MEMO_LINE:
                    if masked is None:
                        masked = text.translate(DIGITS_TO_ZERO)
                    m = memo.get((ident, masked), memo)
                    if m is memo:
                        m = rx[ident](text)
                        if len(memo) >= _MEMO_MAX:
                            memo.clear()
                        memo[(ident, masked)] = m
                    if m is not None:
                        records.append((ls, ident, text, m, masked))
                    continue
                m = rx[ident](text)
                if m is not None:
                    records.append((ls, ident, text, m, None))
            if not stopped or ls < 0:
                return
            # reports come in end-offset order: lines before the last one are complete; check
            # every hyperscan pattern on the last line directly and resume after it
            done = {r[1] for r in records if r[0] == ls}
            for c in self._c:
                if c.idx in sampled:  # (whether it occurs: its report may be the one cut off)
                    if c.search(text) is not None:
                        proposed.append((ls, c.idx))
                elif c.idx in self.hyperscan_specs and not c.spec.sample and c.idx not in done:
                    m = c.search(text)
                    if m is not None:
                        records.append((ls, c.idx, text, m, None))
            pos = le + 1

    def _re2_scan(self, g: Re2Group, buf: bytes, lo: int, hi: int, line_at, records: list) -> None:
        search = g.comb.search
        match_set = g.set.Match
        find, rfind = buf.find, buf.rfind
        pos = lo
        while pos < hi:
            m = search(buf, pos, hi)
            if m is None:
                break
            s = m.start()
            ls = rfind(b"\n", 0, s) + 1
            le = find(b"\n", s, hi)
            if le < 0:
                le = hi - 1
            text = line_at(ls, le)
            for k in sorted(match_set(text) or ()):
                c = g.members[k]
                records.append((ls, c.idx, text, c.search(text) if c.has_groups else None, None))
            pos = le + 1

    def _candidates(self, idx: int, buf: bytes, lo: int, hi: int) -> list[int]:
        """Line starts in buf[lo:hi] where the buffer search proposes sampled or block spec ``idx``."""
        rfind = buf.rfind
        starts: list[int] = []
        db = self._hs_sampled.get(idx)
        if db is None and idx in self._hs_lazy:
            db = self._sampled_db(idx)
        if db is not None:
            ends: list[int] = []

            def on_match(_ident, _from, to, _flags, _ctx):
                ends.append(to)

            scratch = self._hs_sampled_scratch.get(idx)
            if scratch is None:
                scratch = self._hs_sampled_scratch[idx] = hs.Scratch(db)
            db.scan(memoryview(buf)[lo:hi], match_event_handler=on_match, scratch=scratch)
            ends.sort()
            for to in ends:  # each report ends just after a newline
                ls = rfind(b"\n", 0, lo + to - 1) + 1
                if ls < hi and (not starts or starts[-1] != ls):
                    starts.append(ls)
            return starts
        c = self._re2_sampled[idx]
        pos = lo
        while pos < hi:
            m = c.buf_rx.search(buf, pos, hi)
            if m is None:
                break
            s = m.start()
            starts.append(rfind(b"\n", 0, s) + 1)
            pos = buf.find(b"\n", s, hi) + 1
            if pos == 0:
                break
        return starts

    def _block_db(self) -> Any:
        """The block specs' single-match database, made now if it is not yet (shared with the
        clones); None when hyperscan refuses it: their first lines are then proposed one spec
        at a time (``blockscan._firsts``)."""
        db = self._hs_made.get("block")
        if db is None:
            try:
                caseless = hs.HS_FLAG_CASELESS
                db = block_database([(self._c[i], caseless if self._c[i].spec.ignore_case else 0) for i in self._block])
            except Exception as e:
                logger.info("hyperscan single-match database failed (%s); block specs are searched one at a time", e)
                db = False
            self._hs_made["block"] = db
        return db or None

    def _sampled_db(self, idx: int) -> Any:
        """Sampled or block spec ``idx``'s own database, made now (shared with the clones); None
        when hyperscan refuses it: its candidates are then searched with RE2 from now on."""
        c = self._c[idx]
        try:
            db = sampled_database(c, self._hs_lazy[idx])
        except KeyError:  # another thread found it refused meanwhile
            return self._hs_sampled.get(idx)
        except Exception as e:  # hyperscan refuses some RE2 syntax, e.g. (?U)
            log_fallback(c, e)
            c.buf_rx = re2.compile(c.buffer_source(), re2_options(c.utf8))
            self._re2_sampled[idx] = c
            self._hs_lazy.pop(idx, None)
            return None
        self._hs_sampled[idx] = db
        return db

    def _last_sampled(self, buf: bytes, lo: int, hi: int, floors: dict, line_at, out: dict) -> None:
        """Last line at or above ``floors[spec]`` that each sampled spec really matches.

        Windows tile the buffer from its end, each 4x the previous, so a heartbeat near the end
        costs a few small scans and a spec that matches nowhere costs one pass in ~6 calls.
        """
        find = buf.find
        for idx, floor in floors.items():
            rx = self._c[idx].search
            top, width = hi, _WINDOW
            while top > floor:
                cut = top - width
                wlo = max(buf.rfind(b"\n", 0, cut) + 1 if cut > floor else floor, floor)
                for ls in reversed(self._candidates(idx, buf, wlo, top)):
                    text = line_at(ls, find(b"\n", ls, hi))
                    m = rx(text)
                    if m is not None:
                        out[idx] = (ls, text, m)
                        break
                if idx in out:
                    break
                top = wlo


# --------------------------------------------------------------------------------------------
# the scanners of a rulebook

# compiled rulebook -> {source kind: template}; a template is only ever cloned, never fed.
# Weak: a rulebook replaced by a reload takes its templates with it.
_TEMPLATES: weakref.WeakKeyDictionary[CompiledRulebook, dict[str, tuple]] = weakref.WeakKeyDictionary()
_TEMPLATES_LOCK = threading.Lock()  # the node agents of `recover demo` share one rulebook in threads


#: named groups of a progress line that must never be left out: a checkpoint (the retry policy's
#: no-progress guard compares them) and a unit compared with its peers (each unit needs its points)
_EVERY_LINE = re2.compile(r"\(\?P<(?:checkpoint|peer)")


#: rank evidence that only maps ranks to hosts (NCCL's communicator and bootstrap lines, printed
#: all through some logs): no boundary of progress sampling, nothing that progress may follow
_TOPOLOGY = frozenset({"comm", "addr"})


def matcher_specs(compiled: CompiledRulebook) -> list[MatcherSpec]:
    """The rulebook's enabled matchers as scanner specs, in ``compiled.matchers`` order. A progress
    matcher is sampled per block (``engine.core.blockscan``) unless the rulebook samples it itself
    (``sample``), it finds a part of a table of peers (``attrs.table``), or its lines name a
    checkpoint or a unit compared with its peers. The first progress line after a hit of any
    other matcher that is not progress is always reported (``boundary``), but for lines that only
    map ranks to hosts."""
    return [
        MatcherSpec(
            m.id,
            m.pattern,
            sample=m.sample,
            ignore_case=m.ignore_case,
            block=m.emit == "progress"
            and not m.sample
            and "table" not in m.attrs
            and _EVERY_LINE.search(m.pattern) is None,
            boundary=m.emit != "progress" and m.attrs.get("rank_evidence") not in _TOPOLOGY,
        )
        for m in compiled.matchers
    ]


def matchers_for(compiled: CompiledRulebook, source: str) -> list[int]:
    """Indexes (into compiled.matchers) of the matchers that apply to a source kind."""
    return [i for i, m in enumerate(compiled.matchers) if source == "any" or source in m.sources or "any" in m.sources]


def scanner_for(compiled: CompiledRulebook, source: str) -> tuple[Scanner, list[int]]:
    """A fresh scanner for one stream of ``source`` and its index map (scanner matcher number ->
    index into ``compiled.matchers``). The patterns are compiled once per rulebook and source
    kind (``recover rules test`` replays ~90 small inputs; the controller follows hundreds of
    files); each stream gets a clone of that template."""
    with _TEMPLATES_LOCK:
        per = _TEMPLATES.setdefault(compiled, {})
        got = per.get(source)
        if got is None:
            index_map = tuple(matchers_for(compiled, source))
            specs = matcher_specs(compiled)
            got = per[source] = (Scanner([specs[i] for i in index_map]), index_map)
    tmpl, index_map = got
    return tmpl.clone(), list(index_map)
