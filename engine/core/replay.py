"""Replay: evaluate a rulebook over historical logs on virtual time.

Each file is scanned in large chunks by one multi-pattern scanner; the rare hits become facts
(time from the line's own timestamp, else the file's last one), and the facts of all files are
then fed to the engine in time order, so a kernel log and a job log given separately correlate
as they would have live.

Usage::

    result = replay(["slurm-1234.out", "kern.log"], compiled, Store("recover.db"))
    for inc in result.incidents: ...
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from engine.facts import Fact
from engine.core.context import ClusterContext, FileContext, job_from_filename
from engine.core.converter import HitConverter
from engine.core.floods import Flood
from engine.core.linefacts import StreamFacts
from engine.core.linetime import LineClock, log_zone
from engine.core.logend import TailState, log_end, takes_ending
from engine.core.scanner import Scanner, scanner_for
from engine.rulebook.compile import CompiledRulebook

if TYPE_CHECKING:  # imported where a replay runs: loading a scanner needs neither
    from engine.core.incidents import ClosedIncident
    from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = [
    "replay",
    "replay_inputs",
    "not_a_log",
    "Input",
    "file_input",
    "ReplayResult",
    "scan_chunks",
    "CHUNK",
]

CHUNK = 4 * 1024 * 1024
#: items (facts, floods) the engine takes per store transaction in replay (~0.1-0.3 s of work)
REPLAY_TX_ITEMS = 1000
#: the cyclic collector's first threshold while a replay runs (Python's default: 700 allocations).
#: A replay keeps every fact of its files until the engine has taken them, and each collection
#: of the older generations walks them all: 1,300 collections cost ~6 % of a 400 MiB replay's
#: CPU. What a replay builds is nearly free of cycles (a few hundred objects at its end), so
#: collecting a hundred times less often costs no memory (peak RSS the same, measured).
REPLAY_GC_GEN0 = 100_000
_gc_lock = threading.Lock()
_gc_held: list[tuple[int, int, int]] = []  # the thresholds before the first replay that runs now
_gc_running = 0


@dataclass
class ReplayResult:
    incidents: list[ClosedIncident] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    hits: int = 0
    facts: int = 0
    long_lines: int = 0
    unreadable: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def _file_chunks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while True:
            data = fh.read(CHUNK)
            if not data:
                return
            yield data


def scan_chunks(
    chunks: Iterable[bytes],
    scanner: Scanner,
    converter: HitConverter,
    ctx: FileContext,
    index_map: Sequence[int],
    on_bytes: Callable[[int], None] | None = None,
    block: int | None = None,
) -> Iterator[Fact | Flood]:
    """Yield the facts and floods of one stream (context lines update ``ctx``); ``index_map``
    maps the scanner's matcher numbers to the converter's. ``block``: the scanner's progress
    block in bytes (None: the setting; 0: every progress line, see engine.core.blockscan)."""
    stream = StreamFacts(scanner, converter, ctx, index_map, block=block)
    convert = stream.item
    for data in chunks:
        if on_bytes:
            on_bytes(len(data))
        for hit in stream.scan(data):  # StreamFacts.feed without its (line, offset, item) per hit
            item = convert(hit)
            if item is not None:
                yield item
    for hit in stream.scan_end():
        item = convert(hit)
        if item is not None:
            yield item


class IgnoredBlock:
    """Where a log's end is read, an error block the program itself reports as ignored does not
    count: Python's ``Exception ignored in: <function X.__del__>`` (an exception in a destructor
    or at interpreter shutdown, printed and swallowed) and a logging handler's own ``--- Logging
    error ---``. A matcher whose ``attrs`` say ``log_block: ignored`` marks such a header; the
    traceback it announces (a fact of a matcher with ``log_block: traceback``) and the facts of
    the first line after that traceback's header (its exception line) belong to it. Their facts
    are kept (rules may read them); they only do not become the log's last word, so a job that
    printed them and then ended, or that trained on, did not end on them. A traceback printed with
    no header, whose outermost frame is a side thread's own entry (a matcher with ``log_block:
    side_frame``: a queue feeder thread's ``_feed``), is such a block as well (LogTail)."""

    def __init__(self) -> None:
        self.state = ""  # "" (none), "header", "traceback", "line"
        self.origin = ""
        self.seen = 0

    def holds(self, fact: Fact) -> bool:
        """Whether ``fact`` belongs to an open ignored block (updating the block's state)."""
        block = fact.get("log_block") if fact.kind == "log" else None
        if block == "ignored":
            self.state, self.origin, self.seen = "header", "", 0
            return True
        if not self.state:
            return False
        frame = block in ("traceback", "side_frame")  # the traceback's header or one of its frames
        if self.state == "header":
            self.seen += 1
            if frame:
                self.state = "traceback"
                return True
            if self.seen <= 2:  # a line of the header's own report (loguru's "Record was: ...")
                return True
        elif self.state == "traceback" and block != "traceback":
            if block != "side_frame":
                self.state, self.origin = "line", fact.origin
            return True
        elif self.state == "line" and fact.origin == self.origin:
            return True  # another matcher's fact of the same exception line
        self.state = ""
        return False


