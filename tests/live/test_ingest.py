"""engine.live.ingest's FileIngest alone: a real rulebook, scanner and store, an engine that only
records what it is given. A burst is committed in pieces, each with the position of the last
line it holds; a stop between lines leaves the rest to be read again; a pass over one file ends
after PASS_SECONDS, the rest of its hits kept for the next pass."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from engine.core.context import ClusterContext
from engine.live.batch import BATCH_HITS, Batch
from engine.live import ingest
from engine.live.filestate import state_of
from engine.live.ingest import PASS_SECONDS, FileIngest, set_job
from engine.live.metrics import LogLimiter, Metrics
from engine.rulebook import load_rulebook
from engine.sources.follow import Tailed
from engine.store import Store

RULES = """
matchers:
  - {id: evt, pattern: 'EVT (?P<n>\\d+)', types: {n: int}}
"""


class RecordingEngine:
    def __init__(self):
        self.facts = []
        self.stats = {"incidents": 0}

    def ingest(self, fact) -> None:
        self.facts.append(fact)

    def flooded(self, flood) -> None:
        raise AssertionError("no floods here: every line differs")


@pytest.fixture(scope="module")
def compiled():
    res = load_rulebook(defaults=False, overlays=[("evt.yaml", RULES)])
    assert res.ok, res.errors
    return res.compiled


@pytest.fixture
def world(tmp_path, compiled, clock):
    log = tmp_path / "slurm-7.out"
    lines = "".join(f"2026-11-29T17:00:00 rank0: EVT {i}\n" for i in range(1, 2 * BATCH_HITS + 101))
    log.write_text(lines)
    store = Store(tmp_path / "recover.db")
    t = Tailed(str(log), inode=log.stat().st_ino)
    commits: list[int] = []
    follower = SimpleNamespace(files={t.path: t}, touched={})
    # a clock that stands still: only the hits fill a transaction, however slow the machine
    batch = Batch(store, follower, Metrics(), LogLimiter(), lambda closed: commits.append(t.offset), clock=clock)
    stop = threading.Event()
    files = FileIngest(ClusterContext(), batch, batch.metrics, LogLimiter(), stop, scheduled=False, clock=clock)
    files.use(compiled)
    files.on_new_file(t)
    yield SimpleNamespace(
        files=files, batch=batch, store=store, t=t, data=lines.encode(), stop=stop, commits=commits, clock=clock
    )
    store.close()


def test_the_file_name_gives_the_job_until_the_scheduler_says(world):
    ctx = state_of(world.t).ctx
    assert (ctx.job, ctx.source) == ("7", "job")
    set_job(world.t, "8", 2, ["n1", "n2"])
    assert (ctx.job, ctx.attempt, ctx.nodes) == ("8", 2, {"n1", "n2"})


def test_a_burst_is_committed_in_pieces_each_with_its_position(world):
    engine = RecordingEngine()
    assert world.files.feed(engine, world.t, world.data)
    world.batch.commit()
    assert [f.attrs["n"] for f in engine.facts] == list(range(1, 2 * BATCH_HITS + 101))
    ends = [i + 1 for i, b in enumerate(world.data) if b == ord("\n")]
    assert world.commits == [ends[BATCH_HITS - 1], ends[2 * BATCH_HITS - 1], len(world.data)]
    assert world.store.offsets()[world.t.path] == (world.t.inode, len(world.data), 2 * BATCH_HITS + 100)
    assert world.batch.lines_total == 2 * BATCH_HITS + 100


def test_a_stop_between_lines_commits_what_was_taken_and_leaves_the_rest(world):
    engine = RecordingEngine()
    world.stop.set()
    assert not world.files.feed(engine, world.t, world.data)  # the caller rewinds the file
    first_line = world.data.index(b"\n") + 1
    assert [f.attrs["n"] for f in engine.facts] == [1]
    assert world.store.offsets()[world.t.path] == (world.t.inode, first_line, 1)


def test_a_cut_long_line_is_counted_and_still_scanned(world):
    engine = RecordingEngine()
    state_of(world.t).scanner.max_line = 64
    long_line = b"EVT 9 " + b"x" * 200 + b"\n"
    assert world.files.feed(engine, world.t, long_line)
    assert [f.attrs["n"] for f in engine.facts] == [9]
    counted = world.batch.metrics.registry.get_sample_value(
        "recover_source_errors_total", {"kind": "file", "reason": "long_line"}
    )
    assert counted == 1


class SlowEngine(RecordingEngine):
    """Each fact takes a quarter of a pass (on the fake clock): lines that all differ, each
    converted in full, as a job printing a new exception on every line makes them."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def ingest(self, fact) -> None:
        super().ingest(fact)
        self.clock.advance(PASS_SECONDS / 4)


