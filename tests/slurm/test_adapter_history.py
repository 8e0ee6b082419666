"""Slurm's accounting through the adapter (issue 23, item 2): ``SlurmAdapter.job_history`` runs
sacct and reads its text strictly, through the Runner seam. What sacct prints is modelled on what
Slurm 22.05's ``sacct -a -X -P -n --duplicates -o JobIDRaw,State,Submit,Eligible,Start,End,NodeList``
printed on the test cluster for a job requeued twice."""

from __future__ import annotations

import sys
import time

import pytest

from scheduler_adapters.base import CommandFailed, CommandResult, SchedulerUnavailable
from scheduler_adapters.simulated import SimulatedCluster
from scheduler_adapters.slurm import SlurmAdapter
from scheduler_adapters.slurm.history import SACCT_FIELDS, parse_sacct
from scheduler_adapters.slurm.runner import subprocess_runner


def _t(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


REQUEUED_TWICE = (
    "91|REQUEUED|2026-12-06T06:00:00|2026-12-06T06:00:00|2026-12-06T06:00:01|2026-12-06T06:01:10|n1\n"
    "91|REQUEUED|2026-12-06T06:01:10|2026-12-06T06:01:20|2026-12-06T06:01:22|2026-12-06T06:02:30|n[2-3]\n"
    "91|RUNNING|2026-12-06T06:02:30|2026-12-06T06:02:40|2026-12-06T06:02:41|Unknown|n4\n"
    "92|PENDING|2026-12-06T06:03:00|2026-12-06T06:03:00|Unknown|Unknown|None assigned\n"
    "93|CANCELLED by 0|2026-12-06T06:03:05|2026-12-06T06:03:05|None|2026-12-06T06:03:09|None assigned\n"
)


class Fake:
    def __init__(self, result: CommandResult):
        self.result, self.calls = result, []

    def __call__(self, argv, timeout):
        self.calls.append(list(argv))
        return self.result


def _adapter(stdout: str = "", rc: int = 0, stderr: str = "", **kw) -> tuple[SlurmAdapter, Fake]:
    fake = Fake(CommandResult(rc, stdout, stderr, **kw))
    return SlurmAdapter(runner=fake), fake


def test_a_requeued_jobs_attempts_are_its_records_oldest_first():
    adapter, fake = _adapter(REQUEUED_TWICE)
    records = adapter.job_history(_t("2026-12-06T05:00:00"), _t("2026-12-06T07:00:00"))
    argv = fake.calls[0]
    assert argv[:7] == ["sacct", "-a", "-X", "-P", "-n", "--duplicates", "--noconvert"]
    assert argv[argv.index("-o") + 1] == ",".join(SACCT_FIELDS)
    assert "JobName" not in " ".join(argv)  # no user-set field is asked for
    assert argv[argv.index("-S") + 1] == "2026-12-06T05:00:00" and argv[argv.index("-E") + 1] == "2026-12-06T07:00:00"
    mine = [r for r in records if r.job_id == "91"]
    assert [(r.attempt, r.state, r.nodes) for r in mine] == [
        (0, "REQUEUED", ("n1",)),
        (1, "REQUEUED", ("n2", "n3")),
        (2, "RUNNING", ("n4",)),
    ]
    assert mine[1].submit_at == _t("2026-12-06T06:01:10") and mine[1].eligible_at == _t("2026-12-06T06:01:20")
    assert mine[1].start_at == _t("2026-12-06T06:01:22") and mine[1].end_at == _t("2026-12-06T06:02:30")
    assert mine[2].end_at is None
    pending = next(r for r in records if r.job_id == "92")
    assert (pending.state, pending.start_at, pending.end_at, pending.nodes) == ("PENDING", None, None, ())
    cancelled = next(r for r in records if r.job_id == "93")
    assert (cancelled.state, cancelled.start_at) == ("CANCELLED", None)  # "by 0" is not its state


def test_one_job_is_asked_by_id_and_a_bad_id_is_refused_before_running_anything():
    adapter, fake = _adapter(REQUEUED_TWICE)
    assert {r.job_id for r in adapter.job_history(None, time.time(), "91")} == {"91"}
    assert fake.calls[0][-2:] == ["-j", "91"]
    assert fake.calls[0][fake.calls[0].index("-S") + 1] == time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(0))
    with pytest.raises(ValueError):
        adapter.job_history(None, time.time(), "91,92;rm -rf /")
    assert len(fake.calls) == 1


