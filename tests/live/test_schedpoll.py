"""engine.live.schedpoll alone: a scheduler that answers what the test says (or does not answer),
a fake clock, an engine that only records what it is given. What the controller does when
slurmctld is unreachable and when it comes back, without Slurm and without sleeping."""

from __future__ import annotations

import logging

import pytest

from engine.core.context import ClusterContext
from engine.live.metrics import LogLimiter, Metrics
from engine.live.schedpoll import SchedulerPoll
from engine.store import Store
from scheduler_adapters.base import JobInfo, NodeInfo
from engine.live.worker import PollWorker


class Adapter:
    """Jobs and nodes as the test sets them. The first ``fail`` polls, and every poll while
    ``down``, fail as they do when slurmctld is away; ``polls`` counts them."""

    def __init__(self, jobs=(), nodes=(), fail: int = 0):
        self.job_list = list(jobs)
        self.node_list = list(nodes)
        self.fail = fail
        self.down = False
        self.polls = 0

    def jobs(self):
        self.polls += 1
        if self.down or self.polls <= self.fail:
            raise RuntimeError("Unable to contact slurm controller (connect failure)")
        return list(self.job_list)

    def nodes(self):
        if self.down:
            raise RuntimeError("Unable to contact slurm controller (connect failure)")
        return list(self.node_list)


class RecordingEngine:
    def __init__(self):
        self.facts = []
        self.node_states = {}

    def ingest(self, fact) -> None:
        self.facts.append(fact)

    def to_ask(self) -> set[str]:
        return set()

    def holders(self, jobs, covers, asked_at) -> None:
        pass

    def kinds(self) -> list[tuple[str, str]]:
        return [(f.kind, f.attrs.get("job") or f.attrs.get("node")) for f in self.facts]


class Batch:
    def __init__(self):
        self.begun = 0

    def begin(self) -> None:
        self.begun += 1


class ClockedStop:
    """A stop event whose wait() moves the fake clock instead of sleeping."""

    def __init__(self, clock):
        self.clock = clock
        self.flag = False

    def is_set(self) -> bool:
        return self.flag

    def set(self) -> None:
        self.flag = True

    def wait(self, seconds: float) -> bool:
        self.clock.advance(seconds)
        return self.flag


@pytest.fixture
def store():
    st = Store(":memory:")
    yield st
    st.close()


def make(store, adapter, clock, **kw):
    followed: list[tuple] = []
    available: list[bool] = []
    metrics = Metrics()
    sched = SchedulerPoll(
        adapter,
        "fake",
        store,
        Batch(),
        metrics,
        LogLimiter(clock=clock),
        kw.pop("cluster", ClusterContext()),
        follow_job=lambda *a: followed.append(a),
        on_available=available.append,
        clock=clock,
        **kw,
    )
    return sched, followed, available, metrics


