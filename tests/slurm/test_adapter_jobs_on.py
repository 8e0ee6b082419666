"""SlurmAdapter.jobs_on: which job attempts hold some nodes now, on recorded Slurm 22.05 output
(tests/fixtures/slurm) through the runner seam. The controller asks it when a node's fault
arrives before a poll has shown the job there (issue 18, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_adapters.base import CommandResult
from scheduler_adapters.simulated import SimulatedCluster
from scheduler_adapters.slurm import SlurmAdapter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
SCONTROL_ALL = ("scontrol", "show", "job", "-o")
HOLDING = "--states=COMPLETING,CONFIGURING,RUNNING,SUSPENDED"


class Runner:
    def __init__(self, answers):
        self.answers = answers
        self.argvs: list[tuple[str, ...]] = []

    def __call__(self, argv, timeout):
        self.argvs.append(tuple(argv))
        try:
            return self.answers[tuple(argv)]
        except KeyError:
            raise AssertionError(f"unexpected command {argv}") from None


def recorded(name: str) -> CommandResult:
    return CommandResult(rc=0, stdout=(FIXTURES / name).read_text())


def test_asks_squeue_about_those_nodes_only_and_filters_what_22_05_ignores():
    # 22.05 ignores --nodelist and --states with --json: the recording lists every job
    run = Runner({("squeue", "--json", "--nodelist=n1,n2", HOLDING): recorded("squeue.json")})
    jobs = SlurmAdapter(runner=run).jobs_on(["n2", "n1"])
    assert [(j.job_id, j.attempt, j.state, j.nodes) for j in jobs] == [("6", 0, "RUNNING", ("n1", "n2"))]
    assert run.argvs == [("squeue", "--json", "--nodelist=n1,n2", HOLDING)]  # no scontrol to expand paths


def test_a_node_whose_jobs_all_ended_is_held_by_none():
    run = Runner({("squeue", "--json", "--nodelist=n4", HOLDING): recorded("squeue.json")})
    assert SlurmAdapter(runner=run).jobs_on(["n4"]) == []


def test_without_json_scontrol_is_read():
    run = Runner({SCONTROL_ALL: recorded("scontrol_show_job.txt")})
    jobs = SlurmAdapter(runner=run, use_json=False).jobs_on(["n2"])
    assert [(j.job_id, j.state) for j in jobs] == [("6", "RUNNING")]


@pytest.mark.parametrize("bad", ["-w", "n[1-2]", "n1,n2", "", "n1 n2"])
def test_only_node_names_are_asked_about(bad):
    run = Runner({})
    with pytest.raises(ValueError):
        SlurmAdapter(runner=run).jobs_on([bad])
    assert run.argvs == []


def test_no_nodes_no_question():
    run = Runner({})
    assert SlurmAdapter(runner=run).jobs_on([]) == [] and run.argvs == []


def test_the_simulated_cluster_answers_alike():
    sim = SimulatedCluster(["n1", "n2", "n3"])
    a = sim.submit("a", nodes=2)
    b = sim.submit("b", nodes=1)
    sim.fail(b)
    assert [j.job_id for j in sim.jobs_on(["n2"])] == [a]
    assert sim.jobs_on(["n3"]) == []
