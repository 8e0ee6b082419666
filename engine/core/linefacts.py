"""The one scan -> fact loop (``StreamFacts``), shared by replay, the live controller and the agent.

Its parts live apart: line times in ``linetime``, Xid and PCI decoding in ``xid``, the file's
and cluster's job context in ``context``, the typing of groups in ``groups``, hit -> fact in
``converter``, floods and their shortcut in ``floods``, progress sampling in ``sampler``.
"""

from __future__ import annotations

from typing import Any, Sequence

# the names this module has always offered, for its importers (the rules inspector, sources)
from engine.core.context import ClusterContext, FileContext, expand_hostlist, job_from_filename
from engine.core.converter import HitConverter
from engine.core.floods import FLOOD_WINDOW, Collapser, Flood, shape_key
from engine.core.linetime import parse_line_time
from engine.core.logend import ending_tables, read_endings
from engine.core.groups import group_type, number
from engine.core.sampler import (
    BLOCK_MIN,
    PACE_WINDOW_S,
    PROGRESS_EVERY_S,
    ProgressSampler,
    progress_block,
    progress_fact_every,
)
from engine.core.xid import decode_xid, normalize_pci
from engine.facts import JOB_RE, NODE_RE, Fact, clean_text

__all__ = [
    "NODE_RE",
    "JOB_RE",
    "clean_text",
    "parse_line_time",
    "FileContext",
    "ClusterContext",
    "HitConverter",
    "expand_hostlist",
    "job_from_filename",
    "Flood",
    "StreamFacts",
    "shape_key",
    "FLOOD_WINDOW",
    "normalize_pci",
    "decode_xid",
]

#: one item of a stream: (line number, byte offset of the line, what it gave)
Item = tuple[int, int, "Fact | Flood | None"]


