"""The Slurm task layout for the rank map (issue 21 item 2): the CPUs a job holds on each node
(squeue --json, scontrol show job -d) become SLURM_TASKS_PER_NODE's "2(x2),1" under block
distribution, and the rank map places the ranks of an uneven layout by it. The records are as
Slurm 22.05 printed them here for `sbatch -N 3 -n 5` on 2-CPU nodes, whose batch step was given
SLURM_TASKS_PER_NODE=2(x2),1."""

from __future__ import annotations

import pytest

from engine.core.incidents import Engine
from engine.core.rankmap import build_rank_map
from engine.facts import Fact
from engine.rulebook import load_rulebook
from engine.store import Store
from scheduler_adapters.slurm.adapter import _job_from_json, _job_from_scontrol
from scheduler_adapters.slurm.layout import compress, detail_cpus, json_cpus, tasks_layout
from scheduler_adapters.slurm.text import detail_pairs, scontrol_records


def _core(n: int) -> dict:
    return {"sockets": {str(s): {"cores": {"0": "allocated"}} for s in range(n)}}


RECORD = {
    "job_id": 4,
    "job_state": "RUNNING",
    "nodes": "n[1-3]",
    "tasks": 5,
    "cpus": 5,
    "cpus_per_task": None,
    "tasks_per_node": 0,
    "job_resources": {
        "nodes": "n[1-3]",
        "allocated_cores": 5,
        "allocated_hosts": 3,
        "allocated_nodes": [
            {**_core(2), "nodename": "n1"},
            {**_core(2), "nodename": "n2"},
            {**_core(1), "nodename": "n3"},
        ],
    },
    "restart_cnt": 0,
    "user_name": "root",
    "name": "a21_job.sh",
    "partition": "debug",
}

SCONTROL = (
    "JobId=4 JobName=a21_job.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901757 Nice=0 "
    "Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 "
    "Reboot=0 ExitCode=0:0 Partition=debug AllocNode:Sid=localhost:4043 ReqNodeList=(null) ExcNodeList=(null) "
    "NodeList=n[1-3] BatchHost=n1 NumNodes=3 NumCPUs=5 NumTasks=5 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=5,node=3,billing=5 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* JOB_GRES=(null) "
    "Nodes=n[1-2] CPU_IDs=0-1 Mem=0 GRES= Nodes=n3 CPU_IDs=0 Mem=0 GRES= MinCPUsNode=1 MinMemoryNode=0 "
    "Command=/tmp/a21_job.sh WorkDir=/tmp StdErr=/tmp/a21_job_4.out StdIn=/dev/null StdOut=/tmp/a21_job_4.out"
)


@pytest.mark.parametrize(
    "counts, text", [([2, 2, 2, 1], "2(x3),1"), ([4], "4"), ([1, 2, 1], "1,2,1"), ([8, 8], "8(x2)")]
)
def test_compress_as_slurm_writes_it(counts, text):
    assert compress(counts) == text


@pytest.mark.parametrize(
    "cpus, ntasks, per_task, per_node, layout",
    [
        ([2, 2, 1], 5, None, None, "2(x2),1"),
        ([4, 4, 2], 5, 2, None, "2(x2),1"),  # --cpus-per-task=2
        ([3, 1, 3, 1], 8, None, None, "3,1,3,1"),
        ([8, 8], 6, None, 3, "3(x2)"),  # --ntasks-per-node=3 on whole nodes
        ([8, 8], 5, None, None, ""),  # more CPUs than tasks need: not certain
        ([2, 2], 5, None, None, ""),  # fewer: not this job's layout
        ([1, 2], 3, 2, None, ""),  # a node that holds no task
        ([2, 2], None, None, None, ""),
        ([], 4, None, None, ""),
        ([2, -1], 1, None, None, ""),
    ],
)
def test_tasks_layout(cpus, ntasks, per_task, per_node, layout):
    assert tasks_layout(cpus, ntasks, per_task, per_node) == layout