def test_lines_not_in_their_form_are_dropped_never_guessed_at():
    good = "95|COMPLETED|2026-12-06T06:00:00|2026-12-06T06:00:00|2026-12-06T06:00:01|2026-12-06T06:00:09|n1\n"
    hostile = (
        # what a job name with a "|" would look like had it been asked for: one field too many
        "96|COMPLETED|evil|name|2026-12-06T06:00:00|2026-12-06T06:00:00|2026-12-06T06:00:01|Unknown|n1\n"
        # a record cut by a newline
        "97|FAILED|2026-12-06T06:00:00|2026-12-06T06:00:00\n|2026-12-06T06:00:01|2026-12-06T06:00:02|n1\n"
        # not UTF-8 (decoded with surrogateescape, as the runner does)
        + b"98|FAILED|2026-12-06T06:00:00|\xff|Unknown|Unknown|n1\n".decode("utf-8", "surrogateescape")
        + "99|FAILED|2026-12-06T06:00:00|2026-12-06T06:00:00|2026-12-06T06:00:01|2026-12-06T06:00:02|n[1-\n"
        + "x1|FAILED|2026-12-06T06:00:00|2026-12-06T06:00:00|Unknown|Unknown|n1\n"
        + "100|failed|2026-12-06T06:00:00|2026-12-06T06:00:00|Unknown|Unknown|n1\n"
        + "101|FAILED|06:00:00 yesterday|2026-12-06T06:00:00|Unknown|Unknown|n1\n"
        + "|||||\n"
        + "102|FAILED|2026-12-06T06:00:00|2026-12-06T06:00:00|Unknown|Unknown|n1\r\n"
        + "103|FAILED|2026-12-06T06:00:00|2026-12-06T06:00:00|Unknown|Unknown|n1 n2\n"
    )
    records, dropped = parse_sacct(hostile + good)
    assert [r.job_id for r in records] == ["95"]
    assert dropped == 11
    adapter, _ = _adapter(good + hostile)
    assert [r.job_id for r in adapter.job_history(None, time.time())] == ["95"]


def test_a_job_id_handed_out_again_is_told_apart_by_time():
    """A wiped controller gives out 91 again: the old records end long before the new job's."""
    old = "91|COMPLETED|2026-12-05T06:00:00|2026-12-05T06:00:00|2026-12-05T06:00:01|2026-12-05T06:10:00|n2\n"
    records, _ = parse_sacct(old + REQUEUED_TWICE)
    mine = [r for r in records if r.job_id == "91"]
    assert [r.attempt for r in mine] == [0, 1, 2] and mine[0].nodes == ("n1",)


def test_no_accounting_is_an_answer_and_slurmdbd_away_is_an_outage():
    adapter, _ = _adapter(rc=1, stderr="Slurm accounting storage is disabled\n")
    assert adapter.job_history(None, time.time()) is None
    assert "disabled" in adapter.accounting_unavailable
    adapter, _ = _adapter(rc=127, stderr="[Errno 2] No such file or directory: 'sacct'")
    assert adapter.job_history(None, time.time()) is None and "no sacct" in adapter.accounting_unavailable
    adapter, _ = _adapter(rc=1, stderr="sacct: error: Problem talking to the database: Connection refused")
    with pytest.raises(SchedulerUnavailable):
        adapter.job_history(None, time.time())
    adapter, _ = _adapter(rc=124, timed_out=True)
    with pytest.raises(SchedulerUnavailable):
        adapter.job_history(None, time.time())
    adapter, _ = _adapter(rc=1, stderr="sacct: error: something else entirely")
    with pytest.raises(CommandFailed):
        adapter.job_history(None, time.time())
    assert SimulatedCluster().job_history(None, time.time()) is None


def test_huge_output_is_not_read():
    """The real runner on a child that prints past the adapter's bound: killed, an outage."""

    def runner(argv, timeout):
        return subprocess_runner(
            [sys.executable, "-c", "import sys; sys.stdout.write('1|RUNNING|' * 200000)"], timeout, max_output=4096
        )

    adapter = SlurmAdapter(runner=runner, max_output=4096)
    with pytest.raises(SchedulerUnavailable, match="max_output"):
        adapter.job_history(None, time.time())
