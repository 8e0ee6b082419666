"""A NaN line alone stops no job (issue 18, item 4), in the live controller with a scheduler.

``loss is nan at step 812, skipping batch (grad scaler)`` is what mixed-precision loops print and
survive. On old main it was app_error -> stop -> scancel while the job kept printing progress.
Now a NaN is a failure only when the job then exits (its tasks fail, the scheduler says FAILED)
or stops making progress (the progress tracker's hang). Live there is no end of the log to go
by (that is replay's log_end, covered by the rule tests in rules/92-tests-app.yaml)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.clock import FakeClock
from engine.live.controller import Controller, ControllerConfig
from engine.rulebook import load_rulebook
from scheduler_adapters.base import CommandResult, JobInfo, NodeInfo

#: a short settle and hang bound, so a test takes seconds
SITE = "policy:\n  settle: 1s\n  hang: {bound: 2s}\n"
NAN = "loss is nan at step 812, skipping batch (grad scaler)"


class Scheduler:
    """One job whose state the test sets."""

    name = "fake"
    template_scheduler = "slurm"

    def __init__(self, logs: Path):
        self.state = "RUNNING"
        self.logs = logs

    def _job(self) -> JobInfo:
        return JobInfo("401", 0, self.state, nodes=("n1", "n2"), stdout=str(self.logs / "slurm-401.out"))

    def jobs(self):
        return [self._job()]

    def job(self, job_id):
        return self._job() if job_id == "401" else None

    def nodes(self):
        return [NodeInfo(n, "allocated") for n in ("n1", "n2")]

    def run(self, argv, timeout=30.0):
        return CommandResult(0)


@pytest.fixture
def world(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "slurm-401.out").write_text("")
    sched = Scheduler(logs)
    res = load_rulebook(defaults=True, overlays=[("site.yaml", SITE)])
    assert res.ok, res.errors
    cfg = ControllerConfig(
        db=str(tmp_path / "recover.db"),
        scheduler="fake",
        adapter=sched,
        dry_run=True,
        scheduler_interval=0.0,
        scheduler_startup_wait=5.0,
        clock=FakeClock(start=time.time()),  # moved by run_for, never by sleeping
    )
    ctl = Controller(cfg, res.compiled)
    ctl.startup()
    try:
        yield ctl, sched, logs / "slurm-401.out"
    finally:
        ctl.follower.stop()
        ctl.store.close()


def write(ctl: Controller, log: Path, line: str) -> None:
    """A line of the job's log, stamped with the controller's (fake) clock."""
    with open(log, "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(ctl.clock.wall()))} {line}\n")


def run_for(ctl: Controller, seconds: float, log: Path | None = None, step: list[int] | None = None) -> None:
    """Steps the controller for ``seconds`` of its fake clock, a step every 0.2 s of it; with
    ``log``, the job prints a step line before each. Each step reads what was written (a rescan
    marks the log to be read, so no step waits for the file watcher's event); no real waiting."""
    for _ in range(round(seconds / 0.2)):
        if log is not None and step is not None:
            step[0] += 1
            write(ctl, log, f"step={step[0]} loss=2.31")
        ctl.follower.rescan()
        ctl.step()
        ctl.clock.advance(0.2)
    ctl.follower.rescan()
    ctl.step()


def incidents(ctl: Controller) -> list[tuple]:
    return [(r.job, r.fault_class, r.decision) for r in ctl.store.incidents()]


def test_a_nan_the_loop_skips_while_progress_goes_on_stops_nothing(world):
    ctl, _, log = world
    step = [810]
    run_for(ctl, 1.0, log, step)
    write(ctl, log, NAN)
    run_for(ctl, 3.5, log, step)  # past the settle window and the hang bound, still progressing
    assert incidents(ctl) == []
    assert not [a for a in ctl.store.actions() if a["action"] == "cancel"]


def test_a_nan_then_the_scheduler_says_failed_is_an_application_error(world):
    ctl, sched, log = world
    step = [810]
    run_for(ctl, 1.0, log, step)
    write(ctl, log, NAN)
    sched.state = "FAILED"
    run_for(ctl, 2.0)
    assert incidents(ctl) == [("401", "app_error", "stop")]


def test_a_nan_then_no_progress_is_an_application_error(world):
    ctl, _, log = world
    step = [810]
    run_for(ctl, 1.0, log, step)
    write(ctl, log, NAN)
    run_for(ctl, 4.5)  # silence: the hang bound (2 s) passes, then the settle window
    assert incidents(ctl) == [("401", "app_error", "stop")]
    assert "fault.app_error_nan_then_hang" in ctl.store.rules_fired(ctl.store.incidents()[0].id)
