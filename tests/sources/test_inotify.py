"""The follower's own inotify reader (engine.sources.inotify) and its fallbacks: events mark
paths in batches; a queue overflow, a lost folder and the watch limit each end in the rescan
looking at what the events no longer vouch for; watchdog stays where ours does not apply."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from pathlib import Path

import pytest

from engine.sources import follow, inotify, watching
from engine.sources.follow import Follower
from tests.helpers import wait_for

pytestmark = pytest.mark.skipif(not inotify.available(), reason="inotify is Linux's")


def append(p: Path, data: bytes) -> None:
    with open(p, "ab") as fh:
        fh.write(data)


def drain(f: Follower) -> list[tuple[str, bytes]]:
    out = []
    for t, data in f.read_ready():
        if data:
            out.append((t.path, data))
        t.offset = t.fh.pos if t.fh is not None and data.endswith(b"\n") else t.offset
        t.reset = False
    return out


def dirty(f: Follower) -> set[str]:
    with f._lock:
        return set(f._dirty)


def clear(f: Follower) -> None:
    with f._lock:
        f._dirty.clear()


@pytest.fixture
def started(tmp_path: Path):
    made: list[Follower] = []

    def make(*globs: str, **kw) -> Follower:
        f = Follower(list(globs) or [str(tmp_path / "*.log")], **kw)
        f.start()
        made.append(f)
        return f

    yield make
    for f in made:
        f.stop()


def test_the_own_reader_is_used_on_linux_and_marks_what_is_written(tmp_path: Path, started) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"one\n")
    f = started()
    assert isinstance(f._observer, inotify.Inotify)
    drain(f)
    clear(f)
    append(a, b"two\n")
    b.write_bytes(b"new\n")  # created after the start: its event names it
    wait_for(lambda: {str(a), str(b)} <= dirty(f), timeout=10, what="the writes' events")
    got = drain(f)
    assert (str(a), b"two\n") in got and (str(b), b"new\n") in got
    assert f._observer.stats["events"] >= 2


def test_rotation_and_deletion_are_noticed_from_the_events_alone(tmp_path: Path, started) -> None:
    log = tmp_path / "job.log"
    log.write_bytes(b"first\n")
    f = started(str(log.parent / "job.log"))
    assert drain(f) == [(str(log), b"first\n")]
    clear(f)
    os.rename(log, tmp_path / "job.log.1")  # rotated away (IN_MOVED_FROM names the followed path)
    log.write_bytes(b"second\n")  # and a new file under the name (IN_CREATE)
    wait_for(lambda: str(log) in dirty(f), timeout=10, what="the rotation's events")
    got = drain(f)
    assert (str(log), b"second\n") in got and f.stats["rotations"] == 1
    clear(f)
    log.unlink()
    wait_for(lambda: str(log) in dirty(f), timeout=10, what="the deletion's event")
    drain(f)
    assert f.files[str(log)].gone


def test_a_queue_overflow_makes_the_next_rescan_a_full_sweep(tmp_path: Path) -> None:
    """A real overflow: more events than the kernel queues while nobody reads them."""
    try:
        limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    except (OSError, ValueError):
        pytest.skip("max_queued_events unknown")
    if limit > 100_000:
        pytest.skip("the queue limit is too large to fill quickly")
    lost = []
    seen: list[str] = []
    ino = inotify.Inotify(seen.extend, lambda: lost.append(1))  # not started: nothing reads
    try:
        ino.schedule(None, str(tmp_path))
        x, y = tmp_path / "x", tmp_path / "y"
        with open(x, "ab", buffering=0) as fx, open(y, "ab", buffering=0) as fy:
            for _ in range(limit // 2 + 10):  # alternating: the kernel merges only equal neighbours
                fx.write(b"1")
                fy.write(b"1")
        ino.drain()
        assert lost and ino.stats["overflows"] == 1
        assert str(x) in seen  # what was queued before the overflow still names its paths
    finally:
        ino.stop()
        ino.join()


def test_a_missed_event_is_caught_by_the_sweep_after_an_overflow(tmp_path: Path, started) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"one\n")
    f = started()
    drain(f)
    f.rescan(full=False)  # reads to the end leave every file vouched for
    drain(f)
    # the event of this write is lost: the reader's callback drops it
    ino = f._observer
    ino.on_paths = lambda paths: None
    append(log, b"two\n")
    wait_for(lambda: ino.stats["events"] >= 1, timeout=10, what="the (dropped) event")
    clear(f)
    f._rescans = 1  # not a SWEEP_EVERY round
    f.rescan(full=False)
    assert str(log) not in dirty(f), "without a sweep, a vouched-for file is not looked at"
    f._lost()  # what an IN_Q_OVERFLOW calls
    f._rescans = 1
    f.rescan(full=False)
    assert str(log) in dirty(f)
    assert drain(f) == [(str(log), b"two\n")]
    # and the slow sweep (every SWEEP_EVERY-th rescan) catches one with no overflow at all
    append(log, b"three\n")
    wait_for(lambda: ino.stats["events"] >= 2, timeout=10, what="the second (dropped) event")
    clear(f)
    f._rescans = follow.SWEEP_EVERY - 1
    f.rescan(full=False)
    assert str(log) in dirty(f)


def test_a_removed_folder_is_watched_again_when_it_is_back(tmp_path: Path, started) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    f = started(str(d / "*.log"))
    watch = f._watches[str(d)][0]
    d.rmdir()
    wait_for(lambda: not watch.alive, timeout=10, what="IN_IGNORED for the removed folder")
    assert f._sweep_next
    d.mkdir()
    f.rescan(full=False)
    new = f._watches[str(d)][0]
    assert new is not watch and new.alive
    (d / "a.log").write_bytes(b"x\n")
    wait_for(lambda: str(d / "a.log") in dirty(f), timeout=10, what="an event from the new watch")


class _FullLibc:
    """libc whose inotify_add_watch fails as at the watch limit (ENOSPC)."""

    def __init__(self, real) -> None:
        self.real = real

    def inotify_init1(self, flags: int) -> int:
        return self.real.inotify_init1(flags)

    def inotify_add_watch(self, fd: int, path: bytes, mask: int) -> int:
        ctypes.set_errno(errno.ENOSPC)
        return -1

    def inotify_rm_watch(self, fd: int, wd: int) -> int:
        return self.real.inotify_rm_watch(fd, wd)


def test_at_the_watch_limit_the_folder_is_polled_and_said_so(tmp_path: Path, started, monkeypatch, caplog) -> None:
    monkeypatch.setattr(inotify, "_LIBC", _FullLibc(inotify._libc()))
    log = tmp_path / "a.log"
    log.write_bytes(b"one\n")
    with caplog.at_level("WARNING"):
        f = started()
    assert isinstance(f._observer, inotify.Inotify) and str(tmp_path) not in f._watched
    assert "max_user_watches" in caplog.text and "looked at on every rescan" in caplog.text
    drain(f)
    f.rescan(full=False)
    drain(f)
    append(log, b"two\n")
    clear(f)
    f._rescans = 1  # not a sweep round: the unwatched folder's files are looked at anyway
    f.rescan(full=False)
    assert str(log) in dirty(f)
    assert drain(f) == [(str(log), b"two\n")]
    caplog.clear()
    with caplog.at_level("WARNING"):
        f.rescan(full=False)
    assert "cannot watch" not in caplog.text  # said once per folder


def test_watchdog_stays_where_the_own_reader_does_not_apply(tmp_path: Path, monkeypatch) -> None:
    from watchdog.observers.polling import PollingObserver

    made = []

    def make(**kw):
        o = watching.make_observer(kw.pop("poll", None), kw.pop("recursive", False), list, lambda: None, **kw)
        if isinstance(o, inotify.Inotify):
            made.append(o)
        return o

    assert isinstance(make(), inotify.Inotify)
    assert not isinstance(make(recursive=True), inotify.Inotify)  # a ** glob: watchdog's recursive watch
    assert isinstance(make(poll=1.0), PollingObserver)
    assert not isinstance(make(own=False), inotify.Inotify)
    monkeypatch.setattr(inotify, "available", lambda: False)  # another system
    assert not isinstance(make(), inotify.Inotify)
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(OSError, match="not available"):
        inotify.Inotify(list, lambda: None)
    for o in made:
        o.stop()
        o.join()


def test_watchdog_fallback_still_follows(tmp_path: Path, started, monkeypatch) -> None:
    monkeypatch.setattr(follow, "OWN_INOTIFY", False)
    a = tmp_path / "a.log"
    a.write_bytes(b"one\n")
    f = started()
    assert not isinstance(f._observer, inotify.Inotify)
    drain(f)
    clear(f)
    append(a, b"two\n")
    wait_for(lambda: str(a) in dirty(f), timeout=10, what="watchdog's event")
    assert drain(f) == [(str(a), b"two\n")]


def test_a_watched_glob_is_listed_on_sweeps_only_and_a_lost_creation_is_found_there(tmp_path: Path, started) -> None:
    f = started()
    f._observer.on_paths = lambda paths: None  # the creation's event is lost
    new = tmp_path / "late.log"
    new.write_bytes(b"hello\n")
    wait_for(lambda: f._observer.stats["events"] >= 1, timeout=10, what="the (dropped) event")
    f._rescans = 1
    f.rescan(full=False)  # not a sweep: the folder is watched, so it is not listed
    assert str(new) not in f.files
    f._rescans = follow.SWEEP_EVERY - 1
    f.rescan(full=False)  # the sweep lists it
    assert str(new) in f.files and drain(f) == [(str(new), b"hello\n")]
