"""recover run --follow: files that appear later, rotation, truncation, deletion and re-creation,
polling mode, unreadable files and hostile bytes, each against the real command."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .conftest import append, assert_exactly_once, evts, wait_for


def test_files_and_folders_that_appear_later_are_followed(live):
    shutil.rmtree(live.logs)  # the folder itself does not exist yet
    live.start(follow="logs/*.out")  # READY comes after its first scan: it started without the folder
    assert not live.logs.exists()
    live.logs.mkdir()
    append(live.logs / "slurm-11.out", evts(0, 5))
    live.wait_evts(set(range(5)))
    append(live.logs / "slurm-12.out", evts(5, 10))  # a second file, after the first
    append(live.logs / "ignored.log", evts(100, 105))  # does not match the glob
    live.wait_evts(set(range(10)))
    marks = live.drain(live.logs / "slurm-11.out", live.logs / "slurm-12.out")
    assert_exactly_once(live.evt_numbers(), set(range(10)) | marks)
    origins = {o for a, o, _ in live.log_facts()}
    assert f"{live.logs}/slurm-11.out:1" in origins and f"{live.logs}/slurm-12.out:5" in origins
    jobs = {a["job"] for a, _, _ in live.log_facts()}
    assert jobs == {"11", "12"}  # the job id comes from the file name
    # the folder is removed (and the controller sees it gone), then made again: its new files
    # are followed too
    shutil.rmtree(live.logs)
    wait_for(lambda: "watched folder was removed" in live.output(), 15, what="the removal to be seen")
    live.logs.mkdir()
    append(live.logs / "slurm-13.out", evts(10, 12))
    live.wait_evts(set(range(12)))
    append(live.logs / "slurm-13.out", evts(12, 13))  # and an append to it (how fast: bench_latency.py)
    live.wait_evts(set(range(13)))
    marks = live.drain(live.logs / "slurm-13.out")
    assert_exactly_once(live.evt_numbers(), set(range(13)) | marks)
    assert live.alive()


def test_rotation_by_rename_and_recreate_loses_and_repeats_nothing(live):
    log = live.logs / "slurm-21.out"
    live.start()
    append(log, evts(0, 50))
    live.wait_evts(set(range(50)))
    # lines written just before the rename are read from the renamed file; then the new file
    append(log, evts(50, 60))
    os.rename(log, live.logs / "slurm-21.out.1")
    append(log, evts(60, 80))
    live.wait_evts(set(range(80)))
    # twice more, with a partial last line before the rename (read once the old file is done)
    for k in range(2):
        base = 80 + k * 20
        append(log, evts(base, base + 9) + f"EVT {base + 9} no newline yet")
        os.rename(log, live.logs / f"slurm-21.out.{k + 2}")
        append(log, evts(base + 10, base + 20))
        live.wait_evts(set(range(base + 20)))
    marks = live.drain(log)
    assert_exactly_once(live.evt_numbers(), set(range(120)) | marks)
    assert live.alive()


def test_truncation_reads_the_file_again_from_its_start(live):
    log = live.logs / "slurm-31.out"
    live.start()
    append(log, evts(0, 30))
    live.wait_evts(set(range(30)))
    with open(log, "w") as fh:  # truncate and write less than before (copytruncate)
        fh.write(evts(30, 33))
    live.wait_evts(set(range(33)))
    os.truncate(log, 0)
    append(log, evts(33, 35))
    live.wait_evts(set(range(35)))
    marks = live.drain(log)
    assert_exactly_once(live.evt_numbers(), set(range(35)) | marks)
    facts = {a["n"]: o for a, o, _ in live.log_facts()}
    assert facts[30].endswith("slurm-31.out:1") and facts[34].endswith("slurm-31.out:2")  # line numbers start again
    assert "truncated" in live.output()


def test_deletion_and_recreation(live):
    log = live.logs / "slurm-41.out"
    other = live.logs / "slurm-42.out"
    live.start(metrics=True)
    append(log, evts(0, 20))
    live.wait_evts(set(range(20)))
    append(log, evts(20, 25))
    log.unlink()  # the last lines were written just before: still read from the open file
    live.wait_evts(set(range(25)))
    wait_for(lambda: "deleted" in live.output(), 5, what="the deletion to be logged")
    append(other, evts(100, 105))  # the controller keeps working on other files
    live.wait_evts(set(range(25)) | set(range(100, 105)))
    append(log, evts(25, 40))  # re-created (possibly with the same inode number)
    live.wait_evts(set(range(40)) | set(range(100, 105)))
    # deleted and re-created at once
    log.unlink()
    append(log, evts(40, 45))
    live.wait_evts(set(range(45)) | set(range(100, 105)))
    marks = live.drain(log, other)
    assert_exactly_once(live.evt_numbers(), set(range(45)) | set(range(100, 105)) | marks)
    wait_for(  # the gauges are refreshed about once a second
        lambda: live.metric("recover_source_errors_total", kind="file", reason="vanished") >= 1,
        15,
        what="the deletion to be counted",
    )
    assert live.alive()


def _uses_inotify(pid: int) -> bool:
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            if "inotify" in os.readlink(fd):
                return True
        except OSError:
            pass
    return False


def test_polling_mode_needs_no_inotify(live):
    live.start("--poll", "0.3")
    assert not _uses_inotify(live.proc.pid)  # polling really polls: writes elsewhere raise no events here
    log = live.logs / "slurm-51.out"
    append(log, evts(0, 10))
    live.wait_evts(set(range(10)))  # how soon, against the poll interval: bench/bench_latency.py --mode poll
    os.rename(log, live.logs / "slurm-51.out.1")  # rotation and truncation in polling mode too
    append(log, evts(10, 20))
    live.wait_evts(set(range(20)))
    os.truncate(log, 0)
    append(log, evts(20, 21))
    live.wait_evts(set(range(21)))
    marks = live.drain(log)
    assert_exactly_once(live.evt_numbers(), set(range(21)) | marks)
    assert not _uses_inotify(live.proc.pid)


def test_inotify_mode_reads_new_and_appended_files(live):
    """How fast is measured by bench/bench_latency.py (--new-files for new ones), not here: on a
    loaded machine a wall-clock bound fails for the machine's sake, not the code's."""
    live.start()
    assert _uses_inotify(live.proc.pid)
    for i in range(5):
        append(live.logs / f"slurm-6{i}.out", evts(i, i + 1))
        live.wait_evts(set(range(i + 1)))
    append(live.logs / "slurm-60.out", evts(5, 6))
    live.wait_evts(set(range(6)))
    marks = live.drain(*(live.logs / f"slurm-6{i}.out" for i in range(5)))
    assert_exactly_once(live.evt_numbers(), set(range(6)) | marks)


def test_unreadable_file_is_logged_counted_and_does_not_stop_it(live):
    bad = live.logs / "slurm-71.out"
    good = live.logs / "slurm-72.out"
    live.start(metrics=True)
    append(bad, evts(0, 5))
    live.wait_evts(set(range(5)))
    # the path stops being a readable file (root reads any mode: make it a folder instead)
    bad.unlink()
    bad.mkdir()
    if os.geteuid() != 0:
        os.chmod(good.parent, 0o755)
    wait_for(
        lambda: live.metric("recover_source_errors_total", kind="file", reason="unreadable") >= 1,
        10,
        what="the unreadable file to be counted",
    )
    assert "unreadable" in live.output()
    assert live.metric("recover_sources_unhealthy", kind="file") >= 1
    append(good, evts(10, 15))  # other files go on
    live.wait_evts(set(range(5)) | set(range(10, 15)))
    bad.rmdir()  # readable again: a new file
    append(bad, evts(5, 8))
    live.wait_evts(set(range(8)) | set(range(10, 15)))
    wait_for(lambda: live.metric("recover_sources_unhealthy", kind="file") == 0, 5, what="all sources healthy again")
    assert_exactly_once(live.evt_numbers(), set(range(8)) | set(range(10, 15)))
    assert live.alive()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied_file(live):
    bad = live.logs / "slurm-73.out"
    append(bad, evts(0, 3))
    os.chmod(bad, 0)
    live.start(metrics=True)
    wait_for(lambda: "unreadable" in live.output(), 10, what="the unreadable file to be logged")
    os.chmod(bad, 0o644)
    live.wait_evts(set(range(3)))


def test_garbage_binary_invalid_utf8_and_huge_lines_do_not_stop_it(live):
    log = live.logs / "slurm-81.out"
    live.start(metrics=True)
    rnd = os.urandom(200_000)  # binary noise, with NULs and newlines in it
    append(log, evts(0, 2) + "\n\n\r\n")
    append(log, rnd.replace(b"EVT", b"evt") + b"\n")
    append(log, b"\xff\xfe\xfd EVT 2 in invalid utf-8 \xc3\x28 \xa0\xa1\n")
    append(log, b"\x00" * 1000 + b"\n")
    append(log, b"A" * (8 << 20) + b" EVT 999 at the end of a huge line\n")  # cut: its tail is not scanned
    append(log, b"EVT 3 " + b"B" * (3 << 20) + b"\n")  # a huge line with its match at its head
    # one write: the read that finds EVT 4 finds the partial line after it too
    append(
        log, "\u202e EVT 4 bidi \u2028 and \x1b[31m escapes\n".encode() + b"EVT 5 with a partial last line then more"
    )
    live.wait_evts(set(range(5)))
    append(log, b" of it\n" + evts(6, 8).encode())
    live.wait_evts(set(range(8)))
    marks = live.drain(log)
    got = live.evt_numbers()
    assert_exactly_once(got, set(range(8)) | marks)
    texts = {a["n"]: a["text"] for a, _, _ in live.log_facts()}
    assert "\x1b" not in texts[4] and "\u202e" not in texts[4]  # control and bidi characters removed
    assert len(texts[3]) <= 400
    assert live.metric("recover_source_errors_total", kind="file", reason="long_line") >= 2
    assert live.alive()
    # and it still reads what comes next
    append(log, evts(8, 9))
    live.wait_evts(set(range(9)))


def test_rotated_names_that_match_the_glob_are_not_read_twice(live):
    """--follow 'logs/*.log*' also matches app.log.1: a rotated file continues where it was read
    under its old name (also after a restart), and a file rotated before it was ever read is read."""
    log = live.logs / "train-501.log"
    live.start(follow="logs/*.log*")
    append(log, evts(0, 30))
    live.wait_evts(set(range(30)))
    append(log, evts(30, 35) + "2026-11-29T17:00:00 EVT 35 partial")
    os.rename(log, live.logs / "train-501.log.1")
    append(live.logs / "train-501.log.1", " line\n" + evts(36, 40))  # the writer had it open still
    append(log, evts(40, 50))
    live.wait_evts(set(range(50)))
    origins = {a["n"]: o for a, o, _ in live.log_facts()}
    # line numbers are those of the file, under the name it had when it was read
    assert origins[35].endswith(("train-501.log:36", "train-501.log.1:36"))
    assert origins[36].endswith(("train-501.log:37", "train-501.log.1:37"))
    assert origins[40].endswith("train-501.log:1")
    # appended to the rotated file once the controller knows it rotated: read from where it was,
    # under its new name, with its own line numbers
    append(live.logs / "train-501.log.1", evts(90, 92))
    late = {90, 91}
    live.wait_evts(set(range(50)) | late)
    origins = {a["n"]: o for a, o, _ in live.log_facts()}
    assert origins[90].endswith("train-501.log.1:41"), origins[90]
    # quick rotations: a file renamed before the controller ever saw it is read under its new name
    for k in range(2, 5):
        base = 50 + (k - 2) * 10
        append(log, evts(base, base + 10))
        os.rename(log, live.logs / f"train-501.log.{k}")
    live.wait_evts(set(range(80)) | late)
    marks = live.drain(log, live.logs / "train-501.log.1")
    assert_exactly_once(live.evt_numbers(), set(range(80)) | late | marks)
    live.stop()
    live.start(follow="logs/*.log*")  # every name is known with its position: nothing is read again
    append(live.logs / "train-501.log.1", evts(80, 82))
    append(log, evts(82, 85))
    live.wait_evts(set(range(85)) | late)
    marks = live.drain(log, live.logs / "train-501.log.1", live.logs / "train-501.log.2")
    assert_exactly_once(live.evt_numbers(), set(range(85)) | late | marks)