class HandledFailure:
    """A failure the program itself handled does not stand when the job then trains on. A matcher
    whose ``attrs`` say ``handled: true`` reads a program's own words that it dealt with what went
    wrong and goes on (fairseq's "Skipping batch" after a CUDA OOM, a batch-size finder reducing
    the batch, torchelastic's "will restart worker group", Ray Train's ``FailureDecision.RETRY``).
    When such a notice sits between two progress lines, the facts this input gave between them
    (the failure, a traceback printed with the notice) are the failure it handled: replay leaves
    them out (their floods too), so no rule reads them. The notice's own line keeps its facts: a
    line that names what it skipped ("loss is nan ..., skipping batch") is its own matchers'
    business. A notice that no progress follows decides nothing: a restart that fails again, or a
    retry the log ends on, still ends on its failure; a launcher's task exit after the notice (a
    matcher with ``attrs: {task_exit: true}``: srun's "Exited with exit code", an MPI launcher's)
    says the handling did not keep the job alive; and a failure after which other ranks only
    print progress, with no notice between, stands. A notice whose ``attrs`` also say
    ``own_line: true`` is a line that is both the failure and its handling ("CUDA out of memory,
    retrying after freeing cache", TensorFlow's "failed call to cuInit" before it runs on the
    CPU): progress after it leaves its own line's facts out too. A line whose ``attrs`` say
    ``listing: true`` is a row of a listing of jobs' states (sacct's "OUT_OF_ME+", "TIMEOUT"):
    progress after it says the state was another job's, and only that line's facts are left out."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, str]] = []  # (position in replay's collected list, origin)
        self.notices: set[str] = set()  # the origins (lines) of the notices among them
        self.own_lines: set[str] = set()  # the origins of notices that cover their own line
        self.listings: set[str] = set()  # the origins of rows of a listing of jobs' states
        self.listing_ids: set[str] = set()  # the ids of listing facts (a flood repeats one per row)

    def seen(self, fact: Fact, pos: int) -> None:
        """A non-progress fact of this input at ``pos``."""
        self.pending.append((pos, fact.origin))
        if fact.get("listing"):
            self.listings.add(fact.origin)
            self.listing_ids.add(fact.id)
        if fact.get("handled"):
            (self.own_lines if fact.get("own_line") else self.notices).add(fact.origin)
        elif fact.get("task_exit"):
            self.notices, self.own_lines = set(), set()  # the launcher ended the tasks: not handled

    def flood(self, flood: Flood) -> None:
        """A repeat of a fact: a listing's next row is a row too."""
        if flood.fact_id in self.listing_ids:
            self.listings.add(flood.last_origin)

    def progress(self) -> list[int]:
        """The job trained: the positions of the facts a recovery notice covered (none without one)."""
        kept = self.notices - self.own_lines  # a line that is failure and notice both is covered
        rows = self.listings
        noticed = self.notices or self.own_lines  # a notice among them (its own line kept or not)
        handled = [pos for pos, o in self.pending if (o not in kept if noticed else o in rows)]
        self.pending, self.notices, self.own_lines, self.listings = [], set(), set(), set()
        return handled


