"""What the readers cost when nothing happens (issue 24, the cost curve): a rescan reads again
only the files whose stat changed, a file closed for the open-file budget is reopened where it
was read to, its reader's state kept (no reset), unless it is another file by then; the spool
reader opens only the nodes whose files changed."""

from __future__ import annotations

import os
from pathlib import Path

from engine.facts import Fact
from engine.sources.follow import Follower
from engine.sources.spool import SpoolReader, SpoolWriter
from engine.sources.tail import TailFile


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def drain(f: Follower) -> dict[str, bytes]:
    """One rescan and one pass: what each file gave (an empty read counts, as b"")."""
    f.rescan()
    got: dict[str, bytes] = {}
    for t, data in f.read_ready():
        got[os.path.basename(t.path)] = got.get(os.path.basename(t.path), b"") + data
        t.offset = t.fh.pos if t.fh is not None and data and data.endswith(b"\n") else t.offset
        t.reset = False
    return got


def test_a_rescan_reads_only_the_files_that_changed(tmp_path: Path, monkeypatch) -> None:
    reads: list[str] = []
    real = TailFile.read

    def read(self: TailFile, n: int) -> bytes:
        reads.append(os.path.basename(self.path))
        return real(self, n)

    monkeypatch.setattr(TailFile, "read", read)
    paths = [tmp_path / f"{i}.log" for i in range(5)]
    for p in paths:
        p.write_bytes(b"first\n")
    f = Follower([str(tmp_path / "*.log")])
    assert drain(f) == {p.name: b"first\n" for p in paths}
    drain(f)  # each read to its end once more: the rotation check records what it saw
    reads.clear()
    assert drain(f) == {}
    assert reads == []  # nothing written: nothing read again
    append(paths[3], b"second\n")
    assert drain(f) == {"3.log": b"second\n"}
    assert set(reads) == {"3.log"}
    paths[1].unlink()  # deleted: its open file is read to its end once
    assert set(drain(f)) == {"1.log"}
    assert drain(f) == {}  # and while it stays gone, nothing more
    paths[2].write_bytes(b"new\n")  # truncated (copytruncate): read again from its start
    assert drain(f).get("2.log", b"").endswith(b"new\n")


def test_a_file_closed_for_room_goes_on_where_it_was_read_to(tmp_path: Path) -> None:
    paths = [tmp_path / f"{i}.log" for i in range(3)]
    for p in paths:
        p.write_bytes(b"a whole line\nhalf a li")
    f = Follower([str(tmp_path / "*.log")], max_open=2)
    drain(f)
    drain(f)
    assert f.stats["lru_closed"] >= 1
    for p in paths:
        append(p, b"ne\n")
    for _ in range(3):
        f.rescan()
        for t, data in f.read_ready():
            assert not t.reset  # reopened at its read position: the half line is not read again
            assert data == b"ne\n"
            t.offset = t.fh.pos if t.fh is not None else t.offset
    assert sum(1 for t in f.files.values() if t.fh is not None) <= 2
    # a file replaced while it was closed is read from its start, its reader reset
    closed = next(t for t in f.files.values() if t.fh is None)
    Path(closed.path).unlink()
    Path(closed.path).write_bytes(b"new file\n")
    f.rescan()
    resets = {os.path.basename(t.path): (t.reset, data) for t, data in f.read_ready()}
    assert resets[os.path.basename(closed.path)] == (True, b"new file\n")


def test_the_spool_reader_opens_only_the_nodes_whose_files_changed(tmp_path: Path, monkeypatch) -> None:
    writers = [SpoolWriter(str(tmp_path), f"n{i}", fsync="never") for i in range(4)]

    def write(i: int, pid: int) -> None:
        attrs = {"code": 79, "node": f"n{i}", "pid": pid}
        writers[i].write([Fact.make("xid", attrs, at=float(pid), origin=f"kmsg:{pid}")])

    for i in range(4):
        write(i, i)
    reader = SpoolReader(str(tmp_path))
    assert len(reader.read()) == 4
    opened: list[str] = []
    real = TailFile.open

    def open_(path: str, pos: int = 0) -> TailFile:
        opened.append(os.path.basename(path))
        return real(path, pos)

    monkeypatch.setattr(TailFile, "open", staticmethod(open_))
    assert reader.read() == [] and opened == []  # nothing written: no node's file opened
    write(2, 100)
    assert [f.get("pid") for f in reader.read()] == [100] and opened == ["n2.jsonl"]
    opened.clear()
    with open(tmp_path / "n1.jsonl", "ab") as fh:
        fh.write(b'{"half a ')  # a partial line waits, and is read on once it is whole
    assert reader.read() == [] and opened == ["n1.jsonl"]
    assert reader.read() == [] and opened == ["n1.jsonl"]
    for w in writers:
        w.close()


