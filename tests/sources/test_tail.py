"""The one rotation-safe tail reader (engine/sources/tail.py), and its three callers: the job-log
follower, the spool reader and the agent's kernel-log file reader pick up rotation alike."""

from __future__ import annotations

import errno
import os
import shutil
import threading
from pathlib import Path
from typing import Callable

import pytest

from engine.facts import Fact
from engine.sources.files import file_head
from engine.sources.follow import Follower
from engine.sources.kmsg import KernelLogSource
from engine.sources.spool import SpoolReader
from engine.sources.tail import (
    DELETED,
    GONE,
    MOVED,
    NO_DESCRIPTORS,
    NOT_REGULAR_FILE,
    OTHER,
    REPLACED,
    SAME,
    TRUNCATED,
    UNREADABLE,
    LineTail,
    Lines,
    TailFile,
    open_failure,
)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def started(tmp_path: Path, first: bytes = b"a1\n") -> tuple[Path, LineTail]:
    """kern.log holding ``first``, and a LineTail that has read it."""
    path = tmp_path / "kern.log"
    path.write_bytes(first)
    tail = LineTail(str(path), replay=True)
    assert lines_of(tail) == first.splitlines()
    return path, tail


def lines_of(tail: LineTail) -> list[bytes]:
    return [line for (_, _, _, line) in tail.read()]