class StreamFacts:
    """The one scan -> fact loop, shared by replay and the live controller.

    ``feed(data)`` scans a chunk and returns one item per hit, in line order: a Fact, a Flood
    (repeats of an earlier fact, collapsed), or None (a context line, or a repeat already
    counted in this batch). An untimestamped hit is dated by the last timestamp before it: the
    time is carried forward from hit to hit, and the only look back is into the lines since
    the previous hit (at most ``BEFORE_BYTES``), so a flood of adjacent lines never looks back.
    """

    BEFORE_BYTES = 8192

    def __init__(
        self,
        scanner: Any,
        converter: HitConverter,
        ctx: FileContext,
        index_map: Sequence[int],
        collapse: bool = True,
        sample: bool = True,
        block: int | None = None,
    ):
        self.scanner = scanner
        # progress lines sampled in the scanner (engine.core.blockscan): blocks of about
        # PROGRESS_EVERY_S of log, at most ``block`` bytes (None: the setting; 0 or
        # ``sample=False``: every line, the full path); see _pace
        self._block_max = 0 if not sample else progress_block() if block is None else max(0, int(block))
        self._block_specs = frozenset(getattr(scanner, "_block_set", ())) if self._block_max else frozenset()
        self._pace_mark: tuple[int, float] | None = None  # (offset, time) of a progress point
        if hasattr(scanner, "block"):
            scanner.block = 0
        self.converter = converter
        self.ctx = ctx
        self.index_map = index_map
        self._collapse = Collapser(ctx.source == "job") if collapse else None
        self._looked = scanner.position[0]  # stream offset up to which earlier bytes were looked at
        self._data, self._base = b"", 0
        # progress matchers (scanner numbering), those whose lines name a checkpoint, weak matchers,
        # progress matchers whose lines may only touch the tracker, the matchers that are no
        # boundary of progress, and the ending tables: see _tables (the same for every stream of
        # a rulebook and source)
        tables = _tables(scanner, converter, index_map)
        self._all_progress, checkpoints, self._weak, touchable, self._quiet, self._ends, self._mute = tables
        self._progress = self._all_progress if sample else frozenset()
        self._checkpoints = checkpoints if sample else frozenset()
        self._sampler: dict[int, ProgressSampler] = {}
        self._skipped_at = 0.0  # the time of the last progress line left out
        self._last_of: dict[int, int] = {}  # progress matcher -> offset of its last hit in this batch
        self._weak_said: set[int] = set()  # weak matchers that gave a hit since the last progress line
        #: live: the engine whose progress tracker (and goodput ledger) a progress line that need
        #: not be a fact only touches (see _touch); None (replay, rule tests): every line kept is a fact
        self.into: Any = None
        self._every = progress_fact_every()
        self._touchable = touchable if sample else {}
        self._fact_at: dict[int, tuple[float, tuple]] = {}  # touchable matcher -> its last fact (time, context)
        self._boundary = False  # a hit that is not progress since the last progress fact

    def scan(self, data: bytes, feed: Any = None) -> list[Any]:
        """Scan a chunk; its hits are then converted one by one with ``item`` (the controller
        converts lazily, so that it can stop between lines of a burst). ``feed(scanner, data)``:
        what scans it instead of ``scanner.feed`` (the controller's one-line fast path,
        ``engine.core.oneline``), with the same answer."""
        self._begin(data, self.scanner.position[0] + self.scanner.pending)
        return self._last_hits(self.scanner.feed(data) if feed is None else feed(self.scanner, data))

    def scan_end(self) -> list[Any]:
        """End of stream: the hits of the pending partial line."""
        self._begin(b"", 0)
        return self._last_hits(self.scanner.flush())

    def _last_hits(self, hits: list[Any]) -> list[Any]:
        if self._weak:
            hits = self._weak_hits(hits)
        if self._ends is not None:  # an ending on a line a specific matcher read names it (logend)
            hits = read_endings(hits, *self._ends)
        if self._progress:
            progress = self._progress
            self._last_of = {h.matcher: h.offset for h in hits if h.matcher in progress}
        return hits

    def _weak_hits(self, hits: list[Any]) -> list[Any]:
        """A class's keyword is evidence only where nothing specific spoke: a weak hit on a line
        that a specific matcher also hit is dropped (the line is explained), so is one on a quiet
        line (an INFO line), and of each class only the first hit since the last progress line is
        kept (what a keyword may decide is how the job ended; a flood of one error line gives one).
        An ending matcher (logend: a program's last word, read whatever it says) explains nothing:
        the keyword on its line names the class that the generic ending does not ("Error: ENOSPC:
        no space left on device" is storage's keyword, below every specific cause and above the
        ending). Nor does a catch-all reader (``attrs: {explains: false}``: the last line of any
        Python traceback, whatever its exception), whose own answer ranks below every keyword.
        Hits come in line order, so the lines a specific matcher hit are known per batch."""
        weak = self._weak
        if not any(h.matcher in weak for h in hits):
            if self._weak_said and any(h.matcher in self._all_progress for h in hits):
                self._weak_said.clear()
            return hits
        silent = self._mute
        explained = {h.offset for h in hits if h.matcher not in silent}
        said, progress = self._weak_said, self._all_progress
        out = []
        for h in hits:
            if h.matcher in progress:
                said.clear()
            elif h.matcher in weak:
                if h.offset in explained or h.matcher in said:
                    continue
                if any(q in h.line for q in weak[h.matcher]):
                    continue
                said.add(h.matcher)
            out.append(h)
        return _longest_keyword(out, weak)

    def _before(self, hit: Any) -> bytes | None:
        """The bytes since the last hit looked at, up to BEFORE_BYTES: where an untimestamped
        line's time is looked for."""
        data, base = self._data, self._base
        local = hit.offset - base
        if 0 < local <= len(data) and hit.offset > self._looked:
            lo = max(0, local - self.BEFORE_BYTES, self._looked - base)
            return data[lo:local] if lo < local - 2 else None  # not just the newline of the last hit
        return None

    def item(self, hit: Any) -> "Fact | Flood | None":
        """The fact, flood or nothing that one hit of the last scanned chunk gives."""
        if hit.matcher not in self._quiet:
            self._boundary = True
        elif self.into is not None and hit.matcher in self._touchable and self._touch(hit):
            return None
        if hit.matcher in self._progress and self._skip_progress(hit):
            end = hit.offset + len(hit.line)
            if end > self._looked:
                self._looked = end
            if hit.matcher in self._block_specs:
                self._pace(hit.offset, self._skipped_at)
            return None
        conv = self.converter
        before = self._before(hit)
        conv.collapse, conv.blank = self._collapse, hit.blank
        try:  # through convert: the controller's tests put a seam there
            out = conv.convert(
                self.index_map[hit.matcher],
                hit.groups,
                hit.line.decode("utf-8", "replace"),
                hit.line_no,
                self.ctx,
                before,
            )
        finally:
            conv.collapse = conv.blank = None
        end = hit.offset + len(hit.line)
        if end > self._looked:
            self._looked = end
        if hit.matcher in self._progress:
            st = self._sampler.get(hit.matcher)
            if st is None:
                st = self._sampler[hit.matcher] = ProgressSampler()
            st.kept(Collapser._sig(conv, self.ctx))
            if hit.matcher in self._block_specs and isinstance(out, Fact):
                self._pace(hit.offset, out.at)
            if isinstance(out, Fact):
                self._fact_at[hit.matcher] = (out.at, self._touch_sig())
                self._boundary = False
        return out

    def _touch_sig(self) -> tuple:
        """What a progress fact's job, attempt and place in it depend on in the file (not the
        cluster's version: the scheduler's polls move it, and a touch reads the cluster anew)."""
        ctx = self.ctx
        return (ctx.job, ctx.attempt, ctx.active, ctx.ended, self.converter.scheduler)

    def _touch(self, hit: Any) -> bool:
        """Live (``into`` set): whether a progress line only touches the progress tracker instead
        of becoming a fact. A fact still: the first line of its matcher, the first after a hit that
        is not progress (a failure, a warning, a context line), after the file's job or attempt
        changed, once ``progress_fact_every()`` seconds after the last one, and a slow point
        (``ProgressTracker.touch``). Else the line is dated, then left out as the sampler says
        (``_skip_progress``) or, the last of its matcher in the chunk or kept by the sampler, it
        touches the tracker: its time, step and speed, with no Hit -> Fact -> Engine -> store
        round trip. A restart loses no touch that a fact would have kept: the tracker is memory
        only either way, rebuilt from the lines after the committed positions (docs/scaling.md)."""
        matcher, ctx, conv = hit.matcher, self.ctx, self.converter
        last, st = self._fact_at.get(matcher), self._sampler.get(matcher)
        job = ctx.job
        if last is None or st is None or self._boundary or job is None or last[1] != self._touch_sig():
            return False
        names, step_kind, speed, per_node = self._touchable[matcher]
        if per_node and len(ctx.nodes) == 1:
            return False  # a step time on a one-node job is that node's: observe's per-node path
        before = self._before(hit)
        _, at = conv._when(hit.line.decode("utf-8", "replace"), ctx, before)
        if at - last[0] >= self._every or at < last[0]:
            return False
        if self._last_of.get(matcher) != hit.offset and st.sig == Collapser._sig(conv, ctx) and st.skip(at):
            conv.progress_skipped += 1  # left out, as _skip_progress would
        else:
            raw = hit.group("step") if step_kind else None
            step = number(raw.strip(), step_kind) if raw else None
            figures = {}
            for name, kind in speed:
                raw = hit.group(name)
                v = number(raw.strip(), kind) if raw else None
                if v is not None:
                    figures[name] = v
            attempt = ctx.attempt if ctx.attempt is not None else conv.cluster.job_attempt.get(job, 0)
            step = step if isinstance(step, int) else None
            tracker = self.into.tracker
            if tracker.due_by(at):  # what a fact at ``at`` would do first: a hang due before it is declared
                self.into.advance(at)
            if not tracker.touch(job, int(attempt or 0), at, step, figures, names):
                return False
            self.into.ledger.touch(job, int(attempt or 0), at, step, figures)
            st.kept(Collapser._sig(conv, ctx))
        end = hit.offset + len(hit.line)
        if end > self._looked:
            self._looked = end
        if matcher in self._block_specs:
            self._pace(hit.offset, at)
        return True

    def _pace(self, offset: int, at: float) -> None:
        """Set the scanner's progress block from the pace of the log: the bytes it wrote per
        PROGRESS_EVERY_S, measured between progress points at least PACE_WINDOW_S apart, at
        most ``_block_max``, and 0 (every line) while that is under BLOCK_MIN bytes."""
        mark = self._pace_mark
        if mark is None or offset < mark[0] or at < mark[1]:  # the first point, or a rewind
            self._pace_mark = (offset, at)
            return
        dt = at - mark[1]
        if dt < PACE_WINDOW_S:
            return
        want = int((offset - mark[0]) / dt * PROGRESS_EVERY_S)
        self.scanner.block = 0 if want < BLOCK_MIN else min(want, self._block_max)
        self._pace_mark = (offset, at)

    def _skip_progress(self, hit: Any) -> bool:
        """Whether a progress line is left out (see ProgressSampler). A line left out is still
        dated, so that the file's clock (``ctx.last_at``) moves exactly as if it were converted."""
        matcher = hit.matcher
        if self._last_of.get(matcher) == hit.offset:
            return False  # the last of its matcher in the chunk
        if matcher in self._checkpoints and hit.group("checkpoint"):
            return False  # a checkpoint is never left out (retry guards read it)
        st = self._sampler.get(matcher)
        conv = self.converter
        if st is None or st.sig != Collapser._sig(conv, self.ctx):
            return False  # the first line, or the file's context changed since the last one kept
        _, at = conv._when(hit.line.decode("utf-8", "replace"), self.ctx, self._before(hit))
        self._skipped_at = at
        if not st.skip(at):
            return False
        conv.progress_skipped += 1
        return True

    def grown(self) -> list[Flood]:
        """The floods of this batch that grew since they were handed on. ``item`` hands a flood
        on at its first repeat in a batch; whoever applies floods as they come (the controller)
        applies these after the hits it converted, or the batch's later repeats would wait for
        the next batch to be counted (and the last batch's, for ever)."""
        if self._collapse is None:
            return []
        return [f for f in self._collapse.touched if f.count > f.applied]

    def feed(self, data: bytes) -> list[Item]:
        return [(h.line_no, h.offset, self.item(h)) for h in self.scan(data)]

    def flush(self) -> list[Item]:
        return [(h.line_no, h.offset, self.item(h)) for h in self.scan_end()]

    def _begin(self, data: bytes, base: int) -> None:
        self._data, self._base = data, base
        if self._collapse is not None:
            self._collapse.touched.clear()  # a new batch: each grown flood is handed on once more


