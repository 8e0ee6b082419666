"""A single-thread inotify reader of our own (Linux only), for the follower's folders.

watchdog's inotify observer runs a pipeline of threads (an emitter per watch, a dispatcher)
and builds an event object per kernel event: at 10,000 followed logs each written once every
4 s (2,500 IN_MODIFY a second) that was ~6 % of a core. This reader is one thread that waits
for the inotify descriptor to become readable, lets the events of the next ``COALESCE_S``
gather, reads them all with one ``read``, and hands the paths they name to its callback once
per batch (the follower takes its lock once and wakes the loop once).

It duck-types the part of watchdog's observer the follower uses (``schedule``, ``unschedule``,
``start``, ``stop``, ``join``) and watches folders only, not recursively; the follower picks it
on Linux when no glob is recursive and falls back to watchdog otherwise (``watching``).

- ``IN_Q_OVERFLOW`` (the kernel's queue was full, events were lost): ``on_lost`` is called; the
  follower's next rescan then looks at every followed file (a full sweep).
- A watched folder removed or moved away (``IN_IGNORED``): its watch is marked dead and
  ``on_lost`` is called; the follower watches it again once it is back (``_check_watches``).
- The watch limit (``fs.inotify.max_user_watches``, ``ENOSPC``): ``schedule`` raises an
  ``OSError`` that says so; the follower then stats that folder's files on every rescan.
- Deleted, renamed and re-created files: ``IN_DELETE``, ``IN_MOVED_FROM``/``IN_MOVED_TO`` and
  ``IN_CREATE`` name the path, which is marked; the follower's read tells what happened.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import select
import struct
import sys
import threading
from typing import Any, Callable, Iterable

logger = logging.getLogger(__name__)

__all__ = ["Inotify", "available", "parse_events"]

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = 0o2000000

#: what a folder is watched for: what changes a file's bytes, metadata or which file a name is
#: (not opens and closes without a write: see follow.EVENTS)
MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_ONLYDIR
#: after the descriptor became readable, wait this long for more events before reading: one
#: wake-up and one lock per batch instead of per event (the loop waits longer between passes)
COALESCE_S = 0.02
READ_SIZE = 1 << 16
_HEADER = struct.Struct("iIII")


def available() -> bool:
    return sys.platform.startswith("linux") and _libc() is not None


_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
            _LIBC = lib
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC or None


def parse_events(buf: bytes) -> Iterable[tuple[int, int, bytes]]:
    """(wd, mask, name) of each event in what one ``read`` of the descriptor returned."""
    off, end = 0, len(buf)
    unpack = _HEADER.unpack_from
    size = _HEADER.size
    while off + size <= end:
        wd, mask, _cookie, length = unpack(buf, off)
        off += size
        name = buf[off : off + length].rstrip(b"\0") if length else b""
        off += length
        yield wd, mask, name


class Watch:
    """One watched folder (what ``schedule`` returns)."""

    __slots__ = ("path", "wd", "alive", "is_recursive")

    def __init__(self, path: str, wd: int):
        self.path, self.wd, self.alive, self.is_recursive = path, wd, True, False


class Inotify:
    """See the module's docstring. ``on_paths(paths)``: the paths a batch of events named (a
    path may appear more than once); ``on_lost()``: events were lost (queue overflow) or a
    watched folder went away."""

    def __init__(self, on_paths: Callable[[list[str]], None], on_lost: Callable[[], None]):
        lib = _libc() if sys.platform.startswith("linux") else None
        if lib is None:
            raise OSError(errno.ENOSYS, "inotify is not available on this system")
        self._lib = lib
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"inotify_init1: {os.strerror(e)} (fs.inotify.max_user_instances?)")
        self.fd = fd
        self.on_paths, self.on_lost = on_paths, on_lost
        self._by_wd: dict[int, Watch] = {}
        self._lock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.stats = {"reads": 0, "events": 0, "overflows": 0}

    # -- watchdog's observer, the part the follower uses ------------------------------------------
    def schedule(self, handler: Any, path: str, recursive: bool = False, event_filter: Any = None) -> Watch:
        if recursive:
            raise ValueError("this inotify reader does not watch recursively (watchdog does)")
        wd = self._lib.inotify_add_watch(self.fd, os.fsencode(path), MASK)
        if wd < 0:
            e = ctypes.get_errno()
            if e == errno.ENOSPC:
                raise OSError(
                    e, "the inotify watch limit is reached (sysctl fs.inotify.max_user_watches); its files are polled"
                )
            raise OSError(e, os.strerror(e), path)
        watch = Watch(path, wd)
        with self._lock:
            self._by_wd[wd] = watch
        return watch

    def unschedule(self, watch: Watch) -> None:
        with self._lock:
            if self._by_wd.get(watch.wd) is watch:
                del self._by_wd[watch.wd]
                if watch.alive:
                    self._lib.inotify_rm_watch(self.fd, watch.wd)
        watch.alive = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="inotify", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._closed:
            return
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        if self._thread is None or not self._thread.is_alive():
            self._close()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            for fd in (self.fd, self._stop_r, self._stop_w):
                try:
                    os.close(fd)
                except OSError:
                    pass

    # -- reading ----------------------------------------------------------------------------------
    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        stopper = select.poll()  # waited on for COALESCE_S: returns at once on a stop
        stopper.register(self._stop_r, select.POLLIN)
        while True:
            ready = poller.poll()
            if any(fd == self._stop_r for fd, _ in ready) or stopper.poll(COALESCE_S * 1000):
                return
            try:
                self.drain()
            except Exception:  # a bug here must not end the watching: say so, the rescan covers
                logger.exception("inotify: reading events failed; the rescan looks at every file")
                self.on_lost()

    def drain(self) -> None:
        """Read every event queued now and hand their paths over (one call of ``on_paths``)."""
        paths: list[str] = []
        lost = False
        while True:
            try:
                buf = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if not buf:
                break
            self.stats["reads"] += 1
            lost = self._take(buf, paths) or lost
        if paths:
            self.on_paths(paths)
        if lost:
            self.on_lost()

    def _take(self, buf: bytes, paths: list[str]) -> bool:
        lost = False
        by_wd = self._by_wd
        n = 0
        for wd, mask, name in parse_events(buf):
            n += 1
            if mask & IN_Q_OVERFLOW:
                self.stats["overflows"] += 1
                logger.warning("inotify: the event queue overflowed; looking at every followed file")
                lost = True
                continue
            watch = by_wd.get(wd)
            if watch is None:
                continue
            if mask & IN_IGNORED:  # the folder was removed or moved away (or unwatched)
                with self._lock:
                    if by_wd.get(wd) is watch:
                        del by_wd[wd]
                watch.alive = False
                lost = True
                continue
            if name and not mask & IN_ISDIR:
                paths.append(os.path.join(watch.path, os.fsdecode(name)))
        self.stats["events"] += n
        return lost
