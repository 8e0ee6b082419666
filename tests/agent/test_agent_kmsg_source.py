"""KernelLogSource: following a kernel-log file (rotation, truncation, offsets) and /dev/kmsg records."""

from __future__ import annotations

import json
import os

import pytest

from engine.sources.kmsg import KernelLogSource

NODE = "n1"


def xid(i: int, code: int = 79) -> str:
    return f"Nov 29 17:00:01 {NODE} kernel: NVRM: Xid (PCI:0000:3b:00): {code}, pid={i}, name=python3, GPU has fallen off the bus.\n"


def append(path, text: str | bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(text.encode() if isinstance(text, str) else text)


def pids(facts) -> list[int]:
    return [f.get("pid") for f in facts]


def test_first_start_reads_only_new_lines_unless_replay(tmp_path):
    log = tmp_path / "kern.log"
    append(log, xid(1) + xid(2))
    src = KernelLogSource(NODE, str(log))
    assert src.poll() == []
    append(log, xid(3))
    assert pids(src.poll()) == [3]
    replay = KernelLogSource(NODE, str(log), replay=True)
    assert pids(replay.poll()) == [1, 2, 3]


def test_missing_file_is_waited_for_and_read_from_its_start(tmp_path):
    log = tmp_path / "kern.log"
    src = KernelLogSource(NODE, str(log))
    assert src.poll() == []
    append(log, xid(1))
    # the file appeared after the source started: everything in it is new
    assert pids(src.poll()) == [1]


def test_partial_line_waits_for_its_newline(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    src = KernelLogSource(NODE, str(log))
    src.poll()
    line = xid(7)
    append(log, line[:40])
    assert src.poll() == []
    assert src.position()["offset"] == 0
    append(log, line[40:])
    facts = src.poll()
    assert pids(facts) == [7]
    assert facts[0].origin.endswith("kern.log:1")  # a line number, not a byte offset
    assert src.position()["offset"] == len(line)


def test_restart_from_a_position_neither_loses_nor_repeats_and_ids_are_stable(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    a = KernelLogSource(NODE, str(log))
    a.poll()
    append(log, xid(1) + xid(2))
    first = a.poll()
    saved = json.loads(json.dumps(a.position()))  # as stored on disk
    append(log, xid(3) + xid(4))
    second = a.poll()
    # a crash before ``second`` was committed: a new source from ``saved`` reads 3 and 4 again
    b = KernelLogSource(NODE, str(log), position=saved)
    again = b.poll()
    assert pids(first) == [1, 2] and pids(second) == [3, 4]
    assert [f.id for f in again] == [f.id for f in second]
    assert pids(b.poll()) == []


def test_same_text_at_different_offsets_gives_different_facts(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    src = KernelLogSource(NODE, str(log))
    src.poll()
    append(log, xid(1) + xid(1))
    facts = src.poll()
    assert len(facts) == 2 and facts[0].id != facts[1].id


def test_rotation_by_rename_while_running(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    src = KernelLogSource(NODE, str(log))
    src.poll()
    append(log, xid(1))
    assert pids(src.poll()) == [1]
    append(log, xid(2))  # written before the rename, not yet read
    os.rename(log, tmp_path / "kern.log.1")
    append(log, xid(3))
    got = pids(src.poll())
    got += pids(src.poll())
    assert got == [2, 3]
    append(log, xid(4))
    assert pids(src.poll()) == [4]


def test_rotation_while_the_agent_was_down(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    a = KernelLogSource(NODE, str(log))
    a.poll()
    append(log, xid(1))
    a.poll()
    saved = a.position()
    append(log, xid(2) + "NVRM: Xid (PCI:0000:3b:00): 13, last line of the old file without newline")
    os.rename(log, tmp_path / "kern.log.1")
    append(log, xid(3))
    b = KernelLogSource(NODE, str(log), position=saved)
    facts = b.poll() + b.poll()
    assert [f.get("code") for f in facts] == [79, 13, 79]
    assert pids(facts)[0::2] == [2, 3]
    assert pids(b.poll()) == []


def test_rotated_away_and_gone_starts_the_new_file_from_zero(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    a = KernelLogSource(NODE, str(log))
    a.poll()
    append(log, xid(1))
    a.poll()
    saved = a.position()
    os.unlink(log)
    append(log, xid(5))
    b = KernelLogSource(NODE, str(log), position=saved)
    assert pids(b.poll()) == [5]


def test_truncation_copytruncate(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    src = KernelLogSource(NODE, str(log))
    src.poll()
    append(log, xid(1) + xid(2))
    first = src.poll()
    with open(log, "wb"):
        pass  # truncated in place
    append(log, xid(1))  # identical bytes at a re-used offset
    again = src.poll()
    assert pids(again) == [1]
    assert again[0].id != first[0].id  # a new generation, a new fact


def test_truncated_while_away(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    a = KernelLogSource(NODE, str(log))
    a.poll()
    append(log, xid(1) + xid(2) + xid(3))
    a.poll()
    saved = a.position()
    log.write_text(xid(9))
    b = KernelLogSource(NODE, str(log), position=saved)
    assert pids(b.poll()) == [9]


def test_garbage_bytes_and_overlong_lines_do_not_raise(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    src = KernelLogSource(NODE, str(log))
    src._file.max_line = 1000
    src.poll()
    append(
        log, b"\xff\xfe\x00garbage\x80\n" + b"NVRM: Xid (PCI:0000:3b:00): 13, " + b"A" * 5000 + b"\n" + xid(2).encode()
    )
    facts = src.poll()
    assert [f.get("code") for f in facts] == [13, 79]
    assert len(facts[0].get("detail")) <= 512
    assert src._file.cut_lines == 1
    assert src.position()["offset"] == os.path.getsize(log)


def test_commit_writes_state_file_and_calls_back(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    state = tmp_path / "st" / "kern.json"
    seen = []
    src = KernelLogSource(NODE, str(log), state_file=str(state), on_commit=seen.append)
    src.poll()
    append(log, xid(1))
    src.poll()
    pos = src.commit()
    assert seen == [pos] and json.loads(state.read_text()) == pos
    append(log, xid(2))
    again = KernelLogSource(NODE, str(log), state_file=str(state))
    assert pids(again.poll()) == [2]


def test_origins_carry_line_numbers_across_a_restart_a_late_start_and_a_rotation(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("boot line one\nboot line two\n")
    a = KernelLogSource(NODE, str(log))  # first start: from the end, yet lines are numbered from the top
    a.poll()
    append(log, "unrelated\n" + xid(1))
    assert [f.origin for f in a.poll()] == [f"{log}:4"]
    b = KernelLogSource(NODE, str(log), position=json.loads(json.dumps(a.position())))
    append(log, xid(2) + "noise\n" + xid(3))
    assert [f.origin for f in b.poll()] == [f"{log}:5", f"{log}:7"]
    os.rename(log, str(log) + ".1")
    log.write_text(xid(4))
    assert [f.origin for f in b.poll()] == [f"{log}:1"]


# -- /dev/kmsg ------------------------------------------------------------------------------------


def kmsg_record(seq: int, usec: int, msg: str) -> str:
    return f"4,{seq},{usec},-;{msg}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"


def test_kmsg_records_seek_to_end_replay_and_resume(tmp_path):
    dev = tmp_path / "kmsg"
    dev.write_text(kmsg_record(1, 1_000_000, "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."))
    src = KernelLogSource(NODE, kmsg=True, kmsg_path=str(dev))
    src.open()
    assert src.poll() == []  # first start: from the end
    append(dev, kmsg_record(2, 2_500_000, "NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, DBE"))
    facts = src.poll()
    assert [f.get("code") for f in facts] == [48]
    f = facts[0]
    assert f.origin == f"kmsg:{NODE}:2"
    boot = src._kmsg.btime
    assert f.at == pytest.approx(boot + 2.5)
    pos = src.position()
    assert pos["seq"] == 2

    replay = KernelLogSource(NODE, kmsg=True, kmsg_path=str(dev), replay=True)
    replay.open()
    assert [x.get("code") for x in replay.poll()] == [79, 48]

    append(dev, kmsg_record(3, 3_000_000, "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"))
    resumed = KernelLogSource(NODE, kmsg=True, kmsg_path=str(dev), position=pos)
    resumed.open()
    got = resumed.poll()
    assert [x.get("code") for x in got] == [13]  # seq ≤ 2 skipped
    # the same record read by another source instance has the same id
    assert [x.id for x in replay.poll()] == [got[0].id]

    other_boot = dict(pos, boot_id="another-boot")
    fresh = KernelLogSource(NODE, kmsg=True, kmsg_path=str(dev), position=other_boot)
    fresh.open()
    assert [x.get("code") for x in fresh.poll()] == [79, 48, 13]  # a new boot: the whole buffer is new


def test_kmsg_ids_depend_on_boot_and_sequence(tmp_path):
    dev = tmp_path / "kmsg"
    dev.write_text(kmsg_record(5, 1, "NVRM: Xid (PCI:0000:3b:00): 13, x"))
    a = KernelLogSource(NODE, kmsg=True, kmsg_path=str(dev), replay=True)
    b = KernelLogSource(NODE, kmsg=True, kmsg_path=str(dev), replay=True)
    a.open()
    b.open()
    assert [f.id for f in a.poll()] == [f.id for f in b.poll()]


def test_kmsg_garbage_records_do_not_raise(tmp_path):
    dev = tmp_path / "kmsg"
    dev.write_bytes(b"\xff\xff;;\n4,x,y,-;NVRM\n,,,;\n" + b"9" * 100 + b"\n 6,1,1,-;indented\n")
    src = KernelLogSource(NODE, kmsg=True, kmsg_path=str(dev), replay=True)
    src.open()
    assert src.poll() == []


def test_unreadable_kmsg_raises_oserror_on_open(tmp_path):
    src = KernelLogSource(NODE, kmsg=True, kmsg_path=str(tmp_path / "absent"))
    with pytest.raises(OSError):
        src.open()


def test_real_dev_kmsg_opens_at_the_end_and_reads_without_error():
    src = KernelLogSource(NODE, kmsg=True)
    try:
        src.open()
    except OSError as exc:
        pytest.skip(f"/dev/kmsg not readable here: {exc}")
    try:
        src.poll()  # whatever arrives now; must not raise
        replay = KernelLogSource(NODE, kmsg=True, replay=True)
        replay.open()
        replay.poll()
        assert replay.lines_read > 0  # the ring buffer has records since boot
        assert replay.position()["seq"] >= 0
    finally:
        src.close()


def test_exactly_one_of_path_or_kmsg():
    with pytest.raises(ValueError):
        KernelLogSource(NODE)
    with pytest.raises(ValueError):
        KernelLogSource(NODE, "/x", kmsg=True)


def test_a_new_file_with_the_same_inode_number_is_read_from_zero(tmp_path):
    # inode numbers are re-used at once by most file systems; the saved head hash tells files apart
    log = tmp_path / "kern.log"
    log.write_text("")
    a = KernelLogSource(NODE, str(log))
    a.poll()
    append(log, xid(1) + xid(2))
    a.poll()
    saved = a.position()
    assert saved["head"]
    fd = os.open(log, os.O_WRONLY)
    try:
        os.pwrite(fd, (xid(8) + xid(9)).encode(), 0)  # other content, same inode, same size
    finally:
        os.close(fd)
    b = KernelLogSource(NODE, str(log), position=saved)
    assert pids(b.poll()) == [8, 9]


def test_a_kernel_log_named_through_a_link_is_read_and_followed_across_rotation(tmp_path):
    # the operator names the kernel log (sites point /var/log/kern.log at another disk): a link
    # there is resolved once, at start, and the file it names is then followed like any other
    real = tmp_path / "data" / "kern.log"
    real.parent.mkdir()
    real.write_text("")
    link = tmp_path / "kern.log"
    link.symlink_to(real)
    src = KernelLogSource(NODE, str(link))
    assert src.poll() == []
    append(real, xid(1))
    assert pids(src.poll()) == [1]
    os.rename(real, real.parent / "kern.log.1")
    append(real, xid(2))
    assert pids(src.poll()) + pids(src.poll()) == [2]
