"""The job's own doing is the job's (issue 21, item 5), live: the node agents' spool facts of a
job that crashed with an illegal address (Xid 13 and 43 where the faulting kernels ran, Xid 45
where the contexts were torn down, on every node of the job) never implicate a node. The job's
incident is the application's (app_error, stopped), with no node, no drain and no exclusion; the
Xids alone, with no job failure, open nothing.

The "77 healthy nodes flagged after one job crash" report (github.com/NVIDIA/NVSentinel/pull/1629)
is the pattern: one job, many nodes, each printing application Xids as it dies.

In process, on a fake scheduler that says which job runs where (as the other live tests do).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.facts import Fact
from engine.live.controller import Controller, ControllerConfig
from engine.rulebook import load_rulebook
from scheduler_adapters.base import CommandResult, JobInfo, NodeInfo

NODES = tuple(f"n{i}" for i in range(1, 9))
SITE = "policy:\n  settle: 1s\n  blast_radius: {max_drains: 50, max_fraction: 1.0, window: 1h}\n"


class Scheduler:
    name = "fake"
    template_scheduler = "slurm"

    def __init__(self, jobs: list[JobInfo]) -> None:
        self.job_list = jobs

    def jobs(self):
        return list(self.job_list)

    def job(self, job_id):
        return next((j for j in self.job_list if j.job_id == job_id), None)

    def jobs_on(self, nodes):
        return [j for j in self.job_list if set(j.nodes) & set(nodes)]

    def nodes(self):
        return [NodeInfo(n, "allocated") for n in NODES]

    def run(self, argv, timeout=30.0):
        return CommandResult(0)


@pytest.fixture
def controller(tmp_path):
    made: list[Controller] = []

    def start(sched: Scheduler, follow: list[str]) -> Controller:
        res = load_rulebook(defaults=True, overlays=[("site.yaml", SITE)])
        assert res.ok, res.errors
        spool = tmp_path / "spool"
        spool.mkdir(exist_ok=True)
        cfg = ControllerConfig(
            db=str(tmp_path / "recover.db"),
            spool=str(spool),
            scheduler="fake",
            adapter=sched,
            dry_run=False,  # act mode: a drain the policy wanted would be planned, not only recommended
            scheduler_interval=0.0,
            scheduler_startup_wait=5.0,
            follow=follow,
        )
        ctl = Controller(cfg, res.compiled)
        ctl.startup()
        made.append(ctl)
        return ctl

    yield start
    for ctl in made:
        ctl.stop_event.set()
        if ctl.sched is not None:
            ctl.sched.stop()
        ctl.follower.stop()
        ctl.store.close()


#: what the agents' kmsg readers write for these kernel lines (wordings of real drivers:
#: github.com/enfiskutensykkel/ssd-gpu-dma/issues/29, github.com/madMAx43v3r/chia-gigahorse/issues/301)
CRASH_XIDS = (
    (13, "Graphics SM Warp Exception on (GPC 2, TPC 0, SM 0): Out Of Range Address"),
    (43, "Ch 00000030"),
    (45, "Ch 00000008"),
)


def spool_xids(ctl: Controller, node: str) -> None:
    now = time.time()
    with open(Path(ctl.cfg.spool or "") / f"{node}.jsonl", "a") as fh:
        for i, (code, detail) in enumerate(CRASH_XIDS):
            attrs = {"node": node, "code": code, "pci": "0000:1b:00", "detail": detail}
            attrs["text"] = f"NVRM: Xid (PCI:0000:1b:00): {code}, {detail}"
            fh.write(Fact.make("xid", attrs, now + 0.01 * i, f"kmsg:{node}").to_json() + "\n")


def steps(ctl: Controller, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctl.step()
        time.sleep(0.05)
    ctl.step()


def test_one_jobs_crash_with_application_xids_on_all_its_nodes_drains_none(controller, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    out = logs / "slurm-401.out"
    out.write_text("")
    sched = Scheduler([JobInfo("401", 0, "RUNNING", nodes=NODES, stdout=str(out))])
    ctl = controller(sched, [str(logs / "*.out")])
    ctl.step()
    for node in NODES:
        spool_xids(ctl, node)
    ctl.step()
    with open(out, "a") as fh:  # the other ranks' watchdogs, then srun's word on the tasks
        fh.write(
            "[rank9]: [Rank 9] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4412, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
            "srun: error: n1: tasks 0-7: Exited with exit code 1\n"
        )
    steps(ctl, 1.6)  # past the settle window
    incidents = ctl.store.incidents()
    assert [(i.job, i.fault_class, i.decision, tuple(i.nodes)) for i in incidents] == [
        ("401", "app_error", "stop", ())
    ], [(i.key, i.fault_class, i.nodes) for i in incidents]
    actions = {(a["action"], a["target"]) for a in ctl.store.actions()}
    assert not {a for a in actions if a[0] in ("drain", "exclude", "requeue")}, actions
    assert all(not ctl.engine.node_states.get(n, {}).get("drained") for n in NODES)


def test_application_xids_without_a_job_failure_open_nothing(controller, tmp_path):
    sched = Scheduler([JobInfo("402", 0, "RUNNING", nodes=NODES)])
    ctl = controller(sched, [])
    ctl.step()
    for node in NODES:
        spool_xids(ctl, node)
    steps(ctl, 1.6)
    assert ctl.store.incidents() == [] and ctl.store.actions() == []
