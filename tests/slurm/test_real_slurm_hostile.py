"""SlurmAdapter against the real cluster of scripts/slurm-up.sh with jobs whose user-set fields
copy scontrol's structure (issue 18 item 11): the GPU indexes come from Slurm, never from a job
name or comment, in JSON and in text; output paths expanded from JSON are the files Slurm writes.
Run under the cluster lock: flock /tmp/slurm.lock .venv/bin/python -m pytest tests/slurm/...
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_adapters.base import CommandFailed
from scheduler_adapters.slurm import SlurmAdapter

pytestmark = pytest.mark.slurm
FORGED = "Nodes=n4 CPU_IDs=0 Mem=0 GRES=gpu:4(IDX:0-3)"


def running(slurm: SlurmAdapter, job_id: str):
    j = slurm.job(job_id)
    return j if j is not None and j.state == "RUNNING" else None


def test_gpus_come_from_slurm_not_from_a_job_name_or_comment(slurm: SlurmAdapter, jobs, wait_for):
    job_id = jobs.submit("sleep 300", "-N", "2", "--gres=gpu:2", "-J", f"x {FORGED}", f"--comment=hi {FORGED} ")
    job = wait_for(f"job {job_id} RUNNING", lambda: running(slurm, job_id), 20)
    detail = slurm.job_detail(job_id)
    assert detail.detailed and {n for n, _ in detail.gpus} == set(job.nodes)
    assert all(len(idx) == 2 for _, idx in detail.gpus)
    outside = sorted({"n1", "n2", "n3", "n4"} - set(job.nodes))[0]
    assert detail.gpus_on(outside) == ()
    # the same job read as text (a Slurm without --json): refused, never a forged GPU map
    with pytest.raises(CommandFailed, match="ambiguous"):
        SlurmAdapter(use_json=False).job_detail(job_id)


def test_json_and_text_detail_agree_on_an_honest_job(slurm: SlurmAdapter, jobs, wait_for):
    job_id = jobs.submit("sleep 300", "-N", "2", "--gres=gpu:1")
    wait_for(f"job {job_id} RUNNING", lambda: running(slurm, job_id), 20)
    from_json, from_text = slurm.job_detail(job_id), SlurmAdapter(use_json=False).job_detail(job_id)
    assert from_json.gpus == from_text.gpus and len(from_json.gpus) == 2
    assert (from_json.nodes, from_json.required_nodes, from_json.attempt) == (
        from_text.nodes,
        from_text.required_nodes,
        from_text.attempt,
    )


def test_expanded_paths_are_the_files_slurm_writes(slurm: SlurmAdapter, jobs, wait_for):
    job_id = jobs.submit("echo written", "-o", f"{jobs.out_dir}/%x-%u-%A-%a-%j.out")
    wait_for(f"job {job_id} done", lambda: (j := slurm.job(job_id)) and j.state == "COMPLETED", 30)
    job = slurm.job(job_id)
    assert job.stdout == f"{jobs.out_dir}/recover-test-root-{job_id}-4294967294-{job_id}.out"
    assert Path(job.stdout).read_text() == "written\n"
    assert SlurmAdapter(use_json=False).job(job_id).stdout == job.stdout  # scontrol says the same