def test_with_inotify_a_rescan_stats_every_file_only_now_and_then(tmp_path: Path, monkeypatch) -> None:
    from engine.sources import follow

    paths = [tmp_path / f"{i}.log" for i in range(4)]
    for p in paths:
        p.write_bytes(b"line\n")
    f = Follower([str(tmp_path / "*.log")])
    f.start()  # inotify watches the folder
    try:
        drain(f)
        drain(f)
        looked: list[str] = []
        real = Follower._changed
        monkeypatch.setattr(Follower, "_changed", staticmethod(lambda t: looked.append(t.path) or real(t)))
        for _ in range(follow.SWEEP_EVERY - 1 - f._rescans % follow.SWEEP_EVERY):
            f.rescan(full=False)  # the controller's
        assert looked == []  # open, read to their end, watched: inotify vouches for them
        f.rescan(full=False)
        assert len(looked) == len(paths)  # the sweep
        looked.clear()
        append(paths[0], b"more\n")
        f.rescan(full=False)
        assert looked == []  # inotify's event marks it, not the rescan
        f.rescan()  # a full one (the default) looks at every file
        assert len(looked) == len(paths)
    finally:
        f.stop()


def test_the_spool_is_listed_again_only_when_the_folder_changed(tmp_path: Path, monkeypatch) -> None:
    import time

    from engine.clock import FakeClock
    from engine.sources import spool

    writers = [SpoolWriter(str(tmp_path), f"n{i}", fsync="never") for i in range(3)]

    def write(w: SpoolWriter, pid: int) -> None:
        w.write([Fact.make("xid", {"code": 79, "node": w.node, "pid": pid}, at=float(pid), origin=f"kmsg:{pid}")])

    for i, w in enumerate(writers):
        write(w, i)
    clock = FakeClock(start=time.time())  # the folder changed just now: a listing taken now is not reused
    reader = SpoolReader(str(tmp_path), clock=clock)
    listed: list[str] = []
    real = os.listdir
    monkeypatch.setattr(spool.os, "listdir", lambda p: listed.append(p) or real(p))
    assert len(reader.read()) == 3 and len(listed) == 1
    assert reader.read() == [] and len(listed) == 2  # too soon after the folder's last change
    clock.advance(spool.LIST_SETTLE_S + 1)
    assert reader.read() == [] and len(listed) == 3
    write(writers[1], 100)  # appended: the folder itself is unchanged, the listing is reused
    assert [f.get("pid") for f in reader.read()] == [100] and len(listed) == 3
    late = SpoolWriter(str(tmp_path), "n9", fsync="never")  # a new node's file: the folder changed
    write(late, 200)
    assert [f.get("pid") for f in reader.read()] == [200] and len(listed) == 4
    for w in [*writers, late]:
        w.close()


def test_reading_a_followed_log_elsewhere_marks_nothing_a_write_does(tmp_path: Path) -> None:
    from tests.helpers import wait_for

    quiet, busy = tmp_path / "quiet.log", tmp_path / "busy.log"
    quiet.write_bytes(b"line\n")
    busy.write_bytes(b"line\n")
    f = Follower([str(tmp_path / "*.log")])
    f.start()  # inotify watches the folder
    try:
        drain(f)
        with f._lock:
            f._dirty.clear()
        for _ in range(3):  # what a reader does: open, read, close (IN_OPEN, IN_CLOSE_NOWRITE)
            assert quiet.read_bytes() == b"line\n"
        append(busy, b"more\n")  # its event comes after the reads' events (one inotify queue, in order)
        wait_for(lambda: str(busy) in f._dirty, timeout=10, what="the write's event")
        assert str(quiet) not in f._dirty
        append(quiet, b"more\n")
        wait_for(lambda: str(quiet) in f._dirty, timeout=10, what="a write to the file read")
    finally:
        f.stop()
