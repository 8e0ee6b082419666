"""Hostile flight-recorder dumps: each is refused with a reason that says why, and never stops the
good dumps beside it from being read and analysed (issue 21: a pickle that names a class, a 1 GB
file, a FIFO, a rank of 10^12, truncated, mixed-version, wrong types, deep nesting, too many
entries)."""

from __future__ import annotations

import copy
import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

import pytest

from engine.errors import DumpRefused, RecoverError
from engine.sources.flight_recorder import JSON, PICKLE, Limits, read_dump, read_dumps, sniff
from engine.sources.fr_analysis import analyze
from tests.attribution.fr_dumps import FakeJob, as_json_form, encode


def _job(world: int = 4) -> FakeJob:
    job = FakeJob(world)
    for _ in range(3):
        job.collective()
    job.collective(state="scheduled", skip={world - 1})
    return job


def _refused(path: Path, limits: Limits = Limits(), **kw: Any) -> str:
    with pytest.raises(DumpRefused) as info:
        read_dump(str(path), limits, **kw)
    assert isinstance(info.value, RecoverError) and info.value.path == str(path)
    return info.value.reason


class _Shell:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_pickle_that_names_a_class_is_refused_and_runs_nothing(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "ran"
    dump = _job().dump(0)
    dump["entries"][0]["frames"] = [_Shell(marker)]  # GLOBAL/STACK_GLOBAL os.system, then REDUCE
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(dump, protocol=protocol))
    assert pickle.dumps(dump, protocol=protocol)[:2] == bytes([0x80, protocol])
    reason = _refused(path)
    assert reason == "pickle names a class (posix.system): a dump holds none"
    assert not marker.exists()


def test_a_pickle_of_a_builtin_callable_is_refused(tmp_path: Path) -> None:
    """Even builtins (eval, getattr) are classes to find: none is."""
    path = tmp_path / "trace_1"
    path.write_bytes(
        b"\x80\x02}q\x00X\x07\x00\x00\x00versionq\x01cbuiltins\neval\nq\x02X\x04\x00\x00\x001+1q\x03\x85q\x04Rq\x05s."
    )
    assert "names a class (builtins.eval)" in _refused(path)


