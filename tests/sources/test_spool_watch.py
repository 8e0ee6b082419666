"""The spool's inotify hints (engine.sources.spool_watch): a look stats only the nodes whose files
an event named; a missed event is caught by the sweep every SWEEP_S; a lost queue, an unwatched
or remote folder mean a look at every node, as without inotify."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from engine.clock import FakeClock
from engine.facts import Fact
from engine.sources import inotify, spool_watch
from engine.sources.spool import SpoolReader, SpoolWriter
from engine.sources.spool_watch import SpoolWatch
from tests.helpers import wait_for

pytestmark = pytest.mark.skipif(not inotify.available(), reason="inotify is Linux's")


def write(w: SpoolWriter, pid: int) -> None:
    w.write([Fact.make("xid", {"code": 79, "node": w.node, "pid": pid}, at=float(pid), origin=f"kmsg:{pid}")])


@pytest.fixture
def spool(tmp_path: Path, monkeypatch):
    writers = [SpoolWriter(str(tmp_path), f"n{i}", fsync="never") for i in range(6)]
    for i, w in enumerate(writers):
        write(w, i)
    clock = FakeClock(start=time.time())
    reader = SpoolReader(str(tmp_path), clock=clock)
    watch = SpoolWatch(str(tmp_path), clock, sweep_s=5.0)
    stats: list[str] = []
    real = reader._signature

    def counted(files, folder=None):
        stats.extend(name for _, name in files)
        return real(files, folder)

    monkeypatch.setattr(reader, "_signature", counted)
    yield writers, clock, reader, watch, stats
    watch.close()
    for w in writers:
        w.close()


def pids(facts) -> list[int]:
    return sorted(f.get("pid") for f in facts)


def test_a_look_stats_only_the_nodes_an_event_named(spool) -> None:
    writers, clock, reader, watch, stats = spool
    assert watch.start()
    assert pids(reader.read(changed=watch.take())) == list(range(6))  # the first look: every node
    write(writers[2], 102)
    write(writers[4], 104)
    wait_for(lambda: {"n2.jsonl", "n4.jsonl"} <= watch._changed, timeout=10, what="the writes' events")
    stats.clear()
    clock.advance(0.5)
    assert pids(reader.read(changed=watch.take())) == [102, 104]
    assert sorted(stats) == ["n2.jsonl", "n4.jsonl"]
    stats.clear()
    clock.advance(0.5)
    assert reader.read(changed=watch.take()) == [] and stats == []  # nothing written: nothing stat-ed


def test_a_missed_event_is_caught_by_the_sweep(spool) -> None:
    writers, clock, reader, watch, stats = spool
    assert watch.start()
    reader.read(changed=watch.take())
    watch._ino.on_paths = lambda paths: None  # the next events are lost on the way
    write(writers[1], 201)
    wait_for(lambda: watch._ino.stats["events"] >= 1, timeout=10, what="the (dropped) event")
    clock.advance(1.0)
    assert reader.read(changed=watch.take()) == []  # inside the sweep period: not seen yet
    clock.advance(spool_watch.SWEEP_S)
    assert pids(reader.read(changed=watch.take())) == [201]  # the sweep looks at every node
    assert len(stats) >= 12


def test_lost_events_mean_a_look_at_every_node(spool) -> None:
    writers, clock, reader, watch, stats = spool
    assert watch.start()
    reader.read(changed=watch.take())
    clock.advance(0.5)
    assert watch.take() == set()
    watch.lost()  # what an IN_Q_OVERFLOW (or a failed read) calls
    assert watch.take() is None
    assert watch.take() == set()


def test_a_remote_or_unwatchable_folder_is_looked_at_every_time(spool, monkeypatch, caplog) -> None:
    writers, clock, reader, watch, stats = spool
    monkeypatch.setattr(spool_watch, "local_fs", lambda path: False)  # NFS: other hosts' writes raise no event
    with caplog.at_level("INFO"):
        assert not watch.start()
    assert "not on a local file system" in caplog.text
    assert watch.take() is None and watch.take() is None
    monkeypatch.setattr(spool_watch, "local_fs", lambda path: True)
    other = SpoolWatch(os.path.join(str(writers[0].spool_dir), "not-there"), clock)
    try:
        assert other.start()  # the folder is not there yet: looked at every time, watched once it is
        assert other.take() is None
        clock.advance(0.5)
        assert other.take() is None
        os.mkdir(other.path)
        clock.advance(spool_watch.SWEEP_S)
        assert other.take() is None  # watched from now on: this first answer covers what came before
        clock.advance(0.5)
        assert other.take() == set()
    finally:
        other.close()


def test_a_node_cut_short_by_the_budget_is_looked_at_again(spool) -> None:
    writers, clock, reader, watch, stats = spool
    assert watch.start()
    reader.read(changed=watch.take())
    for w in writers:
        write(w, 300 + int(w.node[1:]))
    wait_for(lambda: len(watch._changed) >= 6, timeout=10, what="six events")
    clock.advance(0.5)
    first = reader.read(max_bytes=1, changed=watch.take())  # the budget ends the look after one node
    assert len(first) == 1
    clock.advance(0.5)
    rest = reader.read(changed=watch.take())  # no new event: the nodes not looked at are still news
    assert pids(first + rest) == list(range(300, 306))


def test_a_write_wakes_the_loop_and_is_read_before_the_paced_look(tmp_path: Path) -> None:
    """The controller looks at every node's files at most every ``interval`` (0.5 s under run());
    an agent's write that inotify names is read at the next pass, and wakes the loop for it: an
    idle controller's Xid-to-store p99 was ~0.6 s (bench_live_flood), the interval plus a tick."""
    import threading
    from types import SimpleNamespace

    from engine.live.batch import Batch
    from engine.live.ingest import SpoolIngest
    from engine.live.metrics import LogLimiter, Metrics
    from engine.store import Store

    writer = SpoolWriter(str(tmp_path), "n1", fsync="never")
    write(writer, 1)
    store, metrics, clock, wake = Store(":memory:"), Metrics(), FakeClock(start=time.time()), threading.Event()
    batch = Batch(store, SimpleNamespace(files={}, touched={}), metrics, LogLimiter(), lambda closed: None)
    ingest = SpoolIngest(str(tmp_path), store, batch, metrics, LogLimiter(), trust_job_claims=True)
    seen: list = []
    engine = SimpleNamespace(ingest=seen.append)
    try:
        ingest.pace(60.0, clock, wake)  # a paced look once a minute: only a hint can read sooner
        assert ingest.watch is not None
        ingest.feed(engine)
        assert pids(seen) == [1] and not wake.is_set()
        ingest.feed(engine)  # nothing written: not due, nothing read
        assert pids(seen) == [1] and not ingest.watch.pending()
        write(writer, 2)
        assert wake.wait(10), "the write did not wake the loop"
        clock.advance(0.05)
        ingest.feed(engine)  # named by inotify: read now, 59.95 s before the paced look
        assert pids(seen) == [1, 2] and not ingest.watch.pending()
        ingest.watch.lost()  # lost events name nothing: a look at every node waits for its time
        write(writer, 3)
        wait_for(lambda: ingest.watch._changed, timeout=10, what="the write's event")
        assert not ingest.watch.pending()
        ingest.feed(engine)
        assert pids(seen) == [1, 2]
        clock.advance(60.0)
        ingest.feed(engine)
        assert pids(seen) == [1, 2, 3]
    finally:
        ingest.close()
        writer.close()
        store.close()
