"""A job that is named in bytes that are not UTF-8 cannot blind the controller (issue 18), against
the real Slurm of scripts/slurm-up.sh: while such a job is queued (held), every scheduler poll
still answers, so another job's fatal Xid drains its node and requeues that job.

Run under the cluster lock: flock /tmp/slurm.lock .venv/bin/python -m pytest tests/e2e
"""

from __future__ import annotations

import subprocess
import time

import pytest

from scheduler_adapters.slurm import expand_hostlist
from test_slurm_e2e import JOB, Harness, h, slurm, wait_for  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slurm


def submit_bytes(h: Harness, *argv: bytes) -> str:
    """sbatch with raw bytes in its argv (what a shell's $'\\xff' passes), the job cleaned up after."""
    r = subprocess.run([b"sbatch", b"--parsable", *argv], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    job = r.stdout.decode().strip().split(";")[0]
    h.jobs.append(job)
    return job


def attempt(job: str) -> tuple[str, int, str]:
    """(state, restarts, nodes) of one job, read apart from the adapter under test (so a test
    against code that cannot read the queue fails on what the controller did, not on reading)."""
    r = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, timeout=30)
    line = r.stdout.decode(errors="replace")
    field = {k: v for k, _, v in (w.partition("=") for w in line.split())}
    return field.get("JobState", "?"), int(field.get("Restarts", "0") or 0), field.get("NodeList", "")


def test_a_queued_job_named_in_bad_bytes_does_not_stop_another_jobs_recovery(h):
    bad_out = bytes(h.logs) + b"/\xff\xfe-%j.out"
    hostile = submit_bytes(
        h,
        b"--hold",
        b"-J",
        b"bad\xff\xfename",
        b"--comment",
        b"\xff Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:8(IDX:0-7)",
        b"-o",
        bad_out,
        b"--wrap",
        b"sleep 600",
    )
    h.start_agents()
    h.start_controller()
    job = h.submit(JOB, "-N", "2")
    state, _, nodes = wait_for("job running", lambda: (a := attempt(job))[0] == "RUNNING" and a, 30)
    bad = expand_hostlist(nodes)[-1]
    h.wait_known(job)
    t0 = time.monotonic()
    h.inject_xid(bad)
    wait_for("drained and requeued", lambda: h.node(bad).drained and attempt(job)[1] >= 1, 30)
    print(f"\nXid -> {bad} drained and job {job} requeued: {time.monotonic() - t0:.1f} s")
    assert attempt(hostile)[0] == "PENDING"  # the hostile job itself is left alone
    listed = {j.job_id: j for j in h.slurm.jobs()}  # and the adapter reads it
    assert listed[hostile].state == "PENDING" and listed[hostile].name == "bad\ufffd\ufffdname"
    assert listed[hostile].stdout is None
    log = (h.tmp / "controller.log").read_bytes()
    assert b"scheduler unavailable" not in log and b"codec can't decode" not in log
