"""Input into the engine, in batches: the followed files and the agents' spool.

``FileIngest`` gives each followed file its own scanner (the patterns compiled once per source
kind and rulebook), scans what the follower read, turns the hits into facts (``StreamFacts``, the
loop replay uses too) and ingests them inside the current ``Batch``, recording the file's new
position with them; a burst of hits is committed in pieces. ``SpoolIngest`` does the same for the
facts the node agents write to the spool. One input whose handling raises is quarantined alone.

    files = FileIngest(cluster, batch, metrics, limiter, stop, scheduled=True)
    files.use(compiled)                       # per rulebook (again after a reload)
    follower = Follower(paths, on_new=files.on_new_file, ...)
    for t, data in follower.read_ready():
        if not files.feed(engine, t, data):   # stopping: read the rest again later
            follower.rewind(t)
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from typing import Any, Sequence

from engine.clock import SYSTEM, Clock
from engine.core.incidents import Engine
from engine.core.context import ClusterContext, FileContext, job_from_filename
from engine.core.converter import HitConverter
from engine.core.floods import Flood
from engine.core.linefacts import StreamFacts
from engine.core.linetime import DEFAULT_ZONE, LineClock, log_zone
from engine.core.oneline import OneLine
from engine.core.scanner import Scanner, scanner_for
from engine.live.batch import STORE_ERRORS, Batch
from engine.live.filestate import FileState, Pending, state_of
from engine.live.metrics import LogLimiter, Metrics
from engine.rulebook import CompiledRulebook
from engine.sources.follow import Follower, Tailed
from engine.sources.spool_watch import SpoolWatch
from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = [
    "CLOCK_STEP",
    "MIN_PASS_SECONDS",
    "PASS_SECONDS",
    "SPOOL_INTERVAL",
    "STEP_READ_SECONDS",
    "FileIngest",
    "FileState",
    "SpoolIngest",
    "engine_time",
    "set_job",
]

#: resolution of the engine's clock (see engine_time)
CLOCK_STEP = 0.01
#: the spool is read this much at most per pass
SPOOL_READ_BYTES = 4 << 20
#: the running controller looks at the spool at most this often (seconds; a look is a listing and
#: a stat of every node's files: ~5 ms at 2,048 nodes, and a loop pass runs on every write to a
#: followed log). What it adds to a Xid's detection is well inside the settle windows
SPOOL_INTERVAL = 0.5
#: one file's hits are converted for at most this long per pass (then the other files, the
#: spool and the scheduler are served; the rest of the hits waits, already scanned, for the next
#: pass). The follower's byte budget alone does not bound a pass: a line's cost is per line, and
#: 2 MiB of short lines that all differ (every one a new exception) took 2.2 s to convert, so a
#: node's fatal Xid waited that long behind one job's log (bench_live_flood.py --shape distinct)
PASS_SECONDS = 0.1
#: one loop pass reads followed files for at most this long (the files not read yet stay due for
#: the next pass), so that the spool, the scheduler, the engine's timers and the leader lease are
#: served at least this often however many logs were written meanwhile: a pass over 10,000 logs
#: took seconds, and one longer than the lease let it run out (a takeover rewinds every file)
STEP_READ_SECONDS = 1.0
#: the running loop starts a pass at most this often: each write to a followed log wakes it, and
#: what a pass costs whatever it reads (a transaction, the timers) is paid per pass, not per write
MIN_PASS_SECONDS = 0.05
#: the source kinds a followed file may be scanned as (another reads as a job's log)
_SCANNED_SOURCES = frozenset(("job", "kernel", "slurm", "any"))
#: the spool reader's refusals -> the reason label of recover_refused_total
_SPOOL_REFUSALS = (
    ("refused_node", "spool_other_node"),
    ("refused_kind", "spool_scheduler_kind"),
    ("not_regular", "not_regular_file"),
)


def engine_time(clock: Clock = SYSTEM) -> float:
    """Engine time, live: ``clock``'s wall time in steps of CLOCK_STEP. Every fact is stamped on arrival;
    with a new time for each fact the engine would run its timers (every open incident, every
    tracked job attempt) once per fact; in steps, at most 1/CLOCK_STEP times a second."""
    return math.floor(clock.wall() / CLOCK_STEP) * CLOCK_STEP


def set_job(t: Tailed, job: str, attempt: int, nodes: Sequence[str]) -> None:
    """The scheduler's word on a followed job log: whose attempt it is and where it runs (a line
    in it may speak of those nodes only)."""
    ctx = state_of(t).ctx
    if ctx is None:
        return
    if ctx.job != job or ctx.attempt != attempt:
        ctx.job, ctx.attempt = job, attempt
    ctx.nodes = set(nodes)
    t.waiting = False  # claimed: read on from where it is (the follower's add marked it due)


class FileIngest:
    """Followed files -> facts -> the engine, inside the batch. A file whose hits take longer
    than PASS_SECONDS to convert is paused (``Tailed.held``: the follower reads nothing more of
    it) and goes on at the next pass (``resume``)."""

    zone = DEFAULT_ZONE  # the log zone (policy.log_timezone), set by use()

    def __init__(
        self,
        cluster: ClusterContext,
        batch: Batch,
        metrics: Metrics,
        limiter: LogLimiter,
        stop: threading.Event,
        *,
        scheduled: bool,
        clock: Clock = SYSTEM,
    ):
        self.cluster = cluster
        self.batch = batch
        self.metrics = metrics
        self.limiter = limiter
        self.stop = stop
        self.scheduled = scheduled
        self.clock = clock
        self.paused: dict[str, Tailed] = {}  # files with hits left to convert, by path
        #: the one-line fast path (engine.core.oneline), one per scanner template in use
        self._one_line: dict[int, OneLine] = {}

    def use(self, compiled: CompiledRulebook) -> None:
        """The matchers of this rulebook from now on (each file's scanner is replaced when the
        follower rewinds it)."""
        self.converter = HitConverter(compiled.matchers, self.cluster, clock=lambda: engine_time(self.clock))
        self.converter.scheduler = self.scheduled  # only the scheduler says which job runs where
        self.zone = log_zone(compiled.policy.log_timezone)  # stamps without a zone: the rulebook's one rule
        self.compiled = compiled
        self._one_line = {}  # the old rulebook's templates go with it

    def on_new_file(self, t: Tailed) -> None:
        """The follower's hook for a file it starts to follow: its context and a scanner."""
        st = state_of(t)
        job = st.job
        if job is None and self.scheduled:
            # with a scheduler, a job's log is the StdOut/StdErr it names (set_job), never a file
            # named after a job: any user can write one into a followed folder. Such a file is not
            # read until the scheduler names it as a job's (from where it is then), so its lines
            # neither speak for the job in its name nor open incidents for no job
            t.waiting = True
            logger.info("%s: no job's log the scheduler names (yet); not read until it does", t.path)
        elif job is None:
            job = job_from_filename(os.path.basename(t.path))  # no scheduler: the name is all there is
        st.ctx = FileContext(
            path=t.path, source=st.source, job=job, attempt=st.attempt, dates=LineClock(zone=self.zone)
        )
        st.committed = (t.inode, t.offset, t.line_no)
        self._reset_scanner(t)

    def _reset_scanner(self, t: Tailed) -> None:
        st = state_of(t)
        source = st.source if st.source in _SCANNED_SOURCES else "job"
        # the patterns are compiled once per rulebook and source kind (a hyperscan database: ~0.2 s
        # for 25 patterns); each file gets a clone with its own stream state
        scanner, index_map = scanner_for(self.compiled, source)
        scanner.reset(t.offset, t.line_no)
        st.scanner, st.index_map, st.long_lines, st.rulebook = scanner, index_map, 0, self.compiled
        st.pending = None  # read again from the consumed position
        self.paused.pop(t.path, None)

    def feed(self, engine: Engine, t: Tailed, data: bytes) -> bool:
        """Scan what was read, ingest the facts and record the new position, inside the current
        transaction (committed in pieces when a burst of hits fills it). False when it stopped
        early because the controller is stopping: the caller rewinds the file, so that the rest
        of this read is read again (after a restart)."""
        st = state_of(t)
        if t.reset or st.scanner is None:
            t.reset = False
            if st.scanner is not None and st.stream is None and st.rulebook is self.compiled:
                # never fed (the follower's first open asks for a reset): as good as a new clone
                st.scanner.reset(t.offset, t.line_no)
                st.pending = None
            else:
                self._reset_scanner(t)
        scanner, ctx = st.scanner, st.ctx
        assert scanner is not None and ctx is not None  # set by on_new_file and _reset_scanner
        stream = st.stream
        if stream is None or stream.scanner is not scanner or stream.ctx is not ctx:
            stream = st.stream = StreamFacts(scanner, self.converter, ctx, st.index_map)
        stream.into = engine  # a progress line that need not be a fact touches its tracker (linefacts)
        if data:
            hits = stream.scan(
                data, self._fast_path(scanner)
            )  # converted one by one below: a stop can come between lines
            end = scanner.position
            lines = data.count(b"\n")
        else:  # the old inode is finished: its last partial line counts; the next file starts at 0
            before = scanner.position
            hits = stream.scan_end()
            lines = scanner.position[1] - before[1]
            # where the old file ends, if it lives on renamed: a partial last line was judged now;
            # what may still be appended to it there gets that line's number again
            t.eof_position = (scanner.position[0], before[1])
            end = (0, 0)
            t.reset = True
        self._count_long_lines(t, scanner)
        return self._convert(engine, t, stream, Pending(hits, 0, end, lines, data, t.read_pos))

    def _fast_path(self, scanner: Scanner) -> Any:
        """The one-line fast path's ``feed`` for this file's scanner (None: its own ``feed``)."""
        if not isinstance(scanner, Scanner):
            return None
        key = id(scanner._c)  # the compiled specs a template shares with its clones
        one = self._one_line.get(key)
        if one is None or not one.serves(scanner):
            one = self._one_line[key] = OneLine(scanner)
        return one.feed

    def read(self, follower: Follower, engine: Engine) -> None:
        """One pass over the files that changed (the leader's and a follower's): the files paused
        in the last pass go on first, then what the follower reads, for at most STEP_READ_SECONDS;
        a new incident is committed at once, a burst in pieces."""
        for t in self.resume(engine):
            follower.rewind(t)  # stopping: the rest is read again (after a restart)
        gen = follower.read_ready()
        read_until = self.clock.monotonic() + STEP_READ_SECONDS
        try:
            for t, data in gen:
                if not self.feed(engine, t, data):
                    follower.rewind(t)  # stopping: the rest of this read is read again (after a restart)
                    break
                if self.stop.is_set():
                    break
                if self.batch.full() or self.batch.opened_incidents:  # a new incident is committed at once
                    self.batch.commit()
                if self.clock.monotonic() >= read_until:
                    break  # the rest is read in the next pass (see STEP_READ_SECONDS)
        finally:
            gen.close()

    def resume(self, engine: Engine) -> list[Tailed]:
        """Go on converting the hits of the files paused in an earlier pass, each for at most
        PASS_SECONDS more. Returns the files it stopped in because the controller is stopping
        (the caller rewinds them, as after ``feed`` returned False)."""
        stopped = []
        for path, t in list(self.paused.items()):
            st = state_of(t)
            pending, stream = st.pending, st.stream
            if pending is None or stream is None or not t.held or t.reset:  # rewound since: read again
                self.paused.pop(path, None)
                st.pending = None
                continue
            if self.stop.is_set():
                break
            if not self._convert(engine, t, stream, pending):
                stopped.append(t)
        return stopped

    def _convert(self, engine: Engine, t: Tailed, stream: StreamFacts, p: Pending) -> bool:
        """Convert ``p``'s hits from ``p.next`` on and ingest them (see ``feed``); after
        PASS_SECONDS of it the file is paused, the rest kept in ``FileState.pending``."""
        hits, n, i = p.hits, len(p.hits), p.next
        deadline = self.clock.monotonic() + PASS_SECONDS if p.data else math.inf  # a rotated file's end is never paused
        batch = self.batch
        while True:
            batch.begin()
            opened_before = engine.stats["incidents"]
            j = i
            while j < n:
                line_no = hits[j].line_no
                while j < n and hits[j].line_no == line_no:  # all hits of one line go together
                    hit = hits[j]
                    try:
                        item = stream.item(hit)
                        if isinstance(item, Flood):  # repeats of an earlier fact: counted, not asserted
                            engine.flooded(item)
                        elif item is not None:
                            engine.ingest(item)
                            batch.count_fact()
                    except STORE_ERRORS:
                        raise  # the store's trouble, not this line's: input pauses
                    except Exception as exc:  # this line alone is poison: set it aside, go on
                        batch.quarantine("line", f"{t.path}:{hit.line_no}", hit.line.decode("utf-8", "replace"), exc)
                    j += 1
                    batch.count_hit()
                if j < n and (batch.full() or self.stop.is_set() or self.clock.monotonic() >= deadline):
                    break
            for flood in stream.grown():  # repeats after a flood's first one in this piece
                engine.flooded(flood)
            opened = engine.stats["incidents"] - opened_before
            if opened > 0:
                batch.opened(_written_at(t), opened)
            if j >= n:
                t.offset, t.line_no = p.end
                batch.touch(t)
                batch.count_lines(p.lines)
                if t.held:
                    t.held = False
                    state_of(t).pending = None
                    self.paused.pop(t.path, None)
                return True
            # a piece of a burst: commit up to the end of the last line ingested
            last = hits[j - 1]
            t.offset, t.line_no = _line_end(p.read_pos, p.data, last.offset), last.line_no
            batch.touch(t)
            batch.commit()
            if self.stop.is_set():
                return False
            if self.clock.monotonic() >= deadline:  # the others' turn: the rest at the next pass
                p.next = j
                state_of(t).pending, t.held = p, True
                self.paused[t.path] = t
                return True
            i = j

    def _count_long_lines(self, t: Tailed, scanner: Scanner) -> None:
        st = state_of(t)
        cut = scanner.long_lines_cut - st.long_lines
        if cut > 0:
            st.long_lines = scanner.long_lines_cut
            self.metrics.source_errors.labels(kind="file", reason="long_line").inc(cut)
            if self.limiter.ok("long:" + t.path):
                logger.warning(
                    "%s: %d line(s) longer than %d bytes cut (their head is still scanned)",
                    t.path,
                    cut,
                    scanner.max_line,
                )


