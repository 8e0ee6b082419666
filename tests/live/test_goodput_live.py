"""The goodput report's inputs are recorded by the running controller (issue 23, part 2): a job
that fails twice and is recovered twice, in act mode on the simulated cluster, gets a goodput
row whose instants are the journal's, the scheduler states' and the progress lines' own times.
In process (the real-Slurm version of this is tests/e2e/test_goodput_slurm.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.live.actuator import Actuator
from engine.ops.goodput import report_from_store
from scheduler_adapters.simulated import SimulatedCluster
from tests.helpers import wait_for
from tests.live.test_node_job_binding import make, xid

STEP_MS = 50.0  # printed; the lines come about as often, so the lost work fits in the attempt


def _steps(ctl, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctl.step()
        time.sleep(0.02)


def _until(ctl, what: str, check, timeout: float = 10.0):
    def probe():
        ctl.step()
        return check()

    return wait_for(what, probe, timeout, every=0.02)


def _print(log: Path, *lines: str) -> None:
    with open(log, "a") as fh:
        fh.write("".join(line + "\n" for line in lines))


def _train(ctl, log: Path, first: int, last: int, checkpoint: int) -> None:
    """Progress lines first..last (a checkpoint after ``checkpoint``), each read on its own."""
    for step in range(first, last + 1):
        _print(log, f"iter {step}: loss 2.000, time {STEP_MS:.2f}ms")
        if step == checkpoint:
            _print(log, f"saved checkpoint at step {checkpoint}")
        _steps(ctl, 0.05)


@pytest.fixture
def controller(tmp_path):
    sim = SimulatedCluster([f"n{i}" for i in range(1, 7)])
    logs = tmp_path / "logs"
    logs.mkdir()

    def actuator(ctl):
        return Actuator(ctl.store, ctl.adapter, ctl.compiled, ctl.metrics, verify_timeout=0.0, retry_delay=0.0)

    ctl = make(tmp_path, sim, dry_run=False, actuator_factory=actuator, scheduler_interval=0.0)
    ctl.startup()
    yield ctl, sim, logs
    ctl.stop_event.set()
    ctl.follower.stop()
    ctl.store.close()


def test_a_job_recovered_twice_gets_the_journals_times(controller):
    ctl, sim, logs = controller
    log = logs / "slurm-train.out"
    log.write_text("")
    job = sim.submit("train", nodes=2, stdout=str(log))
    store = ctl.store
    _until(ctl, "the job seen running", lambda: any(e["state"] == "RUNNING" for e in store.job_events(job)))
    plan = ((1, 5, 4), (5, 9, 7), (8, 10, 10))  # (first step, last step, checkpoint) per attempt
    for attempt, (first, last, ckpt) in enumerate(plan):
        _train(ctl, log, first, last, ckpt)
        if attempt == len(plan) - 1:
            break
        time.sleep(0.2)  # the job silent before the GPU fails: part of the detection delay
        xid(ctl, sim.job(job).nodes[-1])
        _until(ctl, f"requeue {attempt + 1}", lambda: sim.job(job).attempt == attempt + 1)
        _until(
            ctl,
            "the requeued attempt seen waiting",
            lambda: any(e["attempt"] == attempt + 1 and e["state"] == "PENDING" for e in store.job_events(job)),
        )
        time.sleep(0.3)  # queued
        sim.tick()
        _until(ctl, "it runs again", lambda: store.job_events(job)[-1]["state"] == "RUNNING")
        time.sleep(0.2)  # start-up: running, no progress yet
    sim.fail(job, exit_code=0, state="COMPLETED")
    _until(ctl, "the job seen completed", lambda: store.job_events(job)[-1]["state"] == "COMPLETED")

    rep = report_from_store(store, now=time.time(), job=job, gpus_per_node=8)
    events = store.job_events(job)
    progress = store.progress_rows(job)
    incidents = {inc.attempt: inc for inc in store.incidents()}
    assert [f["attempt"] for f in rep["failures"]] == [0, 1]
    for f in rep["failures"]:
        k = f["attempt"]
        inc = incidents[k]
        (requeue,) = [a for a in store.actions(inc.id) if a["action"] == "requeue"]
        assert requeue["status"] == "verified" and requeue["issued_at"] is not None
        nxt = [e for e in events if e["attempt"] == k + 1]
        assert f["incident"] == inc.id and f["fault_class"] == "gpu_fell_off_bus"
        assert f["failed_at"] == progress[(job, k)]["last_at"]
        assert f["detected_at"] == inc.detected_wall
        assert f["requeued_at"] == requeue["issued_at"]
        # a poll is stamped with its step's start: the requeue that step ran may be a few ms later,
        # and each instant of the chain is at least the one before it
        assert nxt[0]["state"] == "PENDING" and nxt[0]["at"] - f["requeued_at"] > -0.5
        assert f["waiting_at"] == max(nxt[0]["at"], f["requeued_at"])
        assert f["running_at"] == next(e["at"] for e in nxt if e["state"] == "RUNNING")
        assert f["resumed_at"] == progress[(job, k + 1)]["first_at"]
        lost = f["lost"]
        assert lost["detection"]["seconds"] == pytest.approx(inc.detected_wall - f["failed_at"])
        assert lost["decision"]["seconds"] == pytest.approx(requeue["issued_at"] - inc.detected_wall)
        assert lost["queue"]["seconds"] == pytest.approx(f["running_at"] - f["waiting_at"])
        assert lost["queue"]["seconds"] >= 0.25
        restart = (f["waiting_at"] - f["requeued_at"]) + (f["resumed_at"] - f["running_at"])
        assert lost["restart"]["seconds"] == pytest.approx(restart) and restart >= 0.15
        first, last, ckpt = plan[k]
        assert (f["step"], f["checkpoint"], f["lost_steps"]) == (last, ckpt, last - ckpt)
        assert f["step_time_s"] == pytest.approx(STEP_MS / 1000)
        assert lost["work_lost"]["seconds"] == pytest.approx((last - ckpt) * STEP_MS / 1000)
        assert not f["estimated"], [v["estimate"] for v in lost.values()]
        assert f["gpus"] == 16
    (row,) = rep["jobs"]
    assert row["state"] == "COMPLETED" and [a["attempt"] for a in row["attempts"]] == [0, 1, 2]
    assert 0 < row["ettr"] < 1
