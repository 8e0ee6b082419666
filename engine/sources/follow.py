"""Following log files: globs (files that appear later too) and paths handed in by the
scheduler poller, told of changes by inotify (our own reader on Linux, watchdog's observer
elsewhere: ``watching``) or watchdog's polling observer for NFS/Lustre, where other hosts' writes
raise no events here.

Rotation (the path now names another inode), truncation (the file shrank), deletion and
re-creation are handled: the old file is read to its end before the new one is started. A
rotated file that is renamed to a name the globs also match (``*.log*``) continues where it was
read under its old name (its inode is kept open for a while to recognise it). The read position
is the scanner's: the start of the first line not yet complete, so a restart that resumes from a
saved position neither repeats nor skips a line. A file that cannot be read (gone, unreadable,
not a regular file) is logged once, counted in ``stats`` and tried again; ``health()`` says how
many are in that state. One thread reads (``read_ready``); the watcher's only marks paths dirty.
Opening, identifying a file and telling rotation from truncation is ``engine.sources.tail``'s;
what is this module's own is the globbing, the open-file LRU, the hand-off of rotated files and
the positions the caller persists with the store.

Usage::

    f = Follower(["/logs/*.out"], poll=None)
    f.start()
    for tailed, data in f.read_ready():   # bytes appended since last time
        ...
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from collections import OrderedDict
from typing import Any, Callable, Generator, Iterator, Mapping

from engine.clock import SYSTEM, Clock
from engine.sources.globs import glob_base, glob_match
from engine.sources.openfiles import default_max_open
from engine.sources.tailed import Tailed
from engine.sources.globs import recursive as _recursive
from engine.sources.tail import (
    DELETED,
    MOVED,
    NO_DESCRIPTORS,
    NOT_REGULAR_FILE,
    OTHER,
    REPLACED,
    SAME,
    TRUNCATED,
    TailFile,
    identify,
    open_failure,
)
from engine.sources.watching import Handler, make_observer, schedule

logger = logging.getLogger(__name__)

__all__ = ["Follower", "Tailed", "glob_base"]

READ_BYTES = 1 << 20
#: at most this much is read from one file per read_ready() call, so that a file written faster
#: than it is read cannot starve the others (or a stop request); the rest waits for the next call.
#: The controller serves the spool between passes; how long a node's fatal Xid waits behind a
#: flooding job log is bounded by time, not bytes (live.ingest.PASS_SECONDS: 2 MiB of short
#: lines that all differ took 2.2 s to convert here, 2 MiB of a collapsed cascade ~0.15 s)
FILE_BUDGET = 2 << 20
#: a followed path that has been gone this long is forgotten (job logs come and go)
FORGET_GONE_S = 600.0
#: how long a rotated file's position is kept for a path that may turn out to be it
HANDOFF_S = 120.0
#: a file that keeps growing is checked for rotation and truncation at least this often
CHECK_S = 1.0
HANDOFF_MAX = 1024
#: with inotify watching, a rescan looks at every followed file's stat only every this many
#: rescans (and after a watched folder came back); in between, at the files inotify cannot vouch
#: for: not open, not in a watched folder, or grown since their last look at the end (a deletion
#: right after a write raises an event that the write's read already took). 10,000 stats: ~70 ms
SWEEP_EVERY = 10
#: on Linux, without a recursive glob, our own inotify reader (engine.sources.inotify) instead of
#: watchdog's observer; False: watchdog's (the portable path, and what tests compare it with)
OWN_INOTIFY = True


class Follower:
    def __init__(
        self,
        globs: list[str],
        poll: float | None = None,
        offsets: Mapping[str, tuple[int | None, int, int]] | None = None,
        on_new: Callable[[Tailed], None] | None = None,
        heads: Mapping[str, str] | None = None,
        start_at_end: bool = False,
        max_open: int | None = None,
        clock: Clock = SYSTEM,  # when a file was read, went missing, was handed off (wall time)
    ):
        self.clock = clock
        self.globs = [os.path.abspath(g) for g in globs]
        #: a file with no saved position starts at its end (the last complete line) while this is
        #: set: the caller's new database must not take the files' past for the present
        self.start_at_end = start_at_end
        self.max_open = max_open or default_max_open()
        self._open_lru: "OrderedDict[str, Tailed]" = OrderedDict()
        self.poll = poll
        self.saved = dict(offsets or {})
        self.heads = dict(heads or {})  # path -> file_head() when its offset was saved
        self.on_new = on_new
        self.files: dict[str, Tailed] = {}
        self._dirty: set[str] = set()
        #: files read, opened or rewound since the caller last emptied this: the only ones whose
        #: position may have moved (the controller's batch saves those that did)
        self.touched: dict[str, Tailed] = {}
        self._lock = threading.Lock()
        self.wake = threading.Event()
        self._observer: Any = None  # watching.make_observer's: watchdog's, or our inotify reader
        #: a full sweep at the next rescan: events were lost (inotify's queue overflowed)
        self._sweep_next = False
        self._unwatchable: set[str] = set()  # folders that could not be watched (said once each)
        self._rescans = 0
        self._watched: set[str] = set()
        self._watched_below: list[str] = []
        self._watches: dict[str, tuple[Any, int, bool]] = {}  # folder -> (watch, its inode, recursive)
        # inodes of rotated files (renamed away, still linked) that were read to a known position:
        # {inode: (open file, offset, line_no, since)}. The open file keeps the inode number from
        # being re-used, so a path that turns out to be that inode (a glob that matches rotated
        # names, e.g. *.log*) continues from there instead of reading it all again.
        self._handoff: dict[int, tuple[TailFile, int, int, float]] = {}
        self.stats = {
            "read_bytes": 0,
            "rotations": 0,
            "truncations": 0,
            "unreadable": 0,
            "vanished": 0,
            "read_errors": 0,
            "forgotten": 0,
            "handoffs": 0,
            "not_regular": 0,
            "lru_closed": 0,
            "emfile": 0,
            "started_at_end": 0,
        }

    # -- watching ----------------------------------------------------------------------------
    def start(self) -> None:
        recursive = any(_recursive(g) for g in self.globs)
        observer = make_observer(self.poll, recursive, self._mark_many, self._lost, own=OWN_INOTIFY)
        self._observer = observer
        for g in self.globs:
            self._watch_dir(glob_base(g), recursive=_recursive(g))
        for path in list(self.files):  # handed in before the start (the scheduler's first answer)
            d = os.path.dirname(path)
            if not any(d.startswith(w) for w in self._watched_below):
                self._watch_dir(d)
        observer.start()
        self.rescan()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)
        for t in self.files.values():
            self._close(t)
        self._expire_handoffs(0.0)

    def _expire_handoffs(self, max_age: float = HANDOFF_S) -> None:
        now = self.clock.wall()
        for ino, (fh, _, _, since) in list(self._handoff.items()):
            if now - since >= max_age or len(self._handoff) > HANDOFF_MAX:
                del self._handoff[ino]
                fh.close()

    def _watch_dir(self, directory: str, recursive: bool = False) -> None:
        if self._observer is None or directory in self._watched:
            return
        if not os.path.isdir(directory):
            return  # rescan() retries: the folder may appear later
        try:
            ino = os.stat(directory).st_ino
            watch = schedule(self._observer, Handler(self), directory, recursive)
            self._watched.add(directory)
            self._watches[directory] = (watch, ino, recursive)
            if recursive:
                self._watched_below.append(directory.rstrip(os.sep) + os.sep)
        except OSError as exc:  # its files are stat-ed on every rescan (see rescan)
            if directory not in self._unwatchable:
                self._unwatchable.add(directory)
                logger.warning("cannot watch %s: %s; its files are looked at on every rescan instead", directory, exc)
        else:
            self._unwatchable.discard(directory)

    def _mark(self, path: str) -> None:
        with self._lock:
            self._dirty.add(os.path.abspath(path))
        self.wake.set()

    def _mark_many(self, paths: list[str]) -> None:
        """A batch of paths from the inotify reader (absolute already: a watched folder's)."""
        with self._lock:
            self._dirty.update(paths)
        self.wake.set()

    def _lost(self) -> None:
        """The watcher lost events (or a watched folder): the next rescan looks at every file."""
        self._sweep_next = True
        self.wake.set()

    def add(self, path: str, state: Any = None) -> Tailed:
        """Follow one more path (e.g. a job's stdout that the scheduler named); ``state``: the
        caller's state for a path not followed yet (one already followed keeps its own)."""
        path = os.path.abspath(path)
        t = self.files.get(path)
        if t is None:
            t = Tailed(path, state=state)
            saved = self.saved.pop(path, None)  # only the first time: later it is stale
            if saved is not None:
                t.inode, t.offset, t.line_no = saved
                head = self.heads.pop(path, None)
                if head is not None and identify(path, t.offset, head) == OTHER:
                    # same name, maybe even the same inode number, but another file: start it at 0
                    logger.warning("%s: not the file whose position was saved; reading it from the start", path)
                    t.inode, t.offset, t.line_no = None, 0, 0
            elif self.start_at_end:
                self._at_end(t)
            self.files[path] = t
            if self.on_new is not None:
                self.on_new(t)
            d = os.path.dirname(path)
            if not any(d.startswith(w) for w in self._watched_below):
                self._watch_dir(d)
        elif not t.waiting:
            return t  # followed already: read when the watcher or a rescan sees it change
        self._mark(path)  # new, or waiting for its claim (the caller clears t.waiting next)
        return t

    def _at_end(self, t: Tailed) -> None:
        """Position ``t`` after the last complete line of the file there now (its line count too)."""
        try:
            f = TailFile.open(t.path)
        except OSError:
            return  # not there (yet) or not a file: a file that appears later is new
        try:
            lines, end = f.count_lines()
        except OSError:
            return
        finally:
            f.close()
        t.inode, t.offset, t.line_no = f.ino, end, lines
        self.stats["started_at_end"] += 1
        if end:
            logger.info(
                "%s: a new database: reading from its end (byte %d, line %d); --from-start reads the past",
                t.path,
                end,
                lines,
            )

    def matches(self, path: str) -> bool:
        """Does this path match one of the globs (without touching the file system)?"""
        return any(glob_match(g, path) for g in self.globs)

    def _check_watches(self) -> None:
        """A watched folder that was removed (or replaced) is watched again once it is back."""
        observer = self._observer
        if observer is None:  # not started: nothing is watched yet
            return
        for directory, (watch, ino, recursive) in list(self._watches.items()):
            try:
                same = os.stat(directory).st_ino == ino
            except OSError:
                same = False
            if same and getattr(watch, "alive", True):
                continue
            logger.info("%s: the watched folder was removed or replaced; watching it again when it is there", directory)
            try:
                observer.unschedule(watch)
            except (KeyError, OSError, ValueError) as exc:  # the watch may be gone with its folder already
                logger.debug("%s: unschedule: %s", directory, exc)
            del self._watches[directory]
            self._watched.discard(directory)
            below = directory.rstrip(os.sep) + os.sep
            if below in self._watched_below:
                self._watched_below.remove(below)
            self._watch_dir(directory, recursive)
            self._rescans = -1  # what was written meanwhile raised no event here: a full sweep

    def rescan(self, full: bool = True) -> None:
        """Pick up files that match a glob now (also the ones no event told us about), and mark
        the followed files whose stat changed. ``full=False`` (the controller's once-a-second
        rescan): with inotify watching, every file is looked at only every SWEEP_EVERY-th time."""
        if self._observer is not None:
            self._check_watches()
        self._rescans += 1
        sweep = full or self._observer is None or bool(self.poll) or self._rescans % SWEEP_EVERY == 0
        if self._sweep_next:
            self._sweep_next, sweep = False, True
        for g in self.globs:
            base = glob_base(g)
            self._watch_dir(base, recursive=_recursive(g))
            if not sweep and base in self._watched:
                continue  # a new file there raises an event, which read_ready follows (see matches)
            for p in glob.glob(g, recursive=True):
                if os.path.isfile(p) and not os.path.islink(p):
                    self.add(p)
        if sweep:  # a gone file is forgotten within FORGET_GONE_S plus a sweep period
            now = self.clock.wall()
            for path, t in list(self.files.items()):
                if t.gone and t.fh is None and t.gone_since is not None and now - t.gone_since > FORGET_GONE_S:
                    del self.files[path]
                    self.stats["forgotten"] += 1
        self._expire_handoffs()
        watched = self._watched
        changed = [
            t.path
            for t in self.files.values()
            if (sweep or t.fh is None or t.seen is None or t.path.rpartition(os.sep)[0] not in watched)
            and self._changed(t)
        ]
        with self._lock:
            self._dirty.update(changed)

    @staticmethod
    def _changed(t: Tailed) -> bool:
        """Whether a rescan should read ``t`` again: its path's stat is not what the last read
        to its end saw (written, rotated, truncated, replaced), or it is in trouble (unreadable:
        tried again; gone: read again when it is back). Files the watcher saw change are marked
        by it already; this is for what it cannot see (other hosts' writes on NFS, a lost event)."""
        if t.waiting:
            return False  # read once the caller claims it (add marks it then)
        try:
            st = os.lstat(t.path)  # as TailFile.change() sees it (a link there is never read)
        except FileNotFoundError:
            return not t.gone  # deleted since: the open file is read to its end
        except OSError:
            return True
        return t.errors > 0 or t.gone or t.seen != (st.st_ino, st.st_size, st.st_mtime_ns)

    def rewind(self, t: Tailed) -> None:
        """Read this file again from ``t.offset``/``t.line_no`` (after the caller set them back,
        e.g. to the last committed position): the open file is closed, the next read reopens it
        and the caller's scanner is reset (``t.reset``)."""
        self._close(t)
        t.held = False
        t.reset = True
        t.seen = None
        self.touched[t.path] = t
        self._mark(t.path)

    def health(self) -> tuple[int, int]:
        """(healthy, unhealthy) followed files."""
        bad = sum(1 for t in self.files.values() if not t.healthy)
        return len(self.files) - bad, bad

    # -- reading -----------------------------------------------------------------------------
    def _close(self, t: Tailed) -> None:
        self._open_lru.pop(t.path, None)
        t.resume_pos = None
        if t.fh is not None:
            t.fh.close()
            t.fh = None

    def _fail(self, t: Tailed, what: str, exc: OSError) -> None:
        why = f"{what}: {exc.strerror or exc}"
        t.seen = None
        if isinstance(exc, FileNotFoundError):  # open_failure(exc) == GONE
            if not t.gone:
                self.stats["vanished"] += 1
                # a job's log removed (cleaned up, rotated away) is routine
                logger.info("%s: gone (%s); following it again if it reappears", t.path, why)
            t.gone = True
            t.gone_since = t.gone_since or self.clock.wall()
            t.errors = 0
            t.last_error = why
            return
        t.gone, t.gone_since = False, None
        if t.errors == 0 or t.last_error != why:
            logger.warning("%s: unreadable (%s); retrying", t.path, why)
        self.stats["unreadable" if what == "open" else "read_errors"] += 1
        t.errors += 1
        t.last_error = why

    def _make_room(self, keep: Tailed | None = None) -> bool:
        """Close the least recently read open file (its read position is kept: it is opened
        again there when it changes, and the caller's scanner goes on where it was). False when
        nothing could be closed."""
        for _path, other in self._open_lru.items():
            if other is keep:
                continue
            pos = other.fh.pos if other.fh is not None else None
            self._close(other)
            other.resume_pos = pos
            self.stats["lru_closed"] += 1
            return True
        return False

    def _open(self, t: Tailed) -> bool:
        resume, t.resume_pos = t.resume_pos, None
        while len(self._open_lru) >= self.max_open and self._make_room(t):
            pass
        for _ in range(2):
            try:
                fh = TailFile.open(t.path)
                break
            except OSError as exc:
                why = open_failure(exc)
                if why == NO_DESCRIPTORS:
                    self.stats["emfile"] += 1
                    if self._make_room(t):
                        continue  # one descriptor freed: try once more
                elif why == NOT_REGULAR_FILE:
                    self.stats["not_regular"] += 1
                    exc = OSError(exc.errno, "not a regular file (a link, FIFO or device is never read)")
                self._fail(t, "open", exc)
                return False
        else:
            return False
        try:
            size = fh.size()
        except OSError as exc:
            fh.close()
            self._fail(t, "open", exc)
            return False
        self._open_lru[t.path] = t
        if t.errors or t.gone:
            logger.warning("%s: readable again", t.path)
        t.gone, t.gone_since, t.errors, t.last_error = False, None, 0, None
        handed = self._handoff.pop(fh.ino, None) if (t.inode is None and t.offset == 0) else None
        if handed is not None:
            old_fh, offset, line_no, _ = handed
            old_fh.close()
            if old_fh.dev == fh.dev and size >= offset:
                # a rotated file under its new name: what was read under the old one is not read again
                self.stats["handoffs"] += 1
                logger.info("%s: a rotated file already read to byte %d; continuing there", t.path, offset)
                t.inode, t.offset, t.line_no = fh.ino, offset, line_no
        if t.inode is not None and t.inode != fh.ino:
            t.offset, t.line_no = 0, 0  # a new file under the old name
        elif size < t.offset:
            if t.inode is not None:
                logger.warning(
                    "%s: shorter (%d bytes) than the position read (%d): truncated, reading it from the start",
                    t.path,
                    size,
                    t.offset,
                )
            t.offset, t.line_no = 0, 0
        if resume is not None and t.inode == fh.ino and size >= resume and t.offset <= resume:
            fh.pos = resume  # closed for room only: the caller's scanner is where it was
        else:
            fh.pos = t.offset
            t.reset = True  # the caller's scanner starts again at (offset, line_no)
        t.inode = fh.ino
        t.fh = fh
        return True

    def read_ready(self, max_bytes: int = READ_BYTES) -> Generator[tuple[Tailed, bytes], None, None]:
        """Yield (file, bytes) for every followed file that has new data. The caller must set
        ``t.offset``/``t.line_no`` to what it consumed (the scanner's position) before the next call,
        and reset its scanner to them when ``t.reset`` is set.
        An empty bytes object (with ``t.eof_old`` set) means: the old inode is finished
        (rotated, deleted or truncated); the caller flushes its last partial line.
        The caller may stop iterating at any time; what it did not get is read again later."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        todo = sorted(dirty, reverse=True)
        try:
            while todo:
                path = todo[-1]
                t = self.files.get(path)
                if t is not None and t.held:  # read on once the caller has taken what it was given
                    todo.pop()
                    self._mark(path)
                    continue
                if t is not None and t.waiting:  # read from where it is once it is claimed (add marks it)
                    todo.pop()
                    continue
                if t is None:
                    if not self.matches(path) or not os.path.isfile(path):
                        todo.pop()
                        continue
                    t = self.add(path)  # a new file that an event told us about
                    with self._lock:
                        self._dirty.discard(path)
                if t.fh is None and t.inode is None:
                    other = self._holder_of(t)
                    if other is not None:  # renamed to here and not noticed there yet
                        yield from self._read_file(other, max_bytes)
                yield from self._read_file(t, max_bytes)
                todo.pop()
        finally:
            if todo:  # the caller stopped early: keep the rest (and the file it was in) for next time
                with self._lock:
                    self._dirty.update(todo)

    def _holder_of(self, t: Tailed) -> Tailed | None:
        try:
            ino = os.stat(t.path).st_ino
        except OSError:
            return None
        for o in self.files.values():
            if o is not t and o.fh is not None and o.inode == ino:
                return o
        return None

    def _read_file(self, t: Tailed, max_bytes: int) -> Iterator[tuple[Tailed, bytes]]:
        if t.waiting:
            return
        self.touched[t.path] = t
        if t.fh is None and not self._open(t):
            return
        budget = FILE_BUDGET
        while t.fh is not None:
            try:
                pos = t.fh.pos
                data = t.fh.read(max_bytes)
            except OSError as exc:
                self._fail(t, "read", exc)
                t.reset = True
                self._close(t)  # reopened at t.offset next time
                return
            if data:
                if t.path in self._open_lru:
                    self._open_lru.move_to_end(t.path)
                self.stats["read_bytes"] += len(data)
                t.read_pos, t.read_at = pos, self.clock.wall()
                budget -= len(data)
                yield t, data
                if t.fh is None:  # the caller rewound it
                    return
                if t.held:
                    self._mark(t.path)  # the caller has more to convert: read on after that
                    return
                if len(data) == max_bytes:
                    if budget <= 0:
                        self._mark(t.path)  # more to read: next call
                        return
                    continue
            # at the end of what the open file has: has the name moved on? (checked when a read
            # finds nothing new, and at least every CHECK_S while a file keeps growing)
            now = self.clock.monotonic()
            if data and now - t.checked_at < CHECK_S:
                t.seen = None  # not looked at since it grew: the next rescan does (a deletion may hide behind)
                return
            t.checked_at = now
            old = t.fh
            change = old.change()
            st = old.last_stat
            t.seen = (
                (st.st_ino, st.st_size, st.st_mtime_ns) if change == SAME and st and st.st_size == old.pos else None
            )
            if change in (REPLACED, MOVED, DELETED):
                self.stats["rotations"] += 1
                gone = change != REPLACED  # the name is free until a new file takes it
                # still linked: it lives on under another name (where a glob may find it again)
                renamed = change == MOVED or (change == REPLACED and old.linked())
                if change == DELETED:
                    self.stats["vanished"] += 1
                    logger.info("%s: deleted; read to its end, following it again if it reappears", t.path)
                else:
                    logger.info("%s: rotated; the old file was read to its end", t.path)
                if gone:
                    t.gone, t.gone_since = True, self.clock.wall()
                t.eof_old = True
                yield t, b""
                t.eof_old = False
                eof, t.eof_position = t.eof_position, None
                if renamed and eof is not None and t.fh is old:
                    self._handoff[old.ino] = (old, eof[0], eof[1], self.clock.wall())
                    t.fh = None
                    if len(self._handoff) > HANDOFF_MAX:
                        self._expire_handoffs()
                self._close(t)
                t.inode = None if gone else t.inode
                if not gone and self._open(t):
                    continue
                return
            if change == TRUNCATED:
                self.stats["truncations"] += 1
                logger.warning("%s: truncated below byte %d; reading it again from the start", t.path, old.pos)
                t.eof_old = True
                yield t, b""
                t.eof_old = False
                t.eof_position = None
                self._close(t)
                t.offset, t.line_no = 0, 0
                if self._open(t):
                    continue
            return