def finishes(fn: Callable[[], object], fifo: Path | None = None, within: float = 10.0) -> object:
    """fn() in a thread; the test fails if it has not returned ``within`` seconds (a blocking
    open of a FIFO is released then by opening it for writing, so that nothing stays stuck)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # raised again in the test's thread
            box["error"] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(within)
    if th.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))
        pytest.fail(f"{fn} blocked")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


# -- TailFile -------------------------------------------------------------------------------


def test_open_refuses_links_fifos_and_devices_without_blocking(tmp_path):
    target = tmp_path / "real.log"
    target.write_bytes(b"x\n")
    (tmp_path / "link.log").symlink_to(target)
    (tmp_path / "zero.log").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.log")
    for name in ("link.log", "zero.log", "fifo.log"):
        with pytest.raises(OSError) as info:
            finishes(lambda: TailFile.open(str(tmp_path / name)), tmp_path / "fifo.log")
        assert open_failure(info.value) == NOT_REGULAR_FILE, name
    with pytest.raises(OSError) as info:
        TailFile.open("/dev/null")
    assert open_failure(info.value) == NOT_REGULAR_FILE
    with pytest.raises(OSError) as info:
        TailFile.open(str(tmp_path / "missing.log"))
    assert open_failure(info.value) == GONE
    f = TailFile.open(str(target))
    assert f.read(100) == b"x\n" and f.pos == 2 and f.change() == SAME
    f.close()


@pytest.mark.parametrize(
    "exc, reason",
    [
        (FileNotFoundError(errno.ENOENT, "no"), GONE),
        (OSError(errno.ELOOP, "link"), NOT_REGULAR_FILE),
        (OSError(errno.EMFILE, "too many"), NO_DESCRIPTORS),
        (OSError(errno.ENFILE, "table full"), NO_DESCRIPTORS),
        (PermissionError(errno.EACCES, "denied"), UNREADABLE),
        (OSError(errno.EIO, "io"), UNREADABLE),
    ],
)
def test_open_failure_reasons(exc, reason):
    assert open_failure(exc) == reason


def test_reads_are_bounded_and_at_the_position(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"0123456789")
    f = TailFile.open(str(path), 3)
    assert f.read(4) == b"3456" and f.pos == 7
    assert f.read(100) == b"789" and f.read(100) == b""
    f.close()


def test_count_lines_says_where_the_last_complete_line_ends(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"a\nbb\nccc")
    f = TailFile.open(str(path))
    assert f.count_lines() == (2, 5)
    assert f.count_lines(2) == (1, 5)
    assert f.count_lines(0, 2) == (1, 2)
    assert f.count_lines(5) == (0, 5)  # none: where it started
    f.close()


def test_change_tells_rotation_truncation_and_deletion_apart(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"line 1\nline 2\n")
    f = TailFile.open(str(path))
    f.read(100)
    assert f.change() == SAME
    with open(path, "r+b") as fh:
        fh.truncate(3)
    assert f.change() == TRUNCATED
    os.rename(path, tmp_path / "a.log.1")
    assert f.change() == MOVED
    path.write_bytes(b"new\n")
    assert f.change() == REPLACED
    g = TailFile.open(str(path))
    path.unlink()
    assert g.change() == DELETED
    f.close()
    g.close()


def test_identify_by_inode_and_head_bytes(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"first file line 1\nfirst file line 2\n")
    f = TailFile.open(str(path))
    ino, head, whole = f.ino, f.head(18), file_head(str(path))
    assert f.identify(18, head, ino, f.dev) == SAME
    assert f.identify(18, whole, ino) == SAME  # files.file_head's "N:hash" is understood too
    assert f.identify(18, head, ino + 1) == OTHER
    assert f.identify(1000, head, ino) == TRUNCATED
    f.close()
    # the same name, the same inode number, other bytes: another file
    with open(path, "r+b") as fh:
        fh.write(b"OTHER")
    f = TailFile.open(str(path))
    assert f.identify(18, head, ino) == OTHER and f.identify(18, whole, ino) == OTHER
    f.close()


# -- Lines ----------------------------------------------------------------------------------


@pytest.mark.parametrize("piece", [1, 2, 3, 5, 7, 64])
def test_a_line_split_across_reads_comes_out_once_and_whole(piece):
    data = b"alpha\nbeta gamma\n\ndelta-without-newline"
    lines = Lines(max_line=1000)
    got = []
    for i in range(0, len(data), piece):
        got += lines.feed(data[i : i + piece])
    assert got == [(0, b"alpha", False), (6, b"beta gamma", False), (17, b"", False)]
    assert lines.partial and lines.start == 18  # where a reader resumes: the unfinished line
    assert lines.flush() == (18, b"delta-without-newline", False)
    assert not lines.partial and lines.start == len(data)


def test_an_overlong_line_comes_out_once_cut_to_its_head():
    lines = Lines(max_line=8)
    got = lines.feed(b"ok\n0123456789") + lines.feed(b"abcdef") + lines.feed(b"ghi\nnext\n")
    assert got == [(0, b"ok", False), (3, b"01234567", True), (23, b"next", False)]
    assert lines.flush() is None


# -- LineTail: one path across rotation -------------------------------------------------------


def test_rotation_by_rename_drains_the_old_file_first(tmp_path):
    path, tail = started(tmp_path)
    append(path, b"a2\na3-")
    os.rename(path, tmp_path / "kern.log.1")
    append(tmp_path / "kern.log.1", b"end")  # the writer still had it open
    path.write_bytes(b"b1\nb2\n")
    assert lines_of(tail) == [b"a2", b"a3-end", b"b1", b"b2"]
    append(path, b"b3\n")
    assert lines_of(tail) == [b"b3"]


def test_rotation_while_nobody_read_resumes_in_the_renamed_file(tmp_path):
    path, tail = started(tmp_path)
    saved = tail.position()
    tail.close()
    append(path, b"a2\n")
    os.rename(path, tmp_path / "kern.log.1")
    path.write_bytes(b"b1\n")
    again = LineTail(str(path), saved)
    assert lines_of(again) == [b"a2", b"b1"]


def test_copytruncate_reads_the_file_again_from_its_start(tmp_path):
    path, tail = started(tmp_path, b"a1\na2\n")
    shutil.copyfile(path, tmp_path / "kern.log.1")
    with open(path, "r+b") as fh:
        fh.truncate(0)
    append(path, b"b1\n")
    assert lines_of(tail) == [b"b1"]
    assert tail.gen == 1  # the offsets are used again: line identities must differ


def test_truncation_to_a_shorter_file(tmp_path):
    path, tail = started(tmp_path, b"a long first line\nand a second one\n")
    with open(path, "r+b") as fh:  # rewritten in place (shell `>`), shorter than what was read
        fh.truncate(0)
        fh.write(b"short\n")
    assert lines_of(tail) == [b"short"]


@pytest.mark.parametrize("replacement", ["fifo", "symlink"])
def test_replacement_by_a_fifo_or_a_link_is_refused_without_hanging(tmp_path, replacement):
    path, tail = started(tmp_path)
    (tmp_path / "secret").write_bytes(b"not for us\n")
    append(path, b"a2\n")
    os.rename(path, tmp_path / "kern.log.1")
    if replacement == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(tmp_path / "secret")
    assert finishes(lambda: lines_of(tail), path if replacement == "fifo" else None) == [b"a2"]
    assert finishes(lambda: lines_of(tail), path if replacement == "fifo" else None) == []
    path.unlink()
    path.write_bytes(b"b1\n")  # a regular file again: read from its start
    assert lines_of(tail) == [b"b1"]


def test_a_file_deleted_while_open_is_read_to_its_end(tmp_path):
    path, tail = started(tmp_path)
    with open(path, "ab") as writer:
        path.unlink()
        writer.write(b"a2\na3")  # written after the unlink, through the writer's descriptor
        writer.flush()
        assert lines_of(tail) == [b"a2", b"a3"]
    assert lines_of(tail) == []
    path.write_bytes(b"b1\n")
    assert lines_of(tail) == [b"b1"]


def test_reads_are_bounded_by_the_chunk_and_resume(tmp_path):
    path = tmp_path / "kern.log"
    path.write_bytes(b"".join(b"line %04d\n" % i for i in range(1000)))
    tail = LineTail(str(path), replay=True, chunk=4096)
    first = lines_of(tail)
    assert 0 < len(first) < 1000
    rest: list[bytes] = []
    while len(first) + len(rest) < 1000:
        got = lines_of(tail)
        assert got
        rest += got
    assert first + rest == [b"line %04d" % i for i in range(1000)]


# -- the three callers pick up rotation alike -------------------------------------------------


class _Caller:
    """One reader of a growing file: the name it reads, how a record is written, what it read."""

    name: str

    def record(self, i: int) -> bytes:
        raise NotImplementedError

    def read(self) -> list[int]:
        raise NotImplementedError


class _FollowerCaller(_Caller):
    name = "slurm-7.log"

    def __init__(self, d: Path) -> None:
        self.follower = Follower([str(d / "*.log")])
        self.follower.add(str(d / self.name))
        self.lines: dict[str, Lines] = {}

    def record(self, i: int) -> bytes:
        return b"step %d\n" % i

    def read(self) -> list[int]:
        """Everything ready: passes until one finds nothing new (a file that grew is checked for
        rotation when a read finds nothing more, as the controller's next pass does)."""
        out: list[bytes] = []
        more = True
        while more:
            more = False
            self.follower.rescan()
            for t, data in self.follower.read_ready():
                lines = self.lines.get(t.path)
                if lines is None or t.reset:
                    t.reset = False
                    lines = self.lines[t.path] = Lines(1 << 16, t.offset)
                if data:
                    out += [line for _, line, _ in lines.feed(data)]
                    more = True
                else:  # the old file is finished: its last line counts
                    last = lines.flush()
                    out += [last[1]] if last else []
                    t.reset = True
                t.offset = lines.start
        return [int(line.split()[1]) for line in out]


class _SpoolCaller(_Caller):
    name = "n1.jsonl"

    def __init__(self, d: Path) -> None:
        self.reader = SpoolReader(str(d))

    def record(self, i: int) -> bytes:
        return (
            Fact.make("xid", {"code": 79, "node": "n1", "pid": i}, at=float(i), origin="k").to_json().encode() + b"\n"
        )

    def read(self) -> list[int]:
        return [f.get("pid") for f in self.reader.read()]


class _KernelCaller(_Caller):
    name = "kern.log"

    def __init__(self, d: Path) -> None:
        self.source = KernelLogSource("n1", str(d / self.name), replay=True)

    def record(self, i: int) -> bytes:
        return (
            b"Nov 29 17:00:01 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=%d, name=python3, "
            b"GPU has fallen off the bus.\n" % i
        )

    def read(self) -> list[int]:
        return [f.get("pid") for f in self.source.poll() if f.kind == "xid"]


@pytest.mark.parametrize("caller", [_FollowerCaller, _SpoolCaller, _KernelCaller], ids=["follow", "spool", "kmsg"])
def test_each_caller_picks_up_rotation_the_same_way(tmp_path, caller):
    path = tmp_path / caller.name
    path.write_bytes(b"")
    c = caller(tmp_path)
    assert c.read() == []
    append(path, c.record(1) + c.record(2))
    assert c.read() == [1, 2]
    # rotation by rename; the writer finishes the old file (its last line without a newline)
    append(path, c.record(3))
    os.rename(path, tmp_path / (caller.name + ".1"))
    append(tmp_path / (caller.name + ".1"), c.record(4).rstrip(b"\n"))
    path.write_bytes(c.record(5) + c.record(6))
    assert c.read() == [3, 4, 5, 6]
    assert c.read() == []
    # truncated in place (copytruncate): read again from the start, nothing of the old file twice
    with open(path, "r+b") as fh:
        fh.truncate(0)
    append(path, c.record(7))
    assert c.read() == [7]
    # rotated again, and a FIFO where the new file should be: refused, nothing blocks; a regular
    # file after it is read from its start
    os.rename(tmp_path / (caller.name + ".1"), tmp_path / (caller.name + ".2"))
    os.rename(path, tmp_path / (caller.name + ".1"))
    os.mkfifo(path)
    assert finishes(c.read, path) == []
    path.unlink()
    path.write_bytes(c.record(8))
    assert c.read() == [8]
