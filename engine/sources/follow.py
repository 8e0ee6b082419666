"""Following log files: globs (files that appear later too) and paths handed in by the
scheduler poller, tailed with watchdog (inotify, or its polling observer for NFS/Lustre where
other hosts' writes raise no events here).

Rotation (the path now names another inode), truncation (the file shrank), deletion and
re-creation are handled: the old file is read to its end before the new one is started. The
read position is the scanner's: the start of the first line not yet complete, so a restart that
resumes from a saved position neither repeats nor skips a line.

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
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

logger = logging.getLogger(__name__)

__all__ = ["Follower", "Tailed", "glob_base"]

READ_BYTES = 1 << 20


def glob_base(pattern: str) -> str:
    """The longest leading directory of a glob that has no wildcard."""
    parts = os.path.abspath(pattern).split(os.sep)
    base = []
    for p in parts[:-1]:
        if any(c in p for c in "*?["):
            break
        base.append(p)
    return os.sep.join(base) or os.sep


@dataclass
class Tailed:
    path: str
    fh: object | None = None
    inode: int | None = None
    offset: int = 0  # bytes read from the current inode
    line_no: int = 0
    meta: dict = field(default_factory=dict)  # the caller's context (job, attempt, scanner...)
    gone: bool = False
    errors: int = 0


class _Handler(FileSystemEventHandler):
    def __init__(self, follower: "Follower"):
        self.follower = follower

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            return
        for p in (getattr(event, "src_path", None), getattr(event, "dest_path", None)):
            if p:
                self.follower._mark(os.fsdecode(p))


class Follower:
    def __init__(self, globs: list[str], poll: float | None = None,
                 offsets: Mapping[str, tuple[int | None, int, int]] | None = None,
                 on_new: Callable[[Tailed], None] | None = None):
        self.globs = [os.path.abspath(g) for g in globs]
        self.poll = poll
        self.saved = dict(offsets or {})
        self.on_new = on_new
        self.files: dict[str, Tailed] = {}
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self.wake = threading.Event()
        self._observer = None
        self._watched: set[str] = set()
        self.stats = {"read_bytes": 0, "rotations": 0, "truncations": 0, "unreadable": 0}

    # -- watching ----------------------------------------------------------------------------
    def start(self) -> None:
        self._observer = PollingObserver(timeout=self.poll) if self.poll else Observer()
        for g in self.globs:
            self._watch_dir(glob_base(g), recursive="**" in g)
        self._observer.start()
        self.rescan()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)
        for t in self.files.values():
            self._close(t)

    def _watch_dir(self, directory: str, recursive: bool = False) -> None:
        if self._observer is None or directory in self._watched:
            return
        if not os.path.isdir(directory):
            return  # rescan() retries: the folder may appear later
        try:
            self._observer.schedule(_Handler(self), directory, recursive=recursive)
            self._watched.add(directory)
        except OSError as exc:
            logger.warning("cannot watch %s: %s", directory, exc)

    def _mark(self, path: str) -> None:
        with self._lock:
            self._dirty.add(os.path.abspath(path))
        self.wake.set()

    def add(self, path: str, meta: dict | None = None) -> Tailed:
        """Follow one more path (e.g. a job's stdout that the scheduler named)."""
        path = os.path.abspath(path)
        t = self.files.get(path)
        if t is None:
            t = Tailed(path, meta=dict(meta or {}))
            saved = self.saved.get(path)
            if saved is not None:
                t.inode, t.offset, t.line_no = saved
            self.files[path] = t
            if self.on_new is not None:
                self.on_new(t)
            self._watch_dir(os.path.dirname(path))
        elif meta:
            t.meta.update(meta)
        self._mark(path)
        return t

    def rescan(self) -> None:
        """Pick up files that match a glob now (also the ones no event told us about)."""
        for g in self.globs:
            self._watch_dir(glob_base(g), recursive="**" in g)
            for p in glob.glob(g, recursive=True):
                if os.path.isfile(p):
                    self.add(p)
        with self._lock:
            self._dirty.update(self.files)

    # -- reading -----------------------------------------------------------------------------
    def _close(self, t: Tailed) -> None:
        if t.fh is not None:
            try:
                t.fh.close()
            except OSError:
                pass
            t.fh = None

    def _open(self, t: Tailed) -> bool:
        try:
            fh = open(t.path, "rb")
            st = os.fstat(fh.fileno())
        except OSError as exc:
            if not t.gone:
                logger.info("%s: %s", t.path, exc.strerror or exc)
            t.gone = True
            self.stats["unreadable"] += 0 if isinstance(exc, FileNotFoundError) else 1
            return False
        t.gone = False
        if t.inode is not None and t.inode != st.st_ino:
            t.offset, t.line_no = 0, 0  # a new file under the old name
            t.meta["reset"] = True
        elif st.st_size < t.offset:
            t.offset, t.line_no = 0, 0
            t.meta["reset"] = True
        t.inode = st.st_ino
        fh.seek(t.offset)
        t.fh = fh
        return True

    def read_ready(self, max_bytes: int = READ_BYTES) -> Iterator[tuple[Tailed, bytes]]:
        """Yield (file, bytes) for every followed file that has new data. The caller must set
        ``t.offset``/``t.line_no`` to what it consumed (the scanner's position) before the next call.
        An empty bytes object with ``t.meta['eof_old']`` set means: the old inode is finished."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        for path in sorted(dirty):
            t = self.files.get(path)
            if t is None:
                continue
            if t.fh is None and not self._open(t):
                continue
            while True:
                try:
                    data = t.fh.read(max_bytes)
                except OSError as exc:
                    logger.warning("%s: read failed: %s", t.path, exc)
                    self._close(t)
                    break
                if data:
                    self.stats["read_bytes"] += len(data)
                    yield t, data
                    if len(data) == max_bytes:
                        continue
                # at the end of what the open file has: has the name moved on?
                try:
                    st = os.stat(t.path)
                except FileNotFoundError:
                    st = None
                except OSError:
                    break
                cur = os.fstat(t.fh.fileno()) if t.fh is not None else None
                if st is None or (cur is not None and st.st_ino != cur.st_ino):
                    self.stats["rotations"] += 1
                    t.meta["eof_old"] = True
                    yield t, b""
                    t.meta.pop("eof_old", None)
                    self._close(t)
                    t.inode = None if st is None else t.inode
                    if st is not None and self._open(t):
                        continue
                    break
                if cur is not None and st.st_size < t.fh.tell():
                    self.stats["truncations"] += 1
                    t.meta["eof_old"] = True
                    yield t, b""
                    t.meta.pop("eof_old", None)
                    self._close(t)
                    t.offset = st.st_size + 1  # force _open to start again at 0
                    if self._open(t):
                        continue
                break
