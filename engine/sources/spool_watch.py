"""Which nodes' spool files changed: inotify on a local spool folder, so that a look at the spool
stats only the nodes it names instead of every node (2,048 stats every 0.5 s at 2,048 nodes).

A spool folder on a network file system (NFS, Lustre, ...: agents on other hosts write it) raises
no events for their writes here, so the reader stats every node on every look there, as it does
without inotify. Only a folder on a file system known to be local (``LOCAL_FS``, by ``statfs``)
is watched. The safety net for what inotify may still miss: every ``SWEEP_S`` seconds, after a
queue overflow, and while the folder is not watched (not there yet, removed, the watch limit),
``take()`` answers ``None``: look at every node.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import threading
from collections.abc import Callable

from engine.clock import SYSTEM, Clock
from engine.sources import inotify

logger = logging.getLogger(__name__)

__all__ = ["LOCAL_FS", "SWEEP_S", "SpoolWatch", "local_fs"]

#: a look at every node's files at least this often (seconds), whatever inotify said
SWEEP_S = 5.0
#: statfs f_type of local file systems (linux/magic.h): ext2/3/4, xfs, btrfs, tmpfs, overlayfs,
#: zfs, f2fs, ramfs, reiserfs, jfs. Anything else (nfs, lustre, gpfs, cifs, fuse, ...) is polled.
LOCAL_FS = {
    0xEF53,
    0x58465342,
    0x9123683E,
    0x01021994,
    0x794C7630,
    0x2FC12FC1,
    0xF2F52010,
    0x858458F6,
    0x52654973,
    0x3153464A,
}


def fs_type(path: str) -> int | None:
    """statfs(2)'s f_type of the file system holding ``path`` (None when it cannot be told)."""
    lib = inotify._libc()
    if lib is None:
        return None
    buf = ctypes.create_string_buffer(512)  # struct statfs is 120 bytes on 64-bit Linux
    try:
        if lib.statfs(os.fsencode(path), buf) != 0:
            return None
    except (AttributeError, ctypes.ArgumentError):
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def local_fs(path: str) -> bool:
    return fs_type(path) in LOCAL_FS


class SpoolWatch:
    """inotify on the spool folder; ``take()`` says which file names changed since the last take."""

    def __init__(
        self,
        path: str,
        clock: Clock = SYSTEM,
        sweep_s: float = SWEEP_S,
        on_change: Callable[[], None] | None = None,
    ):
        self.path = os.path.abspath(path)
        self.clock = clock
        self.sweep_s = sweep_s
        #: called (on inotify's thread) after each batch of events: the controller's loop wakes
        #: on it, so an agent's Xid is read at once, not at the next tick
        self.on_change = on_change
        self._lock = threading.Lock()
        self._changed: set[str] = set()
        self._lost = True
        self._swept = -math.inf
        self._ino: inotify.Inotify | None = None
        self._watch: inotify.Watch | None = None
        self._tried = -math.inf

    def start(self) -> bool:
        """Watch the folder if it is on a local file system and inotify is there; False: every
        look stats every node (said in the log)."""
        if not inotify.available():
            return False
        if not local_fs(self.path):
            logger.info(
                "spool %s: not on a local file system (or not there): every node's files are looked at", self.path
            )
            return False
        try:
            self._ino = inotify.Inotify(self._paths, self.lost)
            self._ino.start()
        except OSError as exc:
            logger.warning("spool %s: no inotify (%s): every node's files are looked at", self.path, exc)
            self._ino = None
            return False
        self._schedule()
        return True

    def _schedule(self) -> None:
        ino = self._ino
        if ino is None:
            return
        self._tried = self.clock.monotonic()
        if self._watch is not None:
            ino.unschedule(self._watch)
            self._watch = None
        try:
            self._watch = ino.schedule(None, self.path)
        except OSError as exc:
            logger.warning("spool %s: cannot watch it (%s): every node's files are looked at", self.path, exc)
        with self._lock:
            self._lost = True  # what was written before the watch: one look at every node

    def _paths(self, paths: list[str]) -> None:
        names = [os.path.basename(p) for p in paths]
        with self._lock:
            self._changed.update(names)
        if self.on_change is not None and names:
            self.on_change()

    def pending(self) -> bool:
        """Whether events named files since the last take() while the watch holds: a look now
        stats only those (cheap), so it need not wait for the paced look at every node."""
        with self._lock:
            named, lost = bool(self._changed), self._lost
        return named and not lost and self._watching()

    def _watching(self) -> bool:
        """Whether the watch on the folder holds (scheduled, its folder not gone)."""
        return self._watch is not None and self._watch.alive

    def lost(self) -> None:
        """Events were lost: the next take() answers None."""
        with self._lock:
            self._lost = True

    def take(self) -> set[str] | None:
        """The names of the spool files written, created, moved or removed since the last take;
        ``None``: look at every node (not watching, a sweep due, events lost)."""
        if self._ino is None:
            return None
        now = self.clock.monotonic()
        if not self._watching() and now - self._tried >= self.sweep_s:
            self._schedule()  # the folder came back, or the watch limit has room again
        with self._lock:
            names, self._changed = self._changed, set()
            lost, self._lost = self._lost, False
        if lost or not self._watching() or now - self._swept >= self.sweep_s:
            self._swept = now
            return None
        return names

    def close(self) -> None:
        if self._ino is not None:
            self._ino.stop()
            self._ino.join(2)
            self._ino = None
