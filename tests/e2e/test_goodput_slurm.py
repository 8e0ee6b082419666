"""The goodput report on the real Slurm (issue 23): a job that fails twice and is recovered twice
by `recover run` in act mode gets two failure rows whose instants and delays are the journal's
own timestamps (the incident's opening, the requeue's start), the job states the controller
polled from Slurm and the job's own progress lines, to 1%."""

from __future__ import annotations

import time

import pytest

from engine.ops.goodput import CAUSES, report_from_store
from engine.store import Store
from tests.e2e.test_slurm_e2e import Harness, slurm  # noqa: F401  (slurm: the module's fixture)
from tests.helpers import wait_for

pytestmark = pytest.mark.slurm
# a training job that stops making progress when its node's GPU dies (the test marks it dead with
# a file, as a real GPU stops answering), before the driver's Xid says why
JOB = """#!/bin/bash
echo "SLURM_JOB_ID=$SLURM_JOB_ID SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0} SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST"
for i in $(seq 1 900); do
  if [ ! -e DEAD/gpu-dead-$SLURMD_NODENAME ]; then
    echo "$(date -u +%Y-%m-%dT%H:%M:%S) [Rank 0] step=$((i + ${SLURM_RESTART_COUNT:-0} * 1000)), skipped=0, lr=[0.0001]"
  fi
  sleep 1
done
"""


@pytest.fixture
def h(tmp_path, slurm):
    harness = Harness(tmp_path, slurm)
    yield harness
    harness.close()


def _report(h: Harness, job: str):
    store = Store(str(h.db), readonly=True)
    try:
        return report_from_store(store, now=time.time(), job=job, gpus_per_node=4), store.job_events(job)
    finally:
        store.close()


def test_a_job_recovered_twice_on_slurm_gets_the_journals_delays(h):
    h.start_agents()
    h.start_controller()
    job = h.submit(JOB.replace("DEAD", str(h.tmp)), "-N", "1")
    injected, dead = [], []
    for attempt in (0, 1):
        j = wait_for(f"attempt {attempt} running", lambda: (r := h.running(job)) and r.attempt == attempt and r, 90)
        h.wait_known(job)
        wait_for(
            f"attempt {attempt}'s progress recorded",
            lambda: h.query("SELECT last_at FROM progress WHERE job = ? AND attempt = ?", job, attempt),
            30,
        )
        dead.append(time.time())
        (h.tmp / f"gpu-dead-{j.nodes[0]}").write_text("")
        time.sleep(2.0)  # the job silent before the driver's error: part of the detection delay
        injected.append(time.time())
        h.inject_xid(j.nodes[0])
        wait_for(f"requeue {attempt + 1}", lambda: (s := h.slurm.job(job)) is not None and s.attempt == attempt + 1, 60)

    def resumed():
        rows = h.query("SELECT first_at FROM progress WHERE job = ? AND attempt = 2", job)
        ran = h.query("SELECT at FROM job_events WHERE job = ? AND attempt = 2 AND state = 'RUNNING'", job)
        return rows and rows[0][0] is not None and ran

    wait_for("attempt 2 training", resumed, 90)
    rep, events = _report(h, job)
    assert [f["attempt"] for f in rep["failures"]] == [0, 1], rep["failures"]
    incidents = {r[2]: r for r in h.incidents() if r[1] == job}
    for f, t_dead, t_xid in zip(rep["failures"], dead, injected):
        k = f["attempt"]
        inc_id = incidents[k][0]
        ((detected,),) = h.query("SELECT detected_wall FROM incidents WHERE id = ?", inc_id)
        ((issued,),) = h.query(
            "SELECT issued_at FROM actions WHERE incident = ? AND action = 'requeue' AND status = 'verified'", inc_id
        )
        ((last_at,),) = h.query("SELECT last_at FROM progress WHERE job = ? AND attempt = ?", job, k)
        ((first_at,),) = h.query("SELECT first_at FROM progress WHERE job = ? AND attempt = ?", job, k + 1)
        nxt = [e for e in events if e["attempt"] == k + 1]
        waiting = max(next(e["at"] for e in nxt if e["state"] in ("PENDING", "REQUEUED", "REQUEUE_HOLD")), issued)
        running = next(e["at"] for e in nxt if e["state"] == "RUNNING")
        assert f["fault_class"] == "gpu_fell_off_bus" and f["incident"] == inc_id
        assert f["gpus"] == 4 and len(f["nodes"]) == 1
        # the instants: the job's last progress line, the incident, the requeue, Slurm's states
        assert f["failed_at"] == last_at and last_at <= t_dead + 1.5  # a line a second, read within a poll
        assert t_xid <= detected < t_xid + 30
        assert f["detected_at"] == detected and f["requeued_at"] == issued
        assert (f["waiting_at"], f["running_at"], f["resumed_at"]) == (waiting, running, max(running, first_at))
        want = {
            "detection": detected - last_at,
            "decision": issued - detected,
            "restart": (waiting - issued) + (max(running, first_at) - running),
            "queue": running - waiting,
        }
        for cause, seconds in want.items():
            assert f["lost"][cause]["seconds"] == pytest.approx(seconds, rel=0.01, abs=1e-6), (k, cause)
            assert f["lost"][cause]["estimate"] is None, (k, cause, f["lost"][cause]["estimate"])
            assert f["lost"][cause]["gpu_hours"] == pytest.approx(seconds * 4 / 3600, rel=0.01, abs=1e-9)
        assert f["lost_gpu_hours"] == pytest.approx(sum(f["lost"][c]["gpu_hours"] for c in CAUSES))
        print(f"\nfailure {k}: " + ", ".join(f"{c} {s:.1f}s" for c, s in want.items()))
    (row,) = rep["jobs"]
    assert [a["attempt"] for a in row["attempts"]] == [0, 1, 2] and 0 < row["ettr"] < 1