#: what a progress fact's speed may be read from (``engine.core.progress._SPEED``)
_SPEED_NAMES = ("step_time", "step_time_ms", "s_per_it", "it_per_s", "samples_per_s", "iter_s", "gflops", "gb_per_s")
#: a progress line naming any of these (a group or a matcher's attribute) is always a fact: the
#: tracker compares nodes, ranks, peers and tables, checkpoints guard retries
_FACT_ONLY = frozenset(
    {"job", "attempt", "node", "nodes", "rank", "peer", "table", "checkpoint", "final", "value", "unit", "failed_nodes"}
)


def _touch_spec(scanner: Any, converter: HitConverter, index_map: Sequence[int], i: int) -> tuple | None:
    """(matcher id, the step group's type, (speed group, type) pairs, whether it prints a
    ``step_time``) for a progress matcher whose lines may only touch the tracker; None if each of
    its lines must be a fact."""
    m = converter.matchers[index_map[i]]
    names = getattr(scanner, "group_names", None)
    groups = set(names(i)) if names is not None else set(m.types)
    if names is None or (groups | set(m.attrs)) & _FACT_ONLY or set(m.attrs) & set(_SPEED_NAMES) or "step" in m.attrs:
        return None
    step = group_type(m, "step") if "step" in groups else None
    speed = tuple((n, group_type(m, n)) for n in _SPEED_NAMES if n in groups)
    if any(k not in ("int", "float") for _, k in speed) or step not in (None, "int"):
        return None
    return (m.id, step, speed, "step_time" in groups)


