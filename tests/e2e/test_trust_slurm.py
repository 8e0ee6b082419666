"""Job output cannot steer the controller (issue 9), against the real Slurm of scripts/slurm-up.sh:
the real `recover run --scheduler slurm` in acting mode, a victim job and an attacker job whose
output names the victim's nodes and job id. None of the attacker's lines drains a node outside
its own allocation or touches the victim; a genuine Xid on the victim's node still finds the
victim. Run under the cluster lock: flock /tmp/slurm.lock .venv/bin/python -m pytest tests/e2e
"""

from __future__ import annotations

import json

import pytest

from engine.store import TERMINAL
from test_slurm_e2e import JOB, Harness, h, slurm, wait_for, xid_line  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slurm

WATCHDOG = (
    "[rank0]:[E1129 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 "
    "milliseconds before timing out."
)


def attacker_script(lines: list[str]) -> str:
    body = "".join(f"echo {line!r}\n" for line in lines)
    return f"#!/bin/bash\nsleep 4\n{body}sleep 600\n"


def start_victim(h: Harness):
    h.start_agents()
    h.start_controller()
    victim = h.submit(JOB, "-N", "2", "--exclusive")
    v = wait_for("victim running", lambda: h.running(victim), 30)
    return victim, v


def handled(h: Harness, attacker: str) -> bool:
    """The attacker's first incident (its own WATCHDOG line, printed after the hostile one) is
    closed, and it and every incident before it are closed with their actions terminal: the
    hostile line has been through the engine and the actuator. A negative check without this
    passes on a controller that is merely slow."""
    incidents = h.incidents()
    first = next((i[0] for i in incidents if i[1] == attacker), None)
    if first is None:
        return False
    upto = [i for i in incidents if i[0] <= first]
    acts = [a for a in h.actions() if a[0] <= first]
    return all(i[3] == "closed" for i in upto) and bool(acts) and all(a[4] in TERMINAL for a in acts)


def assert_untouched(h: Harness, victim: str, vnodes, attacker: str, attacker_nodes) -> None:
    wait_for("the attacker's own incident handled", lambda: handled(h, attacker), 120)
    drained = {n.name for n in h.slurm.nodes() if n.drained}
    assert drained <= set(attacker_nodes), (drained, h.actions())
    v = h.slurm.job(victim)
    assert v.state == "RUNNING" and v.attempt == 0 and tuple(v.nodes) == tuple(vnodes), (v, h.actions())
    assert not [a for a in h.actions() if a[2] in (victim, *vnodes)], h.actions()


@pytest.mark.parametrize("hijack", ["kernel_xid", "srun_node_failure", "other_job_id"])
def test_job_output_cannot_act_on_other_nodes_or_jobs(h, hijack):
    victim, v = start_victim(h)
    target = v.nodes[0]
    line = {
        "kernel_xid": xid_line(target).strip(),
        "srun_node_failure": f"srun: error: Node failure on {target}",
        "other_job_id": f"SLURM_JOB_ID={victim}",
    }[hijack]
    # its own failure after the hostile line: its incident and requeue are the sign that the
    # controller has handled that line (and its own failure is its own: the attacker is requeued)
    attacker = h.submit(attacker_script([line, WATCHDOG]), "-N", "2", "--exclusive")
    a = wait_for("attacker running", lambda: h.running(attacker), 30)
    assert_untouched(h, victim, v.nodes, attacker, a.nodes)
    assert all(i[1] == attacker for i in h.incidents()), h.incidents()