def test_json_cpus_counts_allocated_cores_and_scales_to_the_jobs_cpus():
    assert json_cpus(RECORD, ("n1", "n2", "n3")) == [2, 2, 1]
    threads = {**RECORD, "cpus": 10}  # two hardware threads per core
    assert json_cpus(threads, ("n1", "n2", "n3")) == [4, 4, 2]
    assert json_cpus({**RECORD, "cpus": 7}, ("n1", "n2", "n3")) is None
    assert json_cpus(RECORD, ("n1", "n2")) is None  # not the node list's nodes
    later = {
        "cpus": 3,
        "job_resources": {"allocated_nodes": [{"nodename": "a", "cpus": 2}, {"nodename": "b", "cpus": 1}]},
    }
    assert json_cpus(later, ("a", "b")) == [2, 1]


def test_detail_cpus():
    pairs = detail_pairs("Nodes=n[1-2] CPU_IDs=0-1 Mem=0 GRES= Nodes=n3 CPU_IDs=0,2-3 Mem=0 GRES=")
    assert detail_cpus(pairs, ("n1", "n2", "n3")) == [2, 2, 3]
    assert detail_cpus(pairs, ("n1", "n2", "n3"), 7) == [2, 2, 3]
    assert detail_cpus(pairs, ("n1", "n2", "n3"), 8) is None
    assert detail_cpus(detail_pairs("Nodes=n1 CPU_IDs=x Mem=0 GRES="), ("n1",)) is None


def test_the_adapter_gives_the_layout_slurm_gave_the_job_from_json_and_from_text():
    assert _job_from_json(RECORD).tasks_per_node == "2(x2),1"
    [(fields, detail)] = scontrol_records(SCONTROL)
    job = _job_from_scontrol(fields, detail)
    assert job.nodes == ("n1", "n2", "n3") and job.tasks_per_node == "2(x2),1"
    assert _job_from_scontrol(fields).tasks_per_node == ""  # no -d detail: not known


def test_the_rank_map_places_an_uneven_layout():
    m = build_rank_map(("n1", "n2", "n3"), tasks_per_node="2(x2),1")
    assert [m.node_of(r) for r in range(5)] == ["n1", "n1", "n2", "n2", "n3"]
    assert m.node_of(5) is None
    even = build_rank_map(("n1", "n2", "n3"), world=5)  # 5 ranks do not split evenly over 3 nodes
    assert not even.trusted


@pytest.mark.parametrize("layout, node", [("2(x2),1", "n3"), (None, None)])
def test_the_suspect_of_an_uneven_job_gets_its_node_from_the_schedulers_layout(layout, node):
    compiled = load_rulebook([], defaults=True).compiled
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    t = 1_795_950_000.0
    attrs = {"job": "41", "attempt": 0, "state": "RUNNING", "nodes": ["n1", "n2", "n3"]}
    if layout:
        attrs["tasks_per_node"] = layout
    engine.ingest(Fact.make("job", attrs, t, "slurm:squeue"))
    for r in range(4):  # rank 4 (the one on n3) stopped: it says nothing
        common = {"rank": r, "job": "41", "attempt": 0, "source": "job"}
        engine.ingest(
            Fact.make(
                "log",
                {**common, "matcher": "nccl_comm_rank", "rank_evidence": "comm", "nranks": 5, "text": f"comm rank {r}"},
                t + 1,
                f"slurm-41.out:{r + 1}",
            )
        )
        engine.ingest(
            Fact.make(
                "log",
                {
                    **common,
                    "matcher": "nccl_watchdog_timeout",
                    "rank_evidence": "timeout",
                    "seq": 42,
                    "op": "ALLREDUCE",
                    "text": f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42",
                },
                t + 600,
                f"slurm-41.out:{10 + r}",
            )
        )
    engine.advance(t + 900)
    inc = store.incident(1)
    assert inc is not None and [(s["rank"], s["node"]) for s in inc.suspects] == [(4, node)]
    assert inc.nodes == ((node,) if node else ())