def _longest_keyword(hits: list[Any], weak: Any) -> list[Any]:
    """Of several classes' keywords on one line, the longest keyword's hit is the line's (the
    more specific words: "java.lang.OutOfMemoryError: Java heap space" is the JVM's heap, not
    cuda_oom's "OutOfMemoryError"); the others are dropped. Of equal lengths the last hit stays,
    as before (the last hit of a line is how a log ends on it, engine/core/logend.py)."""
    lines: dict[int, list[Any]] = {}
    for h in hits:
        if h.matcher in weak:
            lines.setdefault(h.offset, []).append(h)
    if all(len(v) < 2 for v in lines.values()):
        return hits
    drop: set[int] = set()
    for same in lines.values():
        if len(same) > 1:
            best = max(reversed(same), key=lambda h: len(str(h.groups.get("keyword") or "")))
            drop.update(id(h) for h in same if h is not best)
    return [h for h in hits if id(h) not in drop]


def _tables(scanner: Any, converter: HitConverter, index_map: Sequence[int]) -> tuple:
    """(progress matchers but tables of peers, those with a checkpoint group, weak matchers with
    their quiet strings, touchable progress matchers -> _touch_spec, matchers that are no boundary
    of progress, the ending tables: engine.core.logend.ending_tables), in scanner numbering.
    The parts of a table of peers (``attrs: {table: ...}``) are no heartbeat: never sampled, and no sign the job went on after an error line
    (engine.core.peer_table). A weak matcher's quiet strings are bytes: a line holding one is no
    error line (_weak_hits). The boundary is the scanner's (engine.core.scanner.matcher_specs):
    not progress, and no rank-to-host line. Last, the matchers that explain no line for
    _weak_hits, a weak keyword on their line standing: the weak and ending matchers and the
    catch-all readers (``attrs: {explains: false}``)."""
    ms = converter.matchers
    derived = getattr(scanner, "derived", None)  # a Scanner's: per template, shared by its clones
    if not isinstance(derived, dict):
        return _derive(scanner, converter, index_map)
    # keyed on the rulebook's matchers tuple (each rule test or corpus case replays with a
    # converter of its own; a table costs ~3 ms)
    key = tuple(index_map)
    got = derived.get(key)
    if got is None or got[0] is not ms:
        got = derived[key] = (ms, _derive(scanner, converter, index_map))
    return got[1]