class RecoveredStall:
    """A stall the same source later reports over is no failure. A matcher whose ``attrs`` say
    ``stall: true`` reads a notice that operations wait on a server and go on when it answers
    (the NFS client's "nfs: server fs1 not responding, still trying", Lustre's "... was lost; in
    progress operations using this service will wait for recovery to complete"), its ``server``
    group (or ``import``, a Lustre client's import of the server) naming what they wait on; one
    whose ``attrs`` say ``recovers: <class>`` (``recovers: storage_io_error``) reads the same
    source's notice that the server answers again ("nfs: server fs1 OK", Lustre's "Connection
    restored to ..."), with the same group. A stall and a recovery are the same server's only on
    the same node (the fact's ``node``: a syslog file of several nodes has each node's client
    speak for its own mount). When the recovery follows in the same input, replay
    leaves out every fact of the stall lines of that server before it (other matchers' facts of
    those lines too), so no rule reads a stall that ended, when no job is in sight in the replay
    (a kernel log read on its own, where a stall alone would say storage_io_error): with a job,
    a stall that held it up while it failed still explains the failure, recovered or not. What
    failed meanwhile stands: a soft mount's "not responding, timed out" (the operations failed)
    is no stall notice. Without a recovery nothing is left out. Replay only."""

    def __init__(self) -> None:
        self.recent: deque[tuple[str, int, str]] = deque(maxlen=8)  # (origin, position, id) of the last facts
        # a server is (node, server): in a log of several nodes each node's client speaks for itself
        self.lines: dict[str, tuple[str, str]] = {}  # the origin (line) of a stall notice -> its server
        self.stalls: dict[
            tuple[str, str], list[tuple[int, str]]
        ] = {}  # server -> (position, id) of its stall lines' facts
        self.over: dict[
            str, tuple[tuple[str, str], list[tuple[int, str]]]
        ] = {}  # id of an ended stall's fact -> (server, all)

    def seen(self, fact: Fact, pos: int) -> list[int]:
        """A non-progress fact of this input at ``pos``; returns the positions a recovery ends."""
        name = str(fact.get("server") or fact.get("import") or "")
        server = (str(fact.get("node") or ""), name)
        out: list[int] = []
        if fact.get("stall") and name:
            self.lines[fact.origin] = server
            waiting = self.stalls.setdefault(server, [])
            waiting += [(p, i) for origin, p, i in self.recent if origin == fact.origin]  # its line's others
            waiting.append((pos, fact.id))
        elif fact.origin in self.lines:
            self.stalls.setdefault(self.lines[fact.origin], []).append((pos, fact.id))
        elif fact.get("recovers") and name:
            ended = self.stalls.pop(server, [])
            out = [p for p, _ in ended]
            self.over.update({i: (server, ended) for _, i in ended})
            self.lines = {origin: s for origin, s in self.lines.items() if s != server}
        self.recent.append((fact.origin, pos, fact.id))
        return out

    def repeated(self, fact_id: str) -> list[int]:
        """A repeat (a flood) of a stall fact that a recovery ended: the server stalls again, so
        those facts stand after all (until a recovery ends them again); returns their positions."""
        if fact_id not in self.over:
            return []
        server, ended = self.over[fact_id]
        self.over = {i: v for i, v in self.over.items() if v[1] is not ended}
        self.stalls.setdefault(server, []).extend(ended)
        return [p for p, _ in ended]


def _names_job(item: Any) -> bool:
    """Whether a collected item places a job: a fact of a job, or a context line naming one."""
    if isinstance(item, Fact):
        return item.get("job") is not None
    return isinstance(item, tuple) and bool(item[1])


@dataclass
class OwnExit:
    """After a command's notice that it had nothing to act on (``attrs: {own_exit: true}``:
    killall's "no process found"), the launcher's report of its exit is the command's, not the
    job's work failing: replay leaves out the exit-code line of status 1 (killall's) within the
    next two facts of the notice, and that line's other facts; any other exit code stands."""

    origin: str = ""  # the notice's origin while waiting; the exit line's once it is left out
    left: int = 0  # facts left in which the exit line may still come
    taken: bool = False  # the exit line was left out: its other matchers' facts are left out too

    def left_out(self, fact: Fact) -> bool:
        """Whether replay leaves ``fact`` out of how the log ends."""
        if fact.get("own_exit"):
            self.origin, self.left, self.taken = fact.origin, 2, False
        elif self.taken and fact.origin == self.origin:
            return True
        elif self.left > 0 and fact.get("task_exit") and str(fact.get("exit_code")) == "1":  # killall's own
            self.origin, self.left, self.taken = fact.origin, 0, True
            return True
        elif self.left > 0:
            self.left -= 1
        else:
            self.origin, self.left, self.taken = "", 0, False
        return False