def health(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("recover_source_healthy", {"source": "scheduler"})


RUNNING = JobInfo("301", 0, "RUNNING", nodes=("n1", "n2"), stdout="/logs/slurm-301.out", stderr="/logs/err-301")
NODES = [NodeInfo("n1", "allocated"), NodeInfo("n2", "allocated")]


# -- startup: input waits for the scheduler's first answer, so long --------------------------------
@pytest.mark.parametrize(
    "silent_tries, wait, tries, gave_up",
    [
        (0, 30.0, 1, False),  # answers at once
        (3, 30.0, 4, False),  # answers on the 4th try, 3 s later
        (99, 5.0, 6, True),  # never: input is read without it after 5 s (tries at 0..5 s)
        (99, 0.0, 1, True),  # no wait asked: one try
    ],
)
def test_startup_waits_for_the_first_answer_so_long(store, clock, caplog, silent_tries, wait, tries, gave_up):
    adapter = Adapter([RUNNING], NODES, fail=silent_tries)
    sched, _, _, _ = make(store, adapter, clock, startup_wait=wait)
    engine = RecordingEngine()
    t0 = clock()

    def try_once() -> bool:
        sched.poll(clock(), engine)
        return sched.ok

    with caplog.at_level(logging.ERROR, logger="engine.live.schedpoll"):
        sched.wait_first_answer(ClockedStop(clock), try_once)
    assert adapter.polls == tries
    assert ("did not answer within" in caplog.text) == gave_up
    assert clock() - t0 == pytest.approx(tries - 1)  # one try a second
    assert engine.kinds() == ([] if gave_up else [("job", "301")])


def test_a_stop_during_the_startup_wait_is_honoured(store, clock):
    sched, _, _, _ = make(store, Adapter(fail=99), clock, startup_wait=30.0)
    stop = ClockedStop(clock)
    stop.set()
    sched.wait_first_answer(stop, lambda: pytest.fail("asked after the stop"))


# -- what a poll makes of the answer ---------------------------------------------------------------
def test_nodes_as_first_seen_are_state_and_later_changes_are_facts(store, clock):
    adapter = Adapter([], [NodeInfo("n1", "allocated"), NodeInfo("n2", "down", ("NOT_RESPONDING",))])
    sched, _, _, _ = make(store, adapter, clock, interval=5.0)
    engine = RecordingEngine()
    sched.poll(clock(), engine)
    assert engine.facts == []
    assert engine.node_states["n2"] == {"state": "down", "drained": False, "down": True}
    adapter.node_list = [NodeInfo("n1", "down", ("NOT_RESPONDING",), "Not responding"), adapter.node_list[1]]
    sched.poll(clock() + 5.0, engine)
    (fact,) = engine.facts
    assert (fact.kind, fact.origin) == ("node", "fake:nodes")
    assert dict(fact.attrs) == {
        "node": "n1",
        "state": "down",
        "flags": ("NOT_RESPONDING",),
        "reason": "Not responding",
        "drained": False,
        "down": True,
    }


def test_a_running_job_is_placed_and_its_logs_followed(store, clock):
    cluster = ClusterContext()
    sched, followed, _, _ = make(store, Adapter([RUNNING], NODES), clock, cluster=cluster)
    engine = RecordingEngine()
    sched.poll(clock(), engine)
    assert sorted(followed) == [
        ("/logs/err-301", "301", 0, ("n1", "n2")),
        ("/logs/slurm-301.out", "301", 0, ("n1", "n2")),
    ]
    assert cluster.nodes_of("301") == {"n1", "n2"} and cluster.job_on("n2") == ("301", 0)
    assert engine.kinds() == [("job", "301")] and engine.facts[0].origin == "fake:jobs"


@pytest.mark.parametrize("known_before", [False, True])
def test_a_job_that_ended_unwatched_is_history_unless_this_store_watched_it(store, clock, known_before):
    """A fresh store finds history (not acted on); a restarted controller finds what ended while it
    was down (an event): the states it last saw are in its store."""
    if known_before:
        first, *_ = make(store, Adapter([RUNNING], NODES), clock)
        first.poll(clock(), RecordingEngine())
    ended = JobInfo("301", 0, "NODE_FAIL", nodes=("n1", "n2"), exit_code=1)
    sched, _, _, _ = make(store, Adapter([ended], NODES), clock)
    engine = RecordingEngine()
    sched.poll(clock(), engine)
    if known_before:
        (fact,) = engine.facts
        assert dict(fact.attrs) == {
            "job": "301",
            "attempt": 0,
            "state": "NODE_FAIL",
            "reason": "",
            "nodes": ("n1", "n2"),
            "exit_code": 1,
        }
    else:
        assert engine.facts == []
    assert sched.job_states["301"][0] == "NODE_FAIL"  # either way, known from now on


def test_unchanged_states_make_no_facts_and_polls_keep_their_interval(store, clock):
    adapter = Adapter([RUNNING], NODES)
    sched, _, _, _ = make(store, adapter, clock, interval=5.0)
    engine = RecordingEngine()
    sched.poll(clock(), engine)
    sched.poll(clock() + 4.9, engine)  # not due: not asked
    assert adapter.polls == 1
    sched.poll(clock() + 5.0, engine)
    assert adapter.polls == 2 and engine.kinds() == [("job", "301")]


def test_inline_poll_failure_marks_the_scheduler_unhealthy_until_it_answers(store, clock, caplog):
    adapter = Adapter([RUNNING], NODES)
    sched, _, _, metrics = make(store, adapter, clock, interval=0.0)
    engine = RecordingEngine()
    adapter.down = True
    with caplog.at_level(logging.WARNING, logger="engine.live.schedpoll"):
        sched.poll(clock(), engine)
        sched.poll(clock(), engine)
    assert not sched.ok and health(metrics) == 0 and engine.facts == []
    assert caplog.text.count("scheduler poll failed") == 1  # said once per LOG_EVERY_S
    adapter.down = False
    sched.poll(clock(), engine)
    assert sched.ok and health(metrics) == 1 and engine.kinds() == [("job", "301")]


# -- recover run: the worker thread's view of an outage ---------------------------------------------
def test_slurmctld_unreachable_then_back(store, clock):
    """Away: actions are told to wait, the gauge says 0, no facts. Back: what changed meanwhile
    (the job failed) becomes a fact, and actions may go on."""
    adapter = Adapter([RUNNING], NODES)
    sched, _, available, metrics = make(store, adapter, clock)
    sched.worker = PollWorker(adapter, interval=5.0, timeout=10.0)  # driven by hand: no thread
    engine = RecordingEngine()
    sched.worker.poll_once()
    sched.poll(clock(), engine)
    assert available == [True] and engine.kinds() == [("job", "301")]

    adapter.down = True
    sched.worker.poll_once()
    sched.poll(clock(), engine)
    sched.poll(clock(), engine)
    assert available[-2:] == [False, False] and health(metrics) == 0
    assert engine.kinds() == [("job", "301")]

    adapter.down = False
    adapter.job_list = [JobInfo("301", 0, "NODE_FAIL", nodes=("n1", "n2"))]
    sched.worker.poll_once()
    sched.poll(clock(), engine)
    assert available[-1] is True and health(metrics) == 1
    assert [f.attrs["state"] for f in engine.facts] == ["RUNNING", "NODE_FAIL"]
    sched.poll(clock(), engine)  # the snapshot was taken: nothing twice
    assert len(engine.facts) == 2


def test_states_survive_a_restore_from_the_store(store, clock):
    adapter = Adapter([RUNNING], NODES)
    sched, _, _, _ = make(store, adapter, clock)
    sched.poll(clock(), RecordingEngine())
    sched.job_states["999"] = ("RUNNING", 0, (), "")  # memory ahead of the store (a rolled back step)
    sched.restore()
    assert set(sched.job_states) == {"301"} and sched.states_known and sched.node_states == {}


def test_at_takeover_only_an_answer_asked_from_then_on_is_compared(store, clock):
    """``fresh()``: the snapshot the worker holds (a call under way too) is older than the
    takeover, maybe older than the old leader's last poll, whose changes it would show undone;
    the next poll is asked at once, and only its answer is taken."""
    adapter = Adapter([RUNNING], NODES)
    sched, _, _, _ = make(store, adapter, clock)
    sched.worker = PollWorker(adapter, interval=5.0, timeout=10.0, clock=clock)  # driven by hand
    engine = RecordingEngine()
    sched.worker.poll_once()
    sched.poll(clock(), engine)
    sched.worker.poll_once()  # an answer asked before the takeover, not taken
    sched.job_states["301"] = ("NODE_FAIL", 0, ("n1", "n2"), "")  # the old leader's last word (restored)
    adapter.job_list = [JobInfo("301", 1, "RUNNING", nodes=("n3", "n4"))]  # requeued since
    clock.advance(1.0)
    sched.fresh()
    sched.poll(clock(), engine)
    sched.worker.poll_once()
    sched.poll(clock(), engine)
    assert [(f.attrs["state"], f.attrs["attempt"]) for f in engine.facts] == [("RUNNING", 0), ("RUNNING", 1)]