def _derive(scanner: Any, converter: HitConverter, index_map: Sequence[int]) -> tuple:
    """The tables of ``_tables``, made afresh."""
    ms = converter.matchers
    progress = frozenset(i for i, j in enumerate(index_map) if ms[j].emit == "progress" and "table" not in ms[j].attrs)
    names = getattr(scanner, "group_names", None)
    checkpoints = frozenset(i for i in progress if names is None or "checkpoint" in names(i))
    weak = {
        i: tuple(q.encode() for q in ms[j].unless) for i, j in enumerate(index_map) if ms[j].attrs.get("weak") is True
    }
    touchable = {i: t for i in progress if (t := _touch_spec(scanner, converter, index_map, i))}
    quiet = frozenset(
        i
        for i, j in enumerate(index_map)
        if ms[j].emit == "progress" or ms[j].attrs.get("rank_evidence") in ("comm", "addr")
    )
    ends = ending_tables(ms, index_map)
    # what explains no line for _weak_hits, in one set: the weak, ending and catch-all matchers
    mute = frozenset(i for i, j in enumerate(index_map) if ms[j].attrs.get("explains") is False)
    mute = mute | frozenset(weak) | (ends[0] if ends is not None else frozenset())
    return (progress, checkpoints, weak, touchable, quiet, ends, mute)