def test_a_pass_over_one_file_ends_after_pass_seconds_and_the_next_goes_on(world):
    engine = SlowEngine(world.clock)
    total = 2 * BATCH_HITS + 100
    assert world.files.feed(engine, world.t, world.data)
    first = len(engine.facts)
    assert (
        1 <= first <= 5
    )  # a pass's worth (and a line), not the whole read: the spool and the other files are served meanwhile
    assert world.t.held and list(world.files.paused) == [world.t.path]
    ends = [i + 1 for i, b in enumerate(world.data) if b == ord("\n")]
    assert world.store.offsets()[world.t.path] == (world.t.inode, ends[first - 1], first)  # what was taken
    passes = 1
    while world.t.held:
        assert world.files.resume(engine) == []
        assert len(engine.facts) - first <= 5 * passes
        passes += 1
    world.batch.commit()
    assert [f.attrs["n"] for f in engine.facts] == list(range(1, total + 1))  # every line once, in order
    assert passes >= total // 5
    assert not world.files.paused and state_of(world.t).pending is None
    assert world.store.offsets()[world.t.path] == (world.t.inode, len(world.data), total)
    assert world.batch.lines_total == total  # the read's lines counted once, when all were taken


def test_a_paused_file_rewound_meanwhile_is_read_again_not_resumed(world):
    engine = SlowEngine(world.clock)
    assert world.files.feed(engine, world.t, world.data)
    taken = len(engine.facts)
    world.t.held, world.t.reset = False, True  # what Follower.rewind does (reload, store outage)
    assert world.files.resume(engine) == []
    assert len(engine.facts) == taken and not world.files.paused and state_of(world.t).pending is None
    # read again from the consumed position: the next line is the first one not taken
    rest = world.data[world.t.offset :]
    world.t.read_pos = world.t.offset
    assert world.t.reset  # still set: the next feed starts the file's scanner again at its position
    assert world.files.feed(engine, world.t, rest)
    assert engine.facts[taken].attrs["n"] == taken + 1


def test_a_stop_while_paused_hands_the_file_back_to_be_rewound(world):
    engine = SlowEngine(world.clock)
    assert world.files.feed(engine, world.t, world.data)
    world.stop.set()
    taken = len(engine.facts)
    assert world.files.resume(engine) == [] and len(engine.facts) == taken  # stopping: nothing more taken
    world.stop.clear()
    engine.ingest = lambda fact: (SlowEngine.ingest(engine, fact), world.stop.set())  # a stop between two lines
    assert world.files.resume(engine) == [world.t]  # the caller rewinds it: the rest is read again
    assert len(engine.facts) == taken + 1
    assert world.store.offsets()[world.t.path][2] == taken + 1


def test_a_files_first_open_does_not_build_its_scanner_twice(world, monkeypatch):
    built: list[str] = []
    real = ingest.scanner_for
    monkeypatch.setattr(ingest, "scanner_for", lambda c, source: built.append(source) or real(c, source))
    first = world.data.index(b"\n") + 1
    world.t.reset = True  # what the follower's first open of the file says
    assert world.files.feed(RecordingEngine(), world.t, world.data[:first])
    assert built == []  # the scanner on_new_file made had never been fed: reset in place
    world.t.reset = True  # reopened after it was fed (a rewind): a new one
    engine = RecordingEngine()
    assert world.files.feed(engine, world.t, world.data[first:])
    assert built == ["job"] and [f.attrs["n"] for f in engine.facts][:2] == [2, 3]
