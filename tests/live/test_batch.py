"""engine.live.batch alone, on a real store: read positions are committed with the effects they
produced and rolled back with them; closed incidents are announced only after their commit."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from engine.live.batch import BATCH_HITS, BATCH_SECONDS, Batch
from engine.live.filestate import state_of
from engine.live.metrics import LogLimiter, Metrics
from engine.sources.follow import Tailed
from engine.store import Store


@pytest.fixture
def world(tmp_path, clock):
    log = tmp_path / "slurm-1.out"
    log.write_text("line\n" * 10)
    t = Tailed(str(log), inode=log.stat().st_ino)
    state_of(t).committed = (t.inode, 0, 0)
    store = Store(tmp_path / "recover.db")
    announced: list[list] = []
    # the batch reads the positions of the files the follower touched (read, opened) only
    follower = SimpleNamespace(files={t.path: t}, touched={})
    batch = Batch(store, follower, Metrics(), LogLimiter(clock=clock), announced.append, clock=clock)
    yield batch, store, t, announced
    store.close()


def test_positions_are_committed_with_their_effects(world):
    batch, store, t, announced = world
    batch.begin()
    store.set_meta("effect", "1")  # what the lines produced
    t.offset, t.line_no = 25, 5
    batch.touch(t)  # what the ingest does when it moves a file's position
    batch.count_lines(5)
    batch.count_fact()
    batch.spool_read({"n1": [7, 120, "head"]}, garbage=2)
    batch.commit()
    assert store.offsets()[t.path] == (t.inode, 25, 5)
    assert store.meta("effect") == "1" and store.meta("spool_offsets") == '{"n1": [7, 120, "head"]}'
    assert state_of(t).committed == (t.inode, 25, 5)
    assert (batch.lines_total, batch.facts_total) == (5, 1)
    m = batch.metrics.registry
    assert m.get_sample_value("recover_lines_total") == 5 and m.get_sample_value("recover_facts_total") == 1
    assert m.get_sample_value("recover_source_errors_total", {"kind": "spool", "reason": "garbage"}) == 2
    assert announced == [[]]


def test_an_abort_rolls_back_effects_and_positions_together(world):
    batch, store, t, announced = world
    batch.begin()
    store.set_meta("effect", "1")
    t.offset, t.line_no = 25, 5
    batch.touch(t)  # what the ingest does when it moves a file's position
    batch.count_lines(5)
    batch.closed("incident 1")
    batch.abort(RuntimeError("boom"))
    assert store.meta("effect") is None and t.path not in store.offsets()
    assert state_of(t).committed == (t.inode, 0, 0)  # memory is ahead: the controller reads again from here
    batch.begin()
    batch.closed("incident 2")
    batch.commit()
    assert announced == [["incident 2"]]  # a rolled back close is not announced
    assert batch.lines_total == 0 and store.offsets()[t.path] == (t.inode, 25, 5)


def test_back_to_the_committed_positions_after_a_rollback(tmp_path, clock):
    a, b = Tailed(str(tmp_path / "a.out"), inode=1, offset=900, line_no=90), Tailed(str(tmp_path / "b.out"), inode=2)
    b.offset, b.line_no = 50, 5
    rewound: list[Tailed] = []
    follower = SimpleNamespace(files={a.path: a, b.path: b}, rewind=rewound.append)
    batch = Batch(Store(":memory:"), follower, Metrics(), LogLimiter(), lambda closed: None, clock=clock)
    batch.back_to({a.path: (1, 400, 40)})
    assert (a.inode, a.offset, a.line_no, state_of(a).committed) == (1, 400, 40, (1, 400, 40))
    assert (b.inode, b.offset, b.line_no) == (2, 0, 0)  # nothing committed for it: from its start
    assert rewound == [a, b]  # both read again from there


def test_unmoved_files_are_not_written_again(world):
    batch, store, t, _ = world
    batch.begin()
    batch.follower.touched[t.path] = t  # read, and nothing came of it
    batch.commit()
    assert t.path not in store.offsets()


def test_a_file_the_follower_moved_by_itself_is_saved(world):
    batch, store, t, _ = world
    batch.begin()
    t.inode, t.offset, t.line_no = t.inode + 1, 0, 0  # rotated: the new file, nothing read from it yet
    batch.follower.touched[t.path] = t
    batch.commit()
    assert store.offsets()[t.path] == (t.inode, 0, 0) and not batch.follower.touched


def test_commit_without_a_transaction_does_nothing(world):
    batch, _, _, announced = world
    batch.commit()
    assert announced == []


@pytest.mark.parametrize(
    "hits, seconds, full", [(BATCH_HITS - 1, 0.0, False), (BATCH_HITS, 0.0, True), (0, BATCH_SECONDS, True)]
)
def test_a_transaction_is_full_after_so_many_hits_or_so_long(world, clock, hits, seconds, full):
    batch, _, _, _ = world
    assert not batch.full()  # none in progress
    batch.begin()
    for _ in range(hits):
        batch.count_hit()
    clock.advance(seconds)
    assert batch.full() == full
    batch.commit()


def test_an_opened_incident_asks_for_a_commit_and_is_timed(world, clock):
    batch, _, _, _ = world
    batch.begin()
    assert not batch.opened_incidents
    batch.opened(written_at=0.0, n=2)
    assert batch.opened_incidents
    batch.commit()
    assert not batch.opened_incidents
    assert batch.metrics.registry.get_sample_value("recover_detection_latency_seconds_count") == 2


def test_a_quarantined_input_is_kept_with_its_error(world, caplog):
    batch, store, _, _ = world
    batch.begin()
    with caplog.at_level(logging.ERROR, logger="engine.live.batch"):
        batch.quarantine("line", "slurm-1.out:3", "POISON", OverflowError("too large"))
        batch.quarantine("line", "slurm-1.out:4", "POISON 2", OverflowError("too large"))
    batch.commit()
    assert [(r["origin"], r["error"]) for r in store.quarantined()] == [
        ("slurm-1.out:4", "OverflowError: too large"),
        ("slurm-1.out:3", "OverflowError: too large"),
    ]
    assert caplog.text.count("input set aside") == 1  # rate-limited
    assert batch.metrics.registry.get_sample_value("recover_quarantined_total", {"kind": "line"}) == 2


def test_the_spool_offsets_json_is_json_dumps_text_as_nodes_come_change_and_go():
    import json
    import random

    from engine.live.ingest import OffsetsJSON

    enc, rng = OffsetsJSON(), random.Random(7)
    offsets: dict[str, tuple] = {}
    for _ in range(300):
        node = f"n{rng.randrange(40)}"
        if rng.random() < 0.1:
            offsets.pop(node, None)
        else:
            offsets[node] = (rng.randrange(5), rng.randrange(10_000), rng.choice(["256:ab", '12:é"x', None]))
        assert enc.encode(offsets) == json.dumps({k: list(v) for k, v in offsets.items()})


def test_a_files_fingerprint_is_of_the_inode_whose_position_is_saved(tmp_path):
    import os

    from engine.live.batch import head_of
    from engine.sources.files import file_head
    from engine.sources.tail import TailFile
    from engine.sources.tailed import Tailed

    log = tmp_path / "slurm-1.out"
    log.write_bytes(b"first file\n")
    t = Tailed(str(log))
    t.fh = TailFile.open(str(log))
    t.inode = t.fh.ino
    first = file_head(str(log))
    os.rename(log, tmp_path / "slurm-1.out.1")  # rotated: the name is another file's now
    log.write_bytes(b"second file, longer\n")
    try:
        assert head_of(t) == first  # the open file's, the inode t.offset belongs to
        t.fh.close()
        t.fh, t.inode = None, None
        assert head_of(t) == file_head(str(log)) != first  # nothing open: the file at the path
    finally:
        if t.fh is not None:
            t.fh.close()