def _written_at(t: Tailed) -> float:
    """When the bytes that opened an incident were written, at the latest: the file's mtime
    (its last write; for the detection latency metric), or when they were read if earlier."""
    try:
        fh: Any = t.fh
        return min(t.read_at, os.fstat(fh.fileno()).st_mtime) if fh is not None else t.read_at
    except OSError:
        return t.read_at


def _line_end(read_pos: int, data: bytes, offset: int) -> int:
    """File offset just past the newline that ends the line that starts at ``offset`` (``data``
    was read from ``read_pos``)."""
    k = offset - read_pos
    nl = data.find(b"\n", max(0, k))
    return read_pos + nl + 1


class SpoolIngest:
    """The agents' spool -> the engine, inside the batch, with the spool's positions."""

    def __init__(
        self,
        path: str,
        store: Store,
        batch: Batch,
        metrics: Metrics,
        limiter: LogLimiter,
        *,
        trust_job_claims: bool,
        interval: float = 0.0,
        clock: Clock = SYSTEM,
    ):
        self.path = path
        self.interval = interval  # 0: every feed() reads (tests step the controller by hand)
        self.clock = clock
        self._looked = -math.inf
        self.store = store
        self.batch = batch
        self.metrics = metrics
        self.limiter = limiter
        self.trust_job_claims = trust_job_claims
        self._refused_seen: dict[str, int] = {}
        self._offsets_json = OffsetsJSON()
        self.watch: SpoolWatch | None = None  # inotify on a local spool folder, under run() (pace)
        self.reopen()

    def pace(self, interval: float, clock: Clock, wake: threading.Event | None = None) -> None:
        """The running controller: a look at every node at most every ``interval`` s, and
        inotify on a local spool folder saying which nodes' files to look at
        (``sources.spool_watch``): a look at only those is made as soon as they are written,
        and sets ``wake`` (the loop's) so that it is."""
        self.interval, self.clock = interval, clock
        if self.watch is None:
            self.watch = SpoolWatch(self.path, clock, on_change=wake.set if wake is not None else None)
            if not self.watch.start():
                self.watch = None

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def reopen(self) -> None:
        """A reader at the positions the store has committed (at start, and after a store outage)."""
        from engine.sources.spool import SpoolReader

        raw = self.store.meta("spool_offsets")
        saved: dict[str, Any] = (json.loads(raw) if raw is not None else None) or {}
        self.reader = SpoolReader(
            self.path, {k: tuple(v) for k, v in saved.items()}, trust_job_claims=self.trust_job_claims
        )
        self._unreadable_seen = 0  # the new reader counts (and says) what it cannot read afresh
        self._looked = -math.inf
        self._mark()

    def _mark(self) -> None:
        """What the reader has now is what the store holds: only what comes after is news."""
        self._garbage = self.reader.stats.get("garbage", 0)
        self._last_offsets = dict(self.reader.offsets)

    def skip_to_end(self) -> None:
        """A new database: what the spool holds already is history (see SpoolReader.skip_to_end)."""
        self.reader.skip_to_end()
        self._mark()

    def healthy(self) -> bool:
        """Whether the spool is a readable folder (said in the log, rate-limited, when not)."""
        ok = os.path.isdir(self.path)
        if ok and self.reader.unreadable:
            return False  # a file or the folder cannot be read: said at ERROR by the reader, once each
        if not ok and self.limiter.ok("spool-missing"):
            logger.warning("spool %s: not a readable folder", self.path)
        return ok

    def feed(self, engine: Engine) -> None:
        """Read what the agents appended; ingest it with the spool's new positions (at most
        every ``interval`` seconds)."""
        if self.interval > 0:
            now = self.clock.monotonic()
            if now - self._looked < self.interval and not (self.watch is not None and self.watch.pending()):
                return  # (a look that inotify names the files of costs their stats only: made at once)
            self._looked = now
        reader = self.reader
        try:
            facts = reader.read(SPOOL_READ_BYTES, self.watch.take() if self.watch is not None else None)
            readable = os.path.isdir(self.path) and not reader.unreadable
            self.metrics.source_health.labels(source="spool").set(1 if readable else 0)
        except OSError as exc:
            if self.watch is not None:
                self.watch.lost()  # the names it gave were not looked at: the next look is at every node
            self.metrics.source_health.labels(source="spool").set(0)
            if self.limiter.ok("spool"):
                logger.warning("spool %s: read failed: %s", self.path, exc)
            return
        for key, reason in _SPOOL_REFUSALS:
            seen = reader.stats.get(key, 0)
            d = seen - self._refused_seen.get(key, 0)
            if d > 0:
                self.metrics.refused.labels(reason=reason).inc(d)
                self._refused_seen[key] = seen
        unreadable = reader.stats.get("unreadable", 0)
        if unreadable > self._unreadable_seen:
            self.metrics.source_errors.labels(kind="spool", reason="unreadable").inc(unreadable - self._unreadable_seen)
            self._unreadable_seen = unreadable
        garbage = reader.stats.get("garbage", 0)
        new_garbage = garbage - self._garbage
        if not facts and not new_garbage and reader.offsets == self._last_offsets:
            return
        batch = self.batch
        batch.begin()
        for f in facts:
            try:
                engine.ingest(f)  # the engine gives a node's fact the job running there
                batch.count_fact()
            except STORE_ERRORS:
                raise
            except Exception as exc:  # this fact alone is poison
                batch.quarantine("spool", f"spool:{f.origin}", f.to_json(), exc)
        self._last_offsets = dict(reader.offsets)
        batch.spool_read(self._offsets_json.encode(reader.offsets), max(0, new_garbage))
        if new_garbage > 0:
            self._garbage = garbage
            self.metrics.spool_garbage.set(garbage)
            if self.limiter.ok("spool-garbage"):
                logger.warning(
                    "spool %s: %d line(s) skipped that are not facts (garbage, truncated or too long JSON); %d so far",
                    self.path,
                    new_garbage,
                    garbage,
                )


class OffsetsJSON:
    """``json.dumps({node: list(offset)})`` of the spool's positions, the same text, with each
    node's part kept from the last call while its offset is the same: at 2,048 nodes the whole
    dump cost ~5 ms a commit, and a look at the spool changes a few nodes' positions."""

    def __init__(self) -> None:
        self._parts: dict[str, tuple[Any, str]] = {}

    def encode(self, offsets: dict[str, Any]) -> str:
        parts, old = {}, self._parts
        for k, v in offsets.items():
            got = old.get(k)
            if got is None or got[0] != v:
                got = (v, f"{json.dumps(k)}: {json.dumps(list(v))}")
            parts[k] = got
        self._parts = parts
        return "{" + ", ".join(p for _, p in parts.values()) + "}"
