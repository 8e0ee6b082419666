"""Issue 21 end to end on the real Slurm of scripts/slurm-up.sh: a 2-node job (2 ranks per node)
one of whose ranks stops (SIGSTOP) while its peers print PyTorch's watchdog timeout. The
incident names that rank's node as a suspect and the job is requeued excluding it (no drain);
a second job whose rank on the same node stops the same way gets that node recommended for a
drain for diagnosis (policy.suspects.drain_after 2, autonomy.drain_suspect recommend).

The ranks are plain shell run by srun, printing NCCL's and PyTorch's wordings (NCCL INFO comm
... Init COMPLETE: https://github.com/NVIDIA/nccl/issues/1814; the watchdog line:
https://github.com/OpenRLHF/OpenRLHF/issues/1126); no torch needed.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.test_slurm_e2e import NODES, Harness, h, slurm  # noqa: F401 (the fixtures)
from tests.helpers import wait_for

pytestmark = pytest.mark.slurm

# one rank stops on attempt 0: the task with local id 1 on STOP_NODE (default: the job's second
# node); its peers time out on the collective it never joined. Later attempts run and end.
RANKS_JOB = r"""#!/bin/bash
echo "SLURM_JOB_ID=$SLURM_JOB_ID SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}"
if [ "${SLURM_RESTART_COUNT:-0}" != 0 ]; then echo "$(date -u +%Y-%m-%dT%H:%M:%S) resumed"; exit 0; fi
srun bash -c '
host=$SLURMD_NODENAME
echo "$host:$$:$$ [$SLURM_LOCALID] NCCL INFO comm 0x55d4a0$SLURM_PROCID rank $SLURM_PROCID nranks $SLURM_NTASKS cudaDev $SLURM_LOCALID nvmlDev $SLURM_LOCALID busId 18000 commId 0x5ae77eb5 - Init COMPLETE"
stop=STOP_NODE
if [ -z "$stop" ]; then [ "$SLURM_NODEID" = 1 ] && stop=$host; fi
if [ "$host" = "$stop" ] && [ "$SLURM_LOCALID" = 1 ]; then kill -STOP $$; fi
sleep 2
echo "[rank$SLURM_PROCID]:[E1202 01:10:00.123992144 ProcessGroupNCCL.cpp:632] [Rank $SLURM_PROCID] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=460631, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out."
sleep 600
'
"""


def _incident(h: Harness, job: str):
    rows = h.query("SELECT id, status, fault_class, decision, nodes, suspects FROM incidents WHERE job = ?", job)
    return next((r for r in rows if r[1] == "closed"), None)


def test_a_stopped_rank_names_its_node_and_a_second_job_there_recommends_its_drain(h):
    t0 = time.monotonic()
    h.start_controller()
    a = h.submit(RANKS_JOB.replace("STOP_NODE", ""), "-N", "2", "--ntasks-per-node", "2")
    first = wait_for("job A running", lambda: h.running(a), 30)
    bad = first.nodes[1]
    inc = wait_for("job A's incident closed", lambda: _incident(h, a), 40)
    suspects = json.loads(inc[5])
    assert (inc[2], inc[3], json.loads(inc[4])) == ("nccl_timeout", "restart", [bad])
    assert [(s["rank"], s["node"]) for s in suspects] == [(3, bad)]
    assert suspects[0]["signals"][0]["signal"] == "never_reported"
    again = wait_for(
        "job A requeued excluding its suspect's node",
        lambda: (j := h.slurm.job(a)) and j.attempt >= 1 and bad in j.excluded_nodes and j,
        30,
    )
    assert bad not in again.nodes or again.state != "RUNNING"
    assert not h.node(bad).drained  # a suspect is no verdict: excluded, not drained
    # a second, different job on the same node: its rank there stops the same way
    other = next(n for n in NODES if n != bad and n not in again.nodes) if again.nodes else first.nodes[0]
    keep = sorted({bad, other})
    b = h.submit(
        RANKS_JOB.replace("STOP_NODE", bad),
        "-N",
        "2",
        "--ntasks-per-node",
        "2",
        "-x",
        ",".join(n for n in NODES if n not in keep),
    )
    second = wait_for("job B's incident closed", lambda: _incident(h, b), 40)
    assert [(s["node"]) for s in json.loads(second[5])] == [bad]
    drains = wait_for(
        "a drain for diagnosis recommended",
        lambda: [x for x in h.actions() if x[1] == "drain_suspect"],
        10,
    )
    assert [(x[0], x[2], x[3], x[4]) for x in drains] == [(second[0], bad, "recommend", "recommended")]
    assert not h.node(bad).drained  # recommended, not run: policy.autonomy.drain_suspect
    assert not [x for x in h.actions() if x[1] == "drain"]
    print(f"\ntwo attributed timeouts, exclusion and drain recommendation: {time.monotonic() - t0:.1f} s")
