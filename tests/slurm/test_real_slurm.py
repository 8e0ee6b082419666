"""SlurmAdapter against the real cluster of scripts/slurm-up.sh (Slurm 22.05, 4 nodes).

Each test cancels its jobs and puts its nodes back in service. Node death takes ~20 s and
a requeue waits ~6 s (cred_expire=5), so there is one test of each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_adapters.base import JobInfo, NodeInfo
from scheduler_adapters.slurm import SlurmAdapter, expand_hostlist

pytestmark = pytest.mark.slurm


def job_in(adapter: SlurmAdapter, job_id: str, *states: str) -> JobInfo | None:
    job = adapter.job(job_id)
    return job if job is not None and job.state in states else None


def node(adapter: SlurmAdapter, name: str) -> NodeInfo:
    found = [n for n in adapter.nodes() if n.name == name]
    assert found, f"no node {name} in {[n.name for n in adapter.nodes()]}"
    return found[0]


def usable_nodes(adapter: SlurmAdapter) -> list[str]:
    return [n.name for n in adapter.nodes() if not n.down and not n.drained]


def test_running_job_has_its_node_and_expanded_output(slurm: SlurmAdapter, jobs, wait_for):
    job_id = jobs.submit("echo hello from $SLURMD_NODENAME; sleep 300", "--gres=gpu:1")
    job = wait_for(f"job {job_id} RUNNING", lambda: job_in(slurm, job_id, "RUNNING"), 20)

    assert job.attempt == 0 and job.requeue and job.name == "recover-test"
    assert len(job.nodes) == 1 and job.nodes[0] in {n.name for n in slurm.nodes()}
    assert job.stdout == f"{jobs.out_dir}/{job_id}.out" == job.stderr
    assert job.exit_code is None
    # the path is the real one: the job writes there
    output = wait_for("the job's first line", lambda: _read(job.stdout), 10)
    assert output == f"hello from {job.nodes[0]}\n"
    # and jobs() says the same as job()
    assert [j for j in slurm.jobs() if j.job_id == job_id] == [job]


@pytest.mark.parametrize(
    ("script", "exit_code", "signal"),
    [("exit 1", 1, None), ("exit 3", 3, None), ("kill -9 $$", 0, 9)],
    ids=["exit-1", "exit-3", "sigkill"],
)
def test_failed_job_reports_program_exit_status(slurm: SlurmAdapter, jobs, wait_for, script, exit_code, signal):
    job_id = jobs.submit(script, "--no-requeue")
    job = wait_for(f"job {job_id} FAILED", lambda: job_in(slurm, job_id, "FAILED"), 20)
    assert (job.exit_code, job.signal) == (exit_code, signal)  # not the raw 256 of squeue --json
    assert not job.requeue


def test_drain_and_resume(slurm: SlurmAdapter, nodes, wait_for):
    name = "n2" if "n2" in usable_nodes(slurm) else usable_nodes(slurm)[0]
    nodes.drain(name, "recover test")  # adapter.run(["scontrol", "update", ..., "State=DRAIN", ...])

    drained = wait_for(f"{name} drained", lambda: (n := node(slurm, name)).drained and n, 10)
    assert "DRAIN" in drained.flags and drained.state in ("drained", "draining")
    assert drained.reason == "recover test"

    nodes.resume(name)
    # RESUME passes through "idle*" (not responding) for a moment
    back = wait_for(f"{name} back in service", lambda: (n := node(slurm, name)).flags == () and n, 15)
    assert back.state in ("idle", "mixed", "allocated") and not back.drained and not back.down
    assert back.reason == ""


def test_requeue_excluding_the_node(slurm: SlurmAdapter, jobs, wait_for, run_ok):
    job_id = jobs.submit("echo run ${SLURM_RESTART_COUNT:-0} on $SLURMD_NODENAME; sleep 300")
    first = wait_for(f"job {job_id} RUNNING", lambda: job_in(slurm, job_id, "RUNNING"), 20)
    bad = first.nodes[0]
    # RUNNING comes before the batch script's first line: a requeue in between kills the first
    # run before it printed, and slurmstepd's "JOB REQUEUE" notice is all the log holds of it
    wait_for("the first run's line", lambda: "run 0" in (_read(first.stdout) or ""), 10)

    # the order matters: Slurm refuses ExcNodeList on a job that is not pending
    for argv in (
        ["scontrol", "requeue", job_id],
        ["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={bad}"],
    ):
        run_ok(argv)

    pending = wait_for(f"job {job_id} PENDING", lambda: job_in(slurm, job_id, "PENDING"), 10)
    assert pending.attempt == 1 and pending.excluded_nodes == (bad,) and pending.nodes == ()

    again = wait_for(f"job {job_id} RUNNING again", lambda: job_in(slurm, job_id, "RUNNING"), 30)
    assert again.attempt == 1 and again.nodes and bad not in again.nodes
    output = wait_for(
        "the second run's line",
        lambda: "run 1" in (_read(again.stdout) or "") and _read(again.stdout),
        10,
    )
    assert output.splitlines()[0] == f"run 0 on {bad}"  # --open-mode=append kept the first run


def test_node_death_is_seen(slurm: SlurmAdapter, jobs, nodes, wait_for):
    job_id = jobs.submit("sleep 300")
    running = wait_for(f"job {job_id} RUNNING", lambda: job_in(slurm, job_id, "RUNNING"), 20)
    victim = running.nodes[0]

    nodes.kill(victim)
    dead = wait_for(f"{victim} DOWN", lambda: (n := node(slurm, victim)).state == "down" and n, 45, every=1)
    assert dead.down and "NOT_RESPONDING" in dead.flags and dead.reason == "Not responding"
    # slurmctld requeued the job that ran there
    requeued = slurm.job(job_id)
    assert requeued is not None and requeued.attempt == 1 and requeued.state in ("PENDING", "RUNNING")

    nodes.start(victim)
    back = wait_for(
        f"{victim} back",
        lambda: (n := node(slurm, victim)).state in ("idle", "mixed", "allocated") and n,
        20,
    )
    assert not back.down


def test_text_fallback_agrees_with_json(slurm: SlurmAdapter, jobs, wait_for):
    job_id = jobs.submit("sleep 300")
    wait_for(f"job {job_id} RUNNING", lambda: job_in(slurm, job_id, "RUNNING"), 20)
    text = SlurmAdapter(use_json=False)
    from_json, from_text = slurm.job(job_id), text.job(job_id)
    assert from_json is not None and from_json == from_text
    assert {n.name: n.state for n in text.nodes()} == {n.name: n.state for n in slurm.nodes()}


@pytest.mark.parametrize("expression", ["n[1-3,5]", "gpu-[01-04],login1", "r[1-2]n[08-10]", "n[5,1-2],n1"])
def test_hostlist_matches_scontrol(run_ok, expression):
    argv = ["scontrol", "show", "hostnames", expression]
    assert expand_hostlist(expression) == run_ok(argv).stdout.split()


def test_unknown_job_is_none(slurm: SlurmAdapter):
    assert slurm.job("987654321") is None


def _read(path: str | None) -> str | None:
    try:
        return Path(path).read_text() if path else None
    except FileNotFoundError:
        return None


def test_node_gres_gpu_count(slurm: SlurmAdapter):
    """scripts/slurm-up.sh gives each node Gres=gpu:4; a node Slurm does not know has no count."""
    assert {n: slurm.node_gpu_count(n) for n in ("n1", "n4")} == {"n1": 4, "n4": 4}
    assert slurm.node_gpu_count("nosuchnode9") is None
