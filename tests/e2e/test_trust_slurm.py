"""Job output cannot steer the controller (issue 9), against the real Slurm of scripts/slurm-up.sh:
the real `recover run --scheduler slurm` in acting mode, a victim job and an attacker job whose
output names the victim's nodes and job id. None of the attacker's lines drains a node outside
its own allocation or touches the victim; a genuine Xid on the victim's node still finds the
victim. Run under the cluster lock: flock /tmp/slurm.lock .venv/bin/python -m pytest tests/e2e
"""

from __future__ import annotations

import json
import time

import pytest

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


def assert_untouched(h: Harness, victim: str, vnodes, attacker_nodes) -> None:
    time.sleep(10)  # settle (3 s) and the actuator's turn, several times over
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
    lines = [line] + ([WATCHDOG] if hijack == "other_job_id" else [])
    attacker = h.submit(attacker_script(lines), "-N", "2", "--exclusive")
    a = wait_for("attacker running", lambda: h.running(attacker), 30)
    if hijack == "other_job_id":  # its own failure is its own: the attacker's job is the one requeued
        wait_for("the attacker's incident", lambda: [i for i in h.incidents() if i[1] == attacker], 40)
    assert_untouched(h, victim, v.nodes, a.nodes)
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
    )  # noqa: E731
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
