"""SpoolWriter and SpoolReader: appends, rotation, partial lines, garbage, offsets, no duplicates."""

from __future__ import annotations

import json
import os

import pytest

from engine.facts import Fact
from engine.sources.spool import SpoolError, SpoolReader, SpoolWriter


def fact(i: int, node: str = "n1") -> Fact:
    return Fact.make(
        "xid", {"code": 79, "node": node, "pid": i, "detail": "x" * 40}, at=float(i), origin=f"kern.log:{i}"
    )


def seq(facts) -> list[int]:
    return [f.get("pid") for f in facts]


def test_roundtrip_one_line_per_fact(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1")
    assert w.write([fact(1), fact(2)]) == 2
    w.close()
    lines = (tmp_path / "n1.jsonl").read_text().splitlines()
    assert [json.loads(x)["attrs"]["pid"] for x in lines] == [1, 2]
    assert Fact.from_json(lines[0]) == fact(1)
    r = SpoolReader(str(tmp_path))
    assert r.read() == [fact(1), fact(2)]
    assert r.read() == []
    ino, off, head = r.offsets["n1.jsonl"]
    assert (ino, off) == (os.stat(tmp_path / "n1.jsonl").st_ino, os.path.getsize(tmp_path / "n1.jsonl"))
    assert isinstance(head, str) and head


def test_descriptor_is_append_only(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1")
    import fcntl

    assert fcntl.fcntl(w._fd, fcntl.F_GETFL) & os.O_APPEND
    w.close()


def test_writer_does_not_rewrite_a_fact_after_restart(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1")
    w.write([fact(1), fact(2)])
    w.close()
    # an agent killed before it saved its kernel-log offset reads the same lines again
    w2 = SpoolWriter(str(tmp_path), "n1")
    assert w2.write([fact(2), fact(3)]) == 1
    assert w2.stats["skipped_duplicates"] == 1
    w2.close()
    assert seq(SpoolReader(str(tmp_path)).read()) == [1, 2, 3]
    assert len((tmp_path / "n1.jsonl").read_text().splitlines()) == 3


def test_writer_remembers_ids_across_rotated_files(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1", max_bytes=2048, keep=3)
    w.write([fact(i) for i in range(20)])
    w.close()
    assert (tmp_path / "n1.jsonl.1").exists()
    w2 = SpoolWriter(str(tmp_path), "n1", max_bytes=2048, keep=3)
    assert w2.write([fact(i) for i in range(15, 22)]) == 2


def test_torn_last_line_is_ended_by_the_next_writer(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1")
    w.write([fact(1)])
    w.close()
    with open(tmp_path / "n1.jsonl", "ab") as fh:
        fh.write(fact(2).to_json().encode()[:30])  # a crash mid-line
    w2 = SpoolWriter(str(tmp_path), "n1")
    w2.write([fact(3)])
    w2.close()
    r = SpoolReader(str(tmp_path))
    assert seq(r.read()) == [1, 3]
    assert r.stats["garbage"] == 1


def test_partial_last_line_waits_until_completed(tmp_path):
    path = tmp_path / "n1.jsonl"
    line = fact(1).to_json() + "\n"
    path.write_text(line[:25])
    r = SpoolReader(str(tmp_path))
    assert r.read() == []
    assert r.offsets["n1.jsonl"][1] == 0
    with open(path, "a") as fh:
        fh.write(line[25:])
    assert seq(r.read()) == [1]
    assert r.stats["garbage"] == 0


def test_garbage_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "n1.jsonl"
    rows = [
        fact(1).to_json(),
        "not json",
        '{"kind":"nope","at":1}',
        "[1,2]",
        "\x00\xff",
        "[" * 100000,
        "",
        fact(2).to_json(),
    ]
    path.write_bytes("\n".join(rows).encode("utf-8", "surrogateescape") + b"\n")
    r = SpoolReader(str(tmp_path))
    assert seq(r.read()) == [1, 2]
    assert r.stats["garbage"] == 5


def test_overlong_line_is_garbage(tmp_path):
    path = tmp_path / "n1.jsonl"
    path.write_text(fact(1).to_json() + "\n" + "y" * 5000 + "\n" + fact(2).to_json() + "\n")
    r = SpoolReader(str(tmp_path), max_line=1000)
    assert seq(r.read()) == [1, 2]
    assert r.stats["garbage"] == 1


def test_reader_dedupes_ids_in_its_window(tmp_path):
    path = tmp_path / "n1.jsonl"
    path.write_text("".join(f.to_json() + "\n" for f in [fact(1), fact(2), fact(1)]))
    r = SpoolReader(str(tmp_path))
    assert seq(r.read()) == [1, 2]
    assert r.stats["duplicates"] == 1


def test_rotation_with_reads_in_between_loses_and_repeats_nothing(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1", max_bytes=3000, keep=50)
    r = SpoolReader(str(tmp_path))
    got = []
    n = 0
    for burst in (3, 17, 1, 40, 9, 25):
        w.write([fact(i) for i in range(n, n + burst)])
        n += burst
        got += seq(r.read())
    w.close()
    got += seq(r.read())
    assert got == list(range(n))
    assert w.stats["rotations"] > 3


def test_offsets_resume_in_a_new_reader_across_rotations(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1", max_bytes=3000, keep=50)
    r = SpoolReader(str(tmp_path))
    w.write([fact(i) for i in range(10)])
    got = seq(r.read())
    stored = json.loads(json.dumps(r.offsets))  # kept in the controller's database
    w.write([fact(i) for i in range(10, 60)])  # several rotations while the controller is down
    w.close()
    r2 = SpoolReader(str(tmp_path), offsets=stored)
    got += seq(r2.read())
    assert got == list(range(60))
    assert r2.read() == []


def test_file_rotated_away_before_it_was_read_is_counted(tmp_path):
    # (file systems re-use inode numbers at once: the head hash in the offsets tells them apart)
    w = SpoolWriter(str(tmp_path), "n1", max_bytes=2000, keep=1)
    r = SpoolReader(str(tmp_path))
    w.write([fact(i) for i in range(3)])
    assert seq(r.read()) == [0, 1, 2]
    w.write([fact(i) for i in range(3, 60)])  # many rotations, only one old file kept
    w.close()
    got = seq(r.read())
    assert r.stats["lost_files"] == 1
    assert got == sorted(got) and got[-1] == 59 and len(set(got)) == len(got)


def test_read_budget_continues_where_it_stopped(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1")
    w.write([fact(i) for i in range(30)])
    w.close()
    r = SpoolReader(str(tmp_path))
    got = []
    for _ in range(100):
        chunk = r.read(max_bytes=700)
        got += seq(chunk)
        if not chunk and len(got) == 30:
            break
    assert got == list(range(30))


def test_several_nodes_and_foreign_files(tmp_path):
    for node in ("n1", "gpu-07.rack2"):
        w = SpoolWriter(str(tmp_path), node)
        w.write([fact(i, node) for i in range(3)])
        w.close()
    (tmp_path / ".agent-n1.state").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "n1.jsonl.tmp").write_text("junk")
    r = SpoolReader(str(tmp_path))
    facts = r.read()
    assert sorted((f.get("node"), f.get("pid")) for f in facts) == sorted(
        (n, i) for n in ("n1", "gpu-07.rack2") for i in range(3)
    )
    assert set(r.offsets) == {"n1.jsonl", "gpu-07.rack2.jsonl"}


def test_truncated_spool_is_read_from_start(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1")
    w.write([fact(1), fact(2)])
    w.close()
    r = SpoolReader(str(tmp_path))
    r.read()
    (tmp_path / "n1.jsonl").write_text(fact(3).to_json() + "\n")
    assert seq(r.read()) == [3]
    assert r.stats["truncations"] == 1


@pytest.mark.parametrize("policy", ["batch", "line", "never", 0.5])
def test_fsync_policies(tmp_path, policy):
    w = SpoolWriter(str(tmp_path), "n1", fsync=policy)
    w.write([fact(1)])
    w.close()
    assert seq(SpoolReader(str(tmp_path)).read()) == [1]


@pytest.mark.parametrize("node", ["", "../etc", "a/b", ".hidden", "x" * 200, "sp ace"])
def test_bad_node_names_are_refused(tmp_path, node):
    with pytest.raises(SpoolError):
        SpoolWriter(str(tmp_path), node)


def test_bad_policy_refused(tmp_path):
    with pytest.raises(SpoolError):
        SpoolWriter(str(tmp_path), "n1", fsync="sometimes")


def test_two_element_offsets_are_accepted(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1")
    w.write([fact(1)])
    r = SpoolReader(str(tmp_path))
    r.read()
    ino, off, _ = r.offsets["n1.jsonl"]
    w.write([fact(2)])
    w.close()
    assert seq(SpoolReader(str(tmp_path), offsets={"n1.jsonl": [ino, off]}).read()) == [2]
    assert seq(SpoolReader(str(tmp_path), offsets={"n1.jsonl": [ino, off, None]}).read()) == [2]


def test_offsets_survive_a_json_roundtrip_without_a_read_in_between(tmp_path):
    # a node whose file is momentarily absent keeps its loaded offsets; storing them again must not break them
    w = SpoolWriter(str(tmp_path), "n1")
    w.write([fact(1)])
    r = SpoolReader(str(tmp_path))
    r.read()
    stored = {k: list(v) for k, v in r.offsets.items()}
    r2 = SpoolReader(str(tmp_path), {k: tuple(v) for k, v in stored.items()})
    again = {k: list(v) for k, v in r2.offsets.items()}
    w.write([fact(2)])
    w.close()
    r3 = SpoolReader(str(tmp_path), {k: tuple(v) for k, v in again.items()})
    assert seq(r3.read()) == [2] and r3.stats["lost_files"] == 0


def test_malformed_offsets_are_ignored(tmp_path):
    w = SpoolWriter(str(tmp_path), "n1")
    w.write([fact(1)])
    w.close()
    r = SpoolReader(str(tmp_path), offsets={"n1.jsonl": "garbage", "x.jsonl": [1, 2, 3]})
    assert seq(r.read()) == [1]