def test_a_printed_nodelist_does_not_move_a_genuine_xid_to_the_attacker(h):
    # between two scheduler polls (15 s here), the attacker's log has the last word unless the
    # controller refuses it: the genuine Xid comes right after the attacker's line was read
    h.start_agents()
    h.start_controller("--scheduler-interval", "15")
    victim = h.submit(JOB, "-N", "2", "--exclusive")
    v = wait_for("victim running", lambda: h.running(victim), 30)
    known = lambda job: any(
        job in json.loads(r[0] or "{}") for r in h.query("SELECT value FROM meta WHERE key = 'job_states'")
    )
    wait_for("the controller knows the victim", lambda: known(victim), 40)
    bad = v.nodes[0]
    attacker = h.submit(
        attacker_script([f"SLURM_JOB_NODELIST={','.join(v.nodes)}", "SLURM_RESTART_COUNT=0"]), "-N", "2", "--exclusive"
    )
    a = wait_for("attacker running", lambda: h.running(attacker), 30)
    wait_for(
        "the attacker's lines read",
        lambda: h.query("SELECT offset FROM offsets WHERE source LIKE ? AND offset > 40", f"%slurm-{attacker}.out"),
        60,
    )
    h.inject_xid(bad)  # a genuine Xid, from the victim node's kernel log through its agent
    wait_for(f"{bad} drained", lambda: h.node(bad).drained, 40)
    # right after the requeue Slurm still shows the old attempt COMPLETING on its old nodes, and the
    # exclude waits for it to finish: the end state is what a careful admin would have left
    again = wait_for(
        f"victim requeued away from {bad}",
        lambda: (
            (j := h.slurm.job(victim))
            and j.attempt >= 1
            and j.state != "COMPLETING"
            and (bad in j.excluded_nodes or bad not in j.nodes)
            and j
        ),
        90,
    )
    assert bad in again.excluded_nodes or bad not in again.nodes
    atk = h.slurm.job(attacker)
    assert atk.attempt == 0 and tuple(atk.nodes) == tuple(a.nodes), (atk, h.actions())
    assert {i[1] for i in h.incidents()} == {victim}, h.incidents()


# review5: a job's own text that may only recommend (recommend_only: the loader cannot find the
# driver's libcuda.so.1, a library missing from the job's environment, rules/14-matchers-families-
# kinds4.yaml) on a job of one node. In act mode the controller records the drain as a
# recommendation and leaves the node in service; the node's own kernel then reporting a Xid 79
# drains it. https://github.com/apptainer/singularity/issues/4783 (the loader's line)
RECOMMEND_ONLY_JOB = """#!/bin/bash
echo "SLURM_JOB_ID=$SLURM_JOB_ID SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}"
sleep 2
echo './test/slc7_amd64_gcc820/test_detid: error while loading shared libraries: libcuda.so.1: cannot open shared object file: No such file or directory'
exit 127
"""


def test_job_text_that_may_only_recommend_leaves_the_node_until_its_kernel_speaks(h):
    h.start_agents()
    h.start_controller()
    job = h.submit(RECOMMEND_ONLY_JOB, "-N", "1")
    node = wait_for("the job placed", lambda: (j := h.slurm.job(job)) and j.nodes and j.nodes[0], 30)
    first = wait_for(
        "the job's incident handled",
        lambda: next((i for i in h.incidents() if i[1] == job and i[3] == "closed"), None) if h.all_handled() else None,
        60,
    )
    assert (first[4], first[5], json.loads(first[6])) == ("gpu_unavailable", "isolate_and_restart", [node]), first
    acts = [a for a in h.actions() if a[0] == first[0]]
    assert ("drain", node, "recommend", "recommended") in {(a[1], a[2], a[3], a[4]) for a in acts}, acts
    assert all(a[3] == "recommend" for a in acts), acts
    assert not h.node(node).drained, h.actions()
    h.inject_xid(node)  # the node's own kernel, through its agent
    wait_for(f"{node} drained by its own Xid", lambda: h.node(node).drained, 40)
    xid = [i for i in h.incidents() if i[0] != first[0]]
    assert [i[4] for i in xid] == ["gpu_fell_off_bus"], h.incidents()
    assert ("drain", node, "act") in {(a[1], a[2], a[3]) for a in h.actions() if a[0] == xid[0][0]}, h.actions()