class LogTail:
    """How one input's log ends, read item by item as replay collects them: the last fact that
    counts (an ignored block's facts do not, IgnoredBlock), whether it was training progress, the
    last weak-evidence hit, exit-time cleanup and the program's ending after the last progress
    (``log_end``, engine/core/logend.py), the failures the program handled before training on
    (HandledFailure) and the stalls its source reported over (RecoveredStall)."""

    def __init__(self) -> None:
        self.state = TailState()  # how the log stands: last fact, progress, weak, ending, cleanup
        self.ignored = IgnoredBlock()
        self.handled = HandledFailure()
        self.stalls = RecoveredStall()
        self.stalls_over: set[int] = set()  # positions of stall lines' facts a recovery ended
        # the traceback header counted last, and how the log stood before it (a side frame undoes it)
        self.opened: tuple[Fact, TailState] | None = None
        self.header: Fact | None = None  # the last traceback header fact (its floods repeat it)
        self.side_frames: set[str] = set()  # ids of side frame facts (their floods repeat them)
        self.own_exit = OwnExit()

    def feed(self, item: Any, pos: int) -> list[int]:
        """One collected item at ``pos``; returns the positions of facts a recovery notice covered
        (HandledFailure), which replay leaves out (a recovered stall's are in ``stalls_over``)."""
        # a part of a table of peers (engine.core.peer_table) is output, not training progress
        trained = isinstance(item, Fact) and item.kind == "progress" and item.get("table") is None
        out: list[int] = []
        st = self.state
        if isinstance(item, Flood):
            self.stalls_over.difference_update(self.stalls.repeated(item.fact_id))
            self.handled.flood(item)
        if isinstance(item, Flood) and item.fact_id in self.side_frames and self._side_opened():
            return out  # a side frame again (a flood): the header just repeated opened a side block
        if isinstance(item, Flood) and self.ignored.state and self.header and item.fact_id == self.header.id:
            # a traceback header again, identical (a flood), after a side block: the main
            # program's own traceback starts, and the log may end in it (unless a side frame
            # follows: another side thread's traceback, such as a second queue feeder's)
            self.opened = (self.header, st.copy())
            self.ignored.state, st.last, st.progress = "", self.header, False
            return out
        if isinstance(item, Fact):
            if trained:
                out = self.handled.progress()
                self.ignored.state = ""  # progress ends an ignored block
            else:
                self.handled.seen(item, pos)
                self.stalls_over.update(self.stalls.seen(item, pos))
                if self.own_exit.left_out(item):
                    return [*out, pos]
                block = item.get("log_block") if item.kind == "log" else None
                if block == "traceback":
                    self.header = item
                if block == "side_frame":
                    self.side_frames.add(item.id)
                    if self._side_opened():
                        return out
                if self.ignored.holds(item):
                    return out  # a block the program reported as ignored is not how the log ends
                if block == "traceback":
                    self.opened = (item, st.copy())
            st.last = item
            if trained:
                st.weak, st.cleanup, st.ending = None, False, None
            elif item.kind == "log" and item.get("weak"):
                st.weak = item
            elif item.kind == "log" and item.get("cleanup"):
                st.cleanup = True
            elif st.weak is not None and item.get("recovers") == st.weak.get("weak_class"):
                st.weak = None  # what the keyword said is over ("nfs: server x OK": the storage answers)
            if not trained and takes_ending(item, st.ending):
                st.ending = item
        st.progress = trained
        return out

    def _side_opened(self) -> bool:
        """After a side thread's entry frame: whether the traceback header just counted opened it,
        then taken back out of how the log ends (the log does not end on a side block)."""
        if self.opened is None or self.state.last is not self.opened[0]:
            return False
        self.state = self.opened[1]
        self.opened, self.ignored.state = None, "traceback"
        return True

    def end(self, inp: "Input") -> Fact | None:
        return log_end(inp, self.state)