def test_an_extension_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace_1"
    path.write_bytes(b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01\x82\x01s.")  # EXT1 code 1
    assert "cannot be read" in _refused(path)


def test_a_1_gb_file_is_refused_by_its_size_before_a_byte_is_read(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "nccl_trace_rank_2"
    with open(path, "wb") as fh:
        fh.truncate(1 << 30)  # sparse: costs nothing on disk
    reads = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    t0 = time.monotonic()
    reason = _refused(path)
    assert "1073741824 bytes, more than the bound of 67108864" in reason
    assert reads == [] and time.monotonic() - t0 < 1


def test_the_size_bound_is_a_setting(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(encode(_job().dump(0), "pickle"))
    assert read_dump(str(path)).rank == 0
    assert "more than the bound of 100" in _refused(path, Limits(max_bytes=100))


def test_a_fifo_a_device_and_a_link_are_never_opened_to_read(tmp_path: Path) -> None:
    fifo = tmp_path / "nccl_trace_rank_1"
    os.mkfifo(fifo)  # nobody writes it: a blocking open would hang here
    assert "not a regular file" in _refused(fifo)
    link = tmp_path / "nccl_trace_rank_2"
    link.symlink_to("/dev/zero")
    assert "symbolic link" in _refused(link)
    good = tmp_path / "elsewhere"
    good.write_bytes(encode(_job().dump(3), "pickle"))
    link3 = tmp_path / "nccl_trace_rank_3"
    link3.symlink_to(good)
    assert "symbolic link" in _refused(link3)
    assert "not a regular file" in _refused(Path("/dev/zero"), rank=0)


def test_a_rank_of_10_to_the_12_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_1000000000000"
    path.write_bytes(encode(_job().dump(0), "pickle"))
    assert "rank 1000000000000 is out of range" in _refused(path)
    dump = _job().dump(0)
    dump["pg_config"]["0"]["ranks"] = "[0, 1, 2, 1000000000000]"
    inside = tmp_path / "nccl_trace_rank_0"
    inside.write_bytes(encode(dump, "pickle"))
    assert "1000000000000 is out of range" in _refused(inside)
    no_rank = tmp_path / "trace"
    no_rank.write_bytes(encode(_job().dump(0), "pickle"))
    assert "does not end in the rank" in _refused(no_rank)


@pytest.mark.parametrize("form", ["pickle", "json"])
def test_truncated_dumps_are_refused(tmp_path: Path, form: str) -> None:
    data = encode(_job().dump(0), form)
    path = tmp_path / "nccl_trace_rank_0"
    for cut in (len(data) // 2, len(data) - 1, 40):
        path.write_bytes(data[:cut])
        reason = _refused(path)
        assert "truncated" in reason or "cannot be read" in reason


def test_versions(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    for version, ok in (("1.4", True), ("2.2", True), ("2.10", True), ("3.0", False), ("2", False)):
        job = _job()
        job.version = version if ok else "2.5"
        dump = job.dump(0)
        dump["version"] = version
        path.write_bytes(encode(dump, "pickle"))
        if ok:
            assert read_dump(str(path)).version == version
        else:
            assert "version" in _refused(path)
    # a job whose ranks run different versions is read and analysed as one
    job = _job(6)
    job.versions = {0: "1.4", 1: "2.2", 2: "2.10"}
    job.write(tmp_path / "mixed", form={3: "json"})
    dumps, refused = read_dumps([str(tmp_path / "mixed")])
    assert refused == [] and {d.version for d in dumps} == {"1.4", "2.2", "2.5", "2.10"}
    assert {s.rank for s in analyze(dumps)} == {5}


WRONG = [None, 1.5, True, "x", [], {}, [[1]], -3, 1 << 70]


def _fields(dump: dict) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = [("version",), ("pg_config",), ("pg_status",), ("entries",)]
    paths += [("pg_config", "0"), ("pg_config", "0", "ranks"), ("pg_config", "0", "name"), ("pg_config", "0", "desc")]
    paths += [
        ("pg_status", "0"),
        ("pg_status", "0", "last_enqueued_collective"),
        ("pg_status", "0", "last_completed_collective"),
    ]
    paths += [("entries", 0)] + [
        ("entries", 0, k)
        for k in dump["entries"][0]
        if k
        not in (
            "frames",
            "input_dtypes",
            "output_sizes",
            "output_dtypes",
            "time_discovered_started_ns",
            "time_discovered_completed_ns",
            "retired",
            "timeout_ms",
        )
    ]
    return paths


def _set(d: Any, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value


@pytest.mark.parametrize("form", ["pickle", "json"])
def test_a_wrong_type_in_any_field_refuses_the_file_with_the_field_named(tmp_path: Path, form: str) -> None:
    base = _job().dump(0)
    path = tmp_path / "nccl_trace_rank_0"
    tried = refused = 0
    for field in _fields(base):
        for value in WRONG:
            dump = copy.deepcopy(base)
            _set(dump, field, value)
            try:
                path.write_bytes(
                    encode(dump, form) if form == "pickle" else json.dumps(_json_with(base, field, value)).encode()
                )
            except (TypeError, ValueError):
                continue  # JSON cannot say it
            tried += 1
            try:
                got = read_dump(str(path))
            except DumpRefused as exc:
                refused += 1
                assert exc.reason and "Traceback" not in exc.reason
                continue
            # what is accepted must still be a well-formed dump: known state, int sequence numbers
            assert all(isinstance(e.seq, int) and not isinstance(e.seq, bool) for e in got.entries)
            assert all(isinstance(g.ranks, tuple) for g in got.groups.values())
    assert tried > 150 and refused > tried * 0.7


def _json_with(dump: dict, field: tuple, value: Any) -> dict:
    out = as_json_form(dump)
    if field[0] == "entries" and "entries" not in out:
        out["entries"] = []
    try:
        _set(out, field, value)
    except (KeyError, IndexError, TypeError):
        pass
    return out


def test_named_fields_in_reasons(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    dump = _job().dump(0)
    dump["entries"][2]["collective_seq_id"] = "7"
    path.write_bytes(encode(dump, "pickle"))
    assert _refused(path) == "entries[2].collective_seq_id: expected an integer, got str"
    dump["entries"][2]["collective_seq_id"] = 7
    dump["entries"][1]["state"] = "exploded"
    path.write_bytes(encode(dump, "pickle"))
    assert "entries[1].state" in _refused(path)
    path.write_bytes(pickle.dumps([1, 2], protocol=2))  # a pickle, but of no dump
    assert _refused(path) == "dump: expected a mapping, got list"


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(b'{"version": "2.5", "entries": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    assert "cannot be read" in _refused(path)
    path.write_bytes(_deep_pickle(_job().dump(0)))
    assert "entries[0]: expected a mapping" in _refused(path)


def _deep_pickle(dump: dict) -> bytes:
    """pickle.dumps recurses (and fails at this depth), so the nesting is written by hand: the
    dump's "entries": None becomes EMPTY_LIST, then 100000 EMPTY_LISTs each APPENDed into the one
    below: entries = [[[...]]]."""
    depth = 100_000
    head = pickle.dumps({"version": "2.5", "pg_config": dump["pg_config"], "entries": None}, protocol=2)
    assert head.endswith(b"Nu."), head[-6:]
    return head[:-3] + b"]" + b"]" * depth + b"a" * depth + b"u."


def test_a_huge_entry_count_is_refused(tmp_path: Path) -> None:
    job = FakeJob(2)
    for _ in range(300):
        job.collective()
    job.write(tmp_path)
    assert "entries: 300, more than the bound of 256" in _refused(
        tmp_path / "nccl_trace_rank_0", Limits(max_entries=256)
    )


def test_sniffed_by_content_not_by_name(tmp_path: Path) -> None:
    job = _job()
    assert sniff(encode(job.dump(0), "pickle")[:512]) == PICKLE
    assert sniff(encode(job.dump(0), "json")[:512]) == JSON
    assert sniff(pickle.dumps(job.dump(0), protocol=5)[:512]) == PICKLE
    for text in (b"[rank0]: NCCL watchdog timeout\n", b'{"level": "info"}', b"\x80\x01", b"", b"\x80"):
        assert sniff(text) is None
    # a pickle that starts with a class is sniffed as a pickle, and its loading refuses it
    assert sniff(b"\x80\x02cos\nsystem\n") == PICKLE
    path = tmp_path / "trace_0"
    path.write_bytes(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00id\x85R.")
    assert _refused(path) == "pickle names a class (os.system): a dump holds none"


def test_one_bad_file_among_good_ones(tmp_path: Path) -> None:
    """The good dumps are analysed, the bad ones named with their reasons; a job log in the
    folder is not a dump and is left alone."""
    job = _job(8)
    job.write(tmp_path, form={2: "json"}, omit={4})
    marker = tmp_path / "ran"
    evil = _job(8).dump(4)
    evil["entries"][0]["frames"] = [_Shell(marker)]
    (tmp_path / "nccl_trace_rank_4").write_bytes(pickle.dumps(evil, protocol=2))
    (tmp_path / "nccl_trace_rank_9").write_bytes(encode(job.dump(1), "json")[:50])
    os.mkfifo(tmp_path / "nccl_trace_rank_10")
    (tmp_path / "slurm-12.out").write_text("[rank0]: watchdog caught collective operation timeout\n")
    dumps, refused = read_dumps([str(tmp_path)])
    assert [d.rank for d in dumps] == [0, 1, 2, 3, 5, 6, 7]
    assert {os.path.basename(r.path): r.reason if "class" in r.reason else r.reason.split(" ")[0] for r in refused} == {
        "nccl_trace_rank_4": "pickle names a class (posix.system): a dump holds none",
        "nccl_trace_rank_9": "JSON",
    }  # the FIFO and the log do not sniff as dumps; given by name they are refused:
    _, named = read_dumps(
        [str(tmp_path / "nccl_trace_rank_10"), str(tmp_path / "slurm-12.out"), str(tmp_path / "nope_3")]
    )
    assert [r.reason.split(" (")[0] for r in named] == [
        "not a regular file",
        "not a flight-recorder dump",
        "cannot open: No such file or directory",
    ]
    assert {r.rank for r in refused} == {4, 9}
    # rank 4 wrote a dump, if a refused one: it is not named for writing none
    assert {s.rank for s in analyze(dumps, unread={r.rank for r in refused if r.rank is not None})} == {7}
    assert {s.rank for s in analyze(dumps)} == {4, 7}
    assert not marker.exists()


def test_two_dumps_for_one_rank(tmp_path: Path) -> None:
    job = _job()
    job.write(tmp_path / "a")
    job.write(tmp_path / "b", prefix="other_")
    dumps, refused = read_dumps([str(tmp_path / "a"), str(tmp_path / "b" / "other_1")])
    assert len(dumps) == 4 and "a second dump for rank 1" in refused[0].reason
