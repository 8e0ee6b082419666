"""One scheduler snapshot per actuator step (issue 24, item 4): inside ``SlurmAdapter.snapshot()``
the whole-cluster queries run once, a command that may change the cluster makes the next read
ask again, and other threads (the scheduler poller) are not served the snapshot."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from scheduler_adapters.base import CommandResult, SchedulerUnavailable
from scheduler_adapters.slurm import SlurmAdapter
from scheduler_adapters.slurm.snapshot import is_query

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
SQUEUE = ("squeue", "--json", "--states=all")
SINFO = ("sinfo", "--json")
DRAIN = ("scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=x")


class Runner:
    """Canned answers; counts each command run."""

    def __init__(self) -> None:
        self.answers = {
            SQUEUE: CommandResult(0, (FIXTURES / "squeue.json").read_text()),
            SINFO: CommandResult(0, (FIXTURES / "sinfo.json").read_text()),
            DRAIN: CommandResult(0),
            ("scontrol", "show", "job", "-d", "-o", "6"): CommandResult(0, ""),
        }
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv, timeout):
        self.calls.append(tuple(argv))
        return self.answers[tuple(argv)]


@pytest.fixture
def runner() -> Runner:
    return Runner()


def reads(adapter: SlurmAdapter) -> None:
    """What one actuator step may read: every job, one job, one job's detail, the nodes, twice."""
    for _ in range(2):
        assert adapter.jobs()
        assert adapter.job("6") is not None
        assert adapter.job_detail("6") is not None
        assert adapter.nodes()


def test_a_step_s_reads_share_one_squeue_and_one_sinfo(runner):
    adapter = SlurmAdapter(runner=runner)
    with adapter.snapshot():
        reads(adapter)
    assert sorted(runner.calls) == [SINFO, SQUEUE]


def test_without_a_snapshot_each_read_asks(runner):
    adapter = SlurmAdapter(runner=runner)
    reads(adapter)
    assert runner.calls.count(SQUEUE) == 6 and runner.calls.count(SINFO) == 2
    with adapter.snapshot():
        adapter.jobs()
    adapter.jobs()  # the block is over: asked again
    assert runner.calls.count(SQUEUE) == 8


def test_a_command_that_changes_the_cluster_makes_the_next_read_ask_again(runner):
    adapter = SlurmAdapter(runner=runner)
    with adapter.snapshot():
        adapter.jobs()
        adapter.nodes()
        adapter.jobs()
        assert adapter.run(list(DRAIN)).rc == 0
        adapter.nodes()  # the drain's effect is verified against a new answer
        adapter.jobs()
        adapter.jobs()
    assert runner.calls == [SQUEUE, SINFO, DRAIN, SINFO, SQUEUE]


def test_a_failed_answer_is_not_kept(runner):
    adapter = SlurmAdapter(runner=runner)
    good = runner.answers[SQUEUE]
    runner.answers[SQUEUE] = CommandResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller")
    with adapter.snapshot():
        with pytest.raises(SchedulerUnavailable):
            adapter.jobs()
        runner.answers[SQUEUE] = good
        assert adapter.jobs() and adapter.jobs()
    assert runner.calls == [SQUEUE, SQUEUE]


def test_another_thread_is_not_served_the_snapshot(runner):
    adapter = SlurmAdapter(runner=runner)
    with adapter.snapshot():
        adapter.jobs()
        t = threading.Thread(target=lambda: [adapter.jobs(), adapter.jobs()])
        t.start()
        t.join()
        adapter.jobs()
    assert runner.calls.count(SQUEUE) == 3  # one for this thread, two for the poller's


def test_only_reads_leave_a_snapshot_standing():
    assert is_query(["squeue", "--json"]) and is_query(["sinfo", "-N"]) and is_query(["scontrol", "show", "job"])
    assert not is_query(["scontrol", "update", "NodeName=n1"]) and not is_query(["scancel", "7"])
    assert not is_query(["scontrol"]) and not is_query([]) and not is_query(["logger", "squeue"])
