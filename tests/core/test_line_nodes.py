"""Which node a job-log line is about (issue 18, item 1): a node is named only by what names it.

A line with its own node (NCCL's ``host:pid:tid`` prefix, srun's ``Node failure on n12``) names
that node. A line with none is about the one node of an allocation of one (what the scheduler,
the kernel log's node or a printed SLURM_JOB_NODELIST names), and about no node otherwise: the
host of an earlier NCCL INFO line is not the node of a later slurmstepd or progress line. On old
main it was, and ``slurmstepd: ... STEP 4246.0 ON n11 CANCELLED ... DUE TO NODE FAILURE`` drained
the healthy n11. The rule tests in rules/93-tests-slurm.yaml cover the incidents; these cover the
converter, in replay (the log's own context lines) and live (a scheduler's allocation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.core.context import ClusterContext, FileContext
from engine.core.converter import HitConverter
from engine.core.replay import replay, scan_chunks
from engine.core.scanner import scanner_for
from engine.facts import Fact
from engine.rulebook import require_rulebook
from engine.store import Store

ROOT = Path(__file__).resolve().parents[2]
BANNER = "SLURM_JOB_ID=4246\nSLURM_JOB_NODELIST=n[11-12]\nSLURM_RESTART_COUNT=0\n"
NCCL_INFO = "n11:3301:3301 [0] NCCL INFO Bootstrap : Using ib0:10.60.0.11<0>\n"
STEPD = (
    "slurmstepd: error: *** STEP 4246.0 ON n11 CANCELLED AT 2026-11-25T14:15:03 DUE TO NODE FAILURE, "
    "SEE SLURMCTLD LOG FOR DETAILS ***\n"
)
PROGRESS = "2026-11-25 14:14:12,404 - train - INFO - step 41400 loss 0.0807 lr 1e-4\n"


@pytest.fixture(scope="module")
def compiled():
    return require_rulebook()


def _facts(compiled, text: str, *, scheduler: bool = False, nodes=(), job: str | None = "4246"):
    conv = HitConverter(list(compiled.matchers), ClusterContext())
    conv.scheduler = scheduler
    ctx = FileContext(path="/logs/slurm-4246.out", source="job", job=job, attempt=0 if scheduler else None)
    if nodes:  # the scheduler's allocation (ingest.set_job)
        ctx.nodes = set(nodes)
        conv.cluster.assign("4246", 0, nodes, 0.0)
    scanner, index_map = scanner_for(compiled, "job")
    facts = [f for f in scan_chunks([text.encode()], scanner, conv, ctx, index_map) if isinstance(f, Fact)]
    return facts, ctx


def _by(facts, matcher):
    (fact,) = [f for f in facts if f.get("matcher") == matcher]
    return fact


def test_a_line_without_a_node_does_not_take_the_host_of_an_earlier_nccl_line(compiled):
    facts, ctx = _facts(compiled, BANNER + NCCL_INFO + PROGRESS + STEPD)
    assert _by(facts, "slurm_cancelled_node_failure").get("node") is None
    assert _by(facts, "progress_step_loss").get("node") is None  # a straggler series of the job, not of n11
    assert ctx.nodes == {"n11", "n12"}  # the allocation printed before the restart count survives


def test_a_line_with_its_own_host_prefix_keeps_its_node(compiled):
    warn = "n12:3302:3302 [0] NCCL WARN NET/IB : Got completion from peer 10.60.0.11 with error 12\n"
    facts, _ = _facts(compiled, BANNER + NCCL_INFO + warn)
    # each NCCL line names its own host: the bootstrap line (now read for the peer addresses of
    # attribution) n11, the warning after it n12, never the earlier line's host
    nodes = {f.origin.rsplit(":", 1)[1]: f.get("node") for f in facts if f.get("matcher", "").startswith("nccl")}
    assert nodes.get("5") == "n12", nodes
    assert set(nodes.values()) <= {"n11", "n12"} and nodes.get("4") in (None, "n11"), nodes


def test_srun_hostlist_after_a_host_line_keeps_the_whole_allocation(compiled):
    # old main reset the allocation to the NCCL line's host {n11}: n12 was refused as "other node"
    facts, _ = _facts(compiled, BANNER + NCCL_INFO + "srun: error: Node failure on n[11-12]\n")
    assert _by(facts, "srun_node_failure").get("failed_nodes") == ("n11", "n12")


def test_an_allocation_of_one_still_names_the_node_of_a_line_without_one(compiled):
    one = "SLURM_JOB_ID=4246\nSLURM_JOB_NODELIST=n11\nSLURM_RESTART_COUNT=0\n"
    facts, _ = _facts(compiled, one + NCCL_INFO + STEPD)
    assert _by(facts, "slurm_cancelled_node_failure").get("node") == "n11"


def test_hosts_seen_without_an_allocation_name_no_node(compiled):
    facts, _ = _facts(compiled, NCCL_INFO + STEPD, job="4246")
    assert _by(facts, "slurm_cancelled_node_failure").get("node") is None


@pytest.mark.parametrize(("nodes", "expected"), [(("n11", "n12"), None), (("n11",), "n11")])
def test_live_the_schedulers_allocation_decides(compiled, nodes, expected):
    facts, _ = _facts(compiled, NCCL_INFO + STEPD + "srun: error: Node failure on n12\n", scheduler=True, nodes=nodes)
    assert _by(facts, "slurm_cancelled_node_failure").get("node") == expected
    if len(nodes) == 2:
        assert _by(facts, "srun_node_failure").get("node") == "n12"


@pytest.mark.parametrize("order", ["srun_first", "stepd_first", "stepd_only"])
def test_replay_of_the_example_drains_only_the_failed_node(compiled, tmp_path, order):
    lines = (ROOT / "examples" / "slurm-4246.out").read_text().splitlines(keepends=True)
    srun = next(i for i, line in enumerate(lines) if "Node failure on n12" in line)
    assert "DUE TO NODE FAILURE" in lines[srun + 1]
    if order == "stepd_first":
        lines[srun], lines[srun + 1] = lines[srun + 1], lines[srun]
    elif order == "stepd_only":
        del lines[srun]
    log = tmp_path / "slurm-4246.out"
    log.write_text("".join(lines))
    store = Store(str(tmp_path / "recover.db"))
    try:
        replay([str(log)], compiled, store)
        (inc,) = store.incidents()
    finally:
        store.close()
    assert inc.fault_class == "node_failure"
    assert list(inc.nodes) == ([] if order == "stepd_only" else ["n12"])