@dataclass(frozen=True)
class Input:
    """One stream to replay: a name (path), the source kind, and how to read it."""

    name: str
    chunks: Callable[[], Iterable[bytes]]
    source: str = "any"
    #: when the stream was last written (a file's mtime): a yearless stamp with nothing dated
    #: before it takes the latest year that does not put it after this (see linetime.py)
    not_after: float | None = None


def file_input(path: str) -> Input:
    try:
        mtime: float | None = os.stat(path).st_mtime
    except (OSError, ValueError):
        mtime = None  # reading it will say what is wrong
    return Input(path, lambda: _file_chunks(path), not_after=mtime)


#: file name endings of documents that sit next to logs (a README in a log folder, a report):
#: never what a job, the kernel or a Slurm daemon writes
DOC_SUFFIXES = (".md", ".markdown", ".rst", ".adoc", ".html", ".htm", ".pdf", ".ipynb")
#: the first bytes of files that are no text to scan: compressed, archived, a database
_MAGIC = (
    (b"\x1f\x8b", "gzip-compressed"),
    (b"BZh", "bzip2-compressed"),
    (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
    (b"PK\x03\x04", "a zip archive"),
    (b"SQLite format 3\x00", "an SQLite database"),
)


def not_a_log(path: str) -> str | None:
    """Why ``path`` is no log to replay (a document by its name, or binary by its first bytes),
    or None. ``recover replay logs/*`` takes everything a folder holds; a README or the incident
    database beside the logs would otherwise be scanned as a job's log (examples/README.md quotes
    the failures it describes, and each quote became an incident)."""
    name = os.path.basename(path).lower()
    for suffix in DOC_SUFFIXES:
        if name.endswith(suffix):
            return f"a document ({suffix}), not a log"
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return None  # replay reports what cannot be read
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return f"{what}, not a text log"
    return None


def _fewer_collections(fn: Callable[..., ReplayResult]) -> Callable[..., ReplayResult]:
    """Run ``fn`` with the collector's first threshold at ``REPLAY_GC_GEN0`` (it is the process's:
    replays in several threads raise it once and the last to end puts it back)."""

    @functools.wraps(fn)
    def paced(*args: Any, **kw: Any) -> ReplayResult:
        global _gc_running
        with _gc_lock:
            if _gc_running == 0:
                before = gc.get_threshold()
                _gc_held[:] = [before]
                gc.set_threshold(max(before[0], REPLAY_GC_GEN0), *before[1:])
            _gc_running += 1
        try:
            return fn(*args, **kw)
        finally:
            with _gc_lock:
                _gc_running -= 1
                if _gc_running == 0 and _gc_held:
                    gc.set_threshold(*_gc_held.pop())

    return paced


def replay(paths: Sequence[str], compiled: CompiledRulebook, store: Store, **kw) -> ReplayResult:
    return replay_inputs([file_input(p) for p in paths], compiled, store, **kw)


@_fewer_collections
def replay_inputs(
    inputs: Sequence[Input],
    compiled: CompiledRulebook,
    store: Store,
    *,
    job: str | None = None,
    attempt: int | None = None,
    nodes: Sequence[str] = (),
    scheduler: str = "slurm",
    on_bytes: Callable[[int], None] | None = None,
    extra_facts: Sequence[Fact] = (),
    network=None,
    on_fact: Callable[[Fact], None] | None = None,
    year: int | None = None,
    not_after: float | None = None,
    progress_block: int | None = None,
) -> ReplayResult:
    """``on_fact`` sees every source fact, in the order the engine takes them. ``year``: the year
    of stamps without one where nothing dated precedes them; ``not_after``: the time an input
    without its own (``Input.not_after``) was last written (see linetime.py). ``progress_block``:
    bytes per progress point the scanner keeps (None: the setting; 0: every line)."""
    result = ReplayResult()
    # no scheduler here: which job ran where is taken from the logs' own lines (explain says so)
    store.set_meta("context_source", "logs")
    store.context = "replay"
    cluster = ClusterContext()
    if job is not None and nodes:
        cluster.assign(job, attempt, nodes, 0.0)
    converter = HitConverter(compiled.matchers, cluster)
    collected: list[tuple[float, int, int, Any]] = []
    handled_out: set[int] = set()  # positions of failures the program handled (HandledFailure)
    stalls_over: set[int] = set()  # positions of stall notices their source reported over
    context_seq = [0]

    def on_context(at: float, job: str, att: int | None, nodes: frozenset) -> None:
        # which job ran where is learned while scanning, but applied in time order with the facts
        context_seq[0] += 1
        collected.append((at, -2, context_seq[0], ("context", job, att, nodes)))

    converter.on_context = on_context
    zone = log_zone(compiled.policy.log_timezone)
    for index, inp in enumerate(inputs):
        ctx = FileContext(
            path=inp.name,
            source=inp.source,
            job=job or job_from_filename(os.path.basename(inp.name)),
            attempt=attempt,
            dates=LineClock(zone=zone, year=year, not_after=inp.not_after if inp.not_after is not None else not_after),
        )
        if nodes:
            ctx.nodes.update(nodes)
        if ctx.job:
            cluster.assign(ctx.job, ctx.attempt, ctx.nodes, 0.0)
        scanner, index_map = scanner_for(compiled, inp.source)
        tail = LogTail()
        seq = -1
        try:
            for seq, item in enumerate(
                scan_chunks(inp.chunks(), scanner, converter, ctx, index_map, on_bytes, progress_block)
            ):
                # a flood is applied when its first repeat was seen, with every repeat counted by then
                collected.append((item.at, index, seq, item))
                handled_out.update(tail.feed(item, len(collected) - 1))
        except OSError as exc:
            logger.error("%s: cannot read: %s", inp.name, exc.strerror or exc)
            result.unreadable.append(inp.name)
            continue
        stalls_over.update(tail.stalls_over)
        end = tail.end(inp)
        if end is not None:
            collected.append((end.at, index, seq + 1, end))
        result.files += 1
        result.bytes += scanner.bytes_seen
        result.long_lines += scanner.long_lines_cut
    if stalls_over and not job and not any(_names_job(c[3]) for c in collected):
        handled_out |= stalls_over  # RecoveredStall: no job in sight for a stall to explain
    if handled_out:
        gone = {collected[i][3].id for i in handled_out}
        collected = [
            c
            for i, c in enumerate(collected)
            if i not in handled_out and not (isinstance(c[3], Flood) and c[3].fact_id in gone)
        ]
    for fact in extra_facts:
        collected.append((fact.at, -1, 0, fact))
    collected.sort(key=lambda t: (t[0], t[1], t[2]))
    result.hits = sum(1 for c in collected if isinstance(c[3], Fact)) + sum(
        f.count for f in {c[3] for c in collected if isinstance(c[3], Flood)}
    )
    result.hits += converter.progress_skipped  # matched, counted, left out by progress sampling
    from engine.core.incidents import Engine

    engine = Engine(compiled, store, scheduler=scheduler, cluster=cluster, network=network)
    try:
        # the store's writes are grouped, a transaction per REPLAY_TX_ITEMS items (a statement per
        # commit cost a quarter of the engine's time with a file database), and short, so that a
        # controller writing to the same database is never kept waiting long
        for start in range(0, len(collected), REPLAY_TX_ITEMS):
            with store.transaction():
                for at, _, _, item in collected[start : start + REPLAY_TX_ITEMS]:
                    if isinstance(item, tuple):
                        _, cjob, catt, cnodes = item
                        cluster.assign(cjob, catt, cnodes, at)
                    elif isinstance(item, Flood):
                        engine.flooded(item)
                    else:
                        if on_fact is not None:
                            on_fact(item)
                        engine.ingest(item)
        with store.transaction():
            result.incidents = engine.finish()
    finally:
        engine.close()
    result.facts = engine.stats["facts"]
    result.stats = dict(engine.stats) | {
        "dropped_values": converter.dropped_values,
        "progress_sampled_out": converter.progress_skipped,
        "handled_out": len(handled_out),  # facts of failures the program handled (HandledFailure)
    }
    return result
