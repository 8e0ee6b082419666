"""End to end against the real Slurm of scripts/slurm-up.sh: the real `recover run --scheduler slurm`
and `recover agent` commands, real jobs, real drains and requeues.

Each test layers a small site rulebook over the defaults (short settle, so a test takes seconds)
and cleans up after itself (jobs cancelled, nodes resumed, killed nodes restarted).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.store import TERMINAL
from tests.helpers import wait_for

from scheduler_adapters.slurm import SlurmAdapter
from scheduler_adapters.slurm.adapter import subprocess_runner

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
NODES = ("n1", "n2", "n3", "n4")
SITE = """
policy:
  settle: 3s
  retry: {max_per_job: 5, max_per_fingerprint: 5, no_progress_attempts: 2}
  blast_radius: {max_drains: 2, max_fraction: 1.0, window: 1h}
"""
JOB = """#!/bin/bash
echo "SLURM_JOB_ID=$SLURM_JOB_ID SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0} SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST"
for i in $(seq 1 900); do
  echo "$(date -u +%Y-%m-%dT%H:%M:%S) [Rank 0] step=$((i + ${SLURM_RESTART_COUNT:-0} * 1000)), skipped=0, lr=[0.0001]"
  sleep 1
done
"""
# the GPU falls off the bus as the job starts: the job's first node logs a Xid at once (written
# by the job script only to time it; a real GPU's driver writes it)
XID_AT_START_JOB = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  echo "$(date -u '+%b %d %H:%M:%S') $SLURMD_NODENAME kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, \
name=python, GPU has fallen off the bus." >> KERN/kern-$SLURMD_NODENAME.log
fi
echo "SLURM_JOB_ID=$SLURM_JOB_ID SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0} SLURMD_NODENAME=$SLURMD_NODENAME"
for i in $(seq 1 900); do
  echo "$(date -u +%Y-%m-%dT%H:%M:%S) [Rank 0] step=$((i + ${SLURM_RESTART_COUNT:-0} * 1000)), skipped=0, lr=[0.0001]"
  sleep 1
done
"""
TRACEBACK_JOB = """#!/bin/bash
echo "SLURM_JOB_ID=$SLURM_JOB_ID SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}"
sleep 2
echo 'Traceback (most recent call last):'
echo '  File "/workspace/train.py", line 212, in <module>'
echo '    main(cfg)'
echo "KeyError: 'lr_schedule'"
exit 1
"""
HANG_THEN_TIMEOUT_JOB = """#!/bin/bash
echo "SLURM_JOB_ID=$SLURM_JOB_ID SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}"
sleep 2
echo "[rank0]:[E1129 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."
exit 1
"""


def xid_line(node: str, code: int = 79) -> str:
    stamp = time.strftime("%b %d %H:%M:%S", time.gmtime())
    return f"{stamp} {node} kernel: NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name=python, GPU has fallen off the bus.\n"


@pytest.fixture(scope="module")
def slurm() -> SlurmAdapter:
    probe = subprocess_runner(["sinfo", "-h", "-o", "%N %T"], 15)
    if probe.rc != 0 or not probe.stdout.strip():
        why = f"no Slurm cluster answers (sinfo rc={probe.rc}); start one with scripts/slurm-up.sh"
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return SlurmAdapter(timeout=20)


class Harness:
    """One test's world: folders, a site rulebook, agents, the controller, jobs; all cleaned up."""

    def __init__(self, tmp: Path, slurm: SlurmAdapter):
        self.tmp, self.slurm = tmp, slurm
        self.logs = tmp / "logs"
        self.spool = tmp / "spool"
        self.logs.mkdir()
        self.spool.mkdir()
        self.db = tmp / "recover.db"
        self.site = tmp / "site.yaml"
        self.site.write_text(SITE)
        self.procs: list[subprocess.Popen] = []
        self.controller: subprocess.Popen | None = None
        self.jobs: list[str] = []
        self.killed_nodes: list[str] = []
        for n in NODES:
            (tmp / f"kern-{n}.log").write_text("")

    def cli(self, *args: str, env: dict | None = None, log: str = "out") -> subprocess.Popen:
        # The child keeps its own copy of the descriptor; ours is closed at once.
        with open(self.tmp / f"{log}.log", "ab") as out:
            p = subprocess.Popen(
                [sys.executable, "-m", "engine.cli", *args],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, **(env or {})),
            )
        self.procs.append(p)
        return p

    def start_agents(self, nodes=NODES) -> None:
        for n in nodes:
            self.cli(
                "agent",
                "--node",
                n,
                "--kernel-log",
                str(self.tmp / f"kern-{n}.log"),
                "--no-nvml",
                "--spool",
                str(self.spool),
                log=f"agent-{n}",
            )

    def start_controller(self, *extra: str, env: dict | None = None) -> subprocess.Popen:
        self.controller = self.cli(
            "run",
            "--scheduler",
            "slurm",
            "--spool",
            str(self.spool),
            "--db",
            str(self.db),
            "-r",
            str(self.site),
            "--scheduler-interval",
            "1",
            *extra,
            env=env,
            log="controller",
        )
        # on a loaded machine the controller takes seconds to start: a job that ran and ended
        # before its first poll is history to it, and a Xid before it knows the job is no job's
        log = self.tmp / "controller.log"
        wait_for(
            "the controller to start",
            lambda: self.controller.poll() is not None or b"recover run: mode=" in log.read_bytes(),
            90,
        )
        # no sleep for its first scheduler poll: Controller.startup polls (and commits the answer)
        # before the ready line, waiting up to --scheduler-startup-wait for one; this says whether
        # that poll was answered (a later poll would come only on the worker's own time)
        assert b"scheduler did not answer within" not in log.read_bytes(), log.read_text("utf-8", "replace")
        return self.controller

    def stop_controller(self, sig=signal.SIGTERM) -> None:
        if self.controller is not None and self.controller.poll() is None:
            self.controller.send_signal(sig)
            self.controller.wait(timeout=10)

    @staticmethod
    def reap(p: subprocess.Popen) -> None:
        """End ``p`` and collect its exit status: a child left unwaited is a ResourceWarning
        when Python collects its Popen, which pytest (warnings are errors) pins on whichever
        test is running then."""
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def submit(self, script: str, *opts: str) -> str:
        path = self.tmp / f"job-{len(self.jobs)}.sh"
        path.write_text(script)
        r = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--requeue",
                "--open-mode=append",
                "-o",
                str(self.logs / "slurm-%j.out"),
                *opts,
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
        job = r.stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def running(self, job: str):
        j = self.slurm.job(job)
        return j if j is not None and j.state == "RUNNING" else None

    def inject_xid(self, node: str, code: int = 79) -> None:
        with open(self.tmp / f"kern-{node}.log", "a") as fh:
            fh.write(xid_line(node, code))

    def query(self, sql: str, *args):
        try:
            con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        except sqlite3.OperationalError:  # the controller has not created it yet
            return []
        try:
            return con.execute(sql, args).fetchall()
        except sqlite3.OperationalError:
            return []
        finally:
            con.close()

    def known(self, *jobs: str) -> bool:
        """Has the controller committed a scheduler poll that lists each of ``jobs`` with nodes?
        It updates what it knows about jobs first and saves it after: from then on a Xid on one
        of their nodes is that job's."""
        rows = self.query("SELECT value FROM meta WHERE key = 'job_states'")
        states = json.loads(rows[0][0] or "{}") if rows else {}
        return all(job in states and states[job][2] for job in jobs)

    def wait_known(self, *jobs: str) -> None:
        wait_for("the controller to see the job on its nodes", lambda: self.known(*jobs), 60)

    def all_handled(self) -> bool:
        """Every incident closed and every action in a state it stays in."""
        return all(i[3] == "closed" for i in self.incidents()) and all(a[4] in TERMINAL for a in self.actions())

    def incidents(self):
        return self.query(
            "SELECT id, job, attempt, status, fault_class, decision, nodes, guards FROM incidents ORDER BY id"
        )

    def actions(self):
        return self.query("SELECT incident, action, target, mode, status, attempts, argv FROM actions ORDER BY id")

    def node(self, name: str):
        return next(n for n in self.slurm.nodes() if n.name == name)

    def close(self) -> None:
        try:
            self.stop_controller()
        except subprocess.TimeoutExpired:
            pass  # reaped below with the rest
        for p in self.procs:
            self.reap(p)
        for job in self.jobs:
            subprocess.run(["scancel", job], capture_output=True, timeout=30)
        for n in self.killed_nodes:
            subprocess.run(
                ["bash", str(REPO / "scripts" / "slurm-node.sh"), "start", n], capture_output=True, timeout=60
            )
        for n in NODES:
            subprocess.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], capture_output=True, timeout=30)
        wait_for(
            "all nodes idle again", lambda: all(x.state == "idle" for x in self.slurm.nodes() if x.name in NODES), 60
        )


@pytest.fixture
def h(tmp_path, slurm):
    harness = Harness(tmp_path, slurm)
    yield harness
    harness.close()


def test_fatal_xid_drains_the_node_and_the_job_runs_again_elsewhere(h):
    h.start_agents()
    h.start_controller()
    job = h.submit(JOB, "-N", "2")
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[-1]
    h.wait_known(job)
    t0 = time.monotonic()
    h.inject_xid(bad)
    drained = wait_for(f"{bad} drained", lambda: (n := h.node(bad)).drained and n, 40)
    t_drain = time.monotonic() - t0
    inc = wait_for("incident closed", lambda: [i for i in h.incidents() if i[3] == "closed"], 10)[0]
    assert (inc[1], inc[4], inc[5], json.loads(inc[6])) == (job, "gpu_fell_off_bus", "isolate_and_restart", [bad])
    assert f"incident {inc[0]}" in drained.reason
    again = wait_for("job running again", lambda: (j := h.running(job)) and j.attempt >= 1 and j, 60)
    t_back = time.monotonic() - t0
    assert bad not in again.nodes
    assert bad in h.slurm.job(job).excluded_nodes
    acts = {(a[1], a[4]) for a in h.actions()}
    assert {("drain", "verified"), ("requeue", "verified"), ("exclude", "verified")} <= acts
    print(f"\nfault line -> drained: {t_drain:.1f} s; -> running again on {','.join(again.nodes)}: {t_back:.1f} s")


def test_a_gpu_that_fails_as_its_job_starts_requeues_that_job(h):
    """Issue 18, item 3: the Xid comes before any scheduler poll shows the job on its node (the
    controller polls every 10 s here). The node is drained at once, and the incident is bound to
    the job attempt the scheduler then says held the node: the job is requeued excluding it."""
    h.start_agents()
    h.start_controller("--scheduler-interval", "10")
    time.sleep(2.0)  # the poll worker's first poll (started with the ready line) over: the next is 10 s away
    job = h.submit(XID_AT_START_JOB.replace("KERN", str(h.tmp)), "-N", "2")
    t0 = time.monotonic()
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[0]  # the batch script runs on the job's first node
    wait_for(f"the Xid in {bad}'s kernel log", lambda: b"Xid" in (h.tmp / f"kern-{bad}.log").read_bytes(), 10)
    drained = wait_for(f"{bad} drained", lambda: (n := h.node(bad)).drained and n, 30)
    again = wait_for(
        "the job requeued excluding the node",
        lambda: (j := h.slurm.job(job)) and j.attempt >= 1 and bad in j.excluded_nodes and j,
        max(1.0, 30 - (time.monotonic() - t0)),
    )
    t_requeued = time.monotonic() - t0
    inc = wait_for("incident closed", lambda: [i for i in h.incidents() if i[3] == "closed"], 10)[0]
    assert (inc[1], inc[2], inc[4], inc[5], json.loads(inc[6])) == (
        job,
        0,
        "gpu_fell_off_bus",
        "isolate_and_restart",
        [bad],
    )
    assert f"incident {inc[0]}" in drained.reason
    guards = json.loads(inc[7])
    assert any(g["guard"] == "bound" and f"job {job} attempt 0 held {bad}" in g["why"] for g in guards), guards
    assert bad not in again.nodes
    acts = {(a[1], a[2]) for a in h.actions()}
    assert {("drain", bad), ("requeue", job), ("exclude", job)} <= acts, acts
    print(f"\njob start -> requeued excluding {bad}: {t_requeued:.1f} s")


def test_traceback_stops_without_requeue(h):
    h.start_controller()
    job = h.submit(TRACEBACK_JOB)
    inc = wait_for("incident closed", lambda: [i for i in h.incidents() if i[3] == "closed" and i[1] == job], 60)[0]
    assert (inc[4], inc[5]) == ("app_error", "stop")
    wait_for("every action done", h.all_handled, 60)  # a requeue, were there one, is done by now
    j = h.slurm.job(job)
    assert j.state == "FAILED" and j.attempt == 0
    # the stop plan may free the GPUs of a job that still runs (issue 10); this one had ended
    assert [(a[1], a[4]) for a in h.actions()] == [("cancel", "skipped"), ("notify", "verified")]
    reason = h.query("SELECT reason FROM incidents WHERE id = ?", inc[0])[0][0]
    assert "lr_schedule" in reason or "KeyError" in reason


def test_repeated_failures_without_progress_stop_at_the_budget(h):
    h.start_controller()
    job = h.submit(HANG_THEN_TIMEOUT_JOB)

    def settled():
        rows = [i for i in h.incidents() if i[1] == job and i[3] == "closed"]
        return rows if rows and rows[-1][5] == "stop" else None

    rows = wait_for("the requeues to stop", settled, 150, every=1)
    assert [r[5] for r in rows] == ["restart", "restart", "stop"]
    assert [r[2] for r in rows] == [0, 1, 2]
    guards = json.loads(rows[-1][7])
    assert any(g["guard"] == "no_progress" for g in guards), guards
    wait_for("every action done", h.all_handled, 60)
    assert h.slurm.job(job).attempt == 2  # no further requeue


def test_dry_run_changes_nothing_in_slurm(h):
    h.start_agents()
    h.start_controller("--dry-run")
    job = h.submit(JOB, "-N", "2")
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[0]
    h.wait_known(job)
    h.inject_xid(bad)
    wait_for("incident closed", lambda: [i for i in h.incidents() if i[3] == "closed"], 40)
    acts = h.actions()
    assert acts and {a[3] for a in acts} == {"recommend"} and {a[4] for a in acts} == {"recommended"}
    assert any(a[1] == "drain" and json.loads(a[6])[:3] == ["scontrol", "update", f"NodeName={bad}"] for a in acts)
    # fatal hardware: recommended when the Xid came, the moment act mode drains it, not at the close
    notes = h.query("SELECT note FROM actions WHERE action = 'drain'")
    assert notes and all("act mode would run it now" in n for (n,) in notes), notes
    time.sleep(3)
    assert not h.node(bad).drained
    j = h.slurm.job(job)
    assert j.state == "RUNNING" and j.attempt == 0 and j.nodes == first.nodes


def test_controller_killed_between_running_and_verifying_resumes_without_repeating(h):
    h.start_agents()
    h.start_controller(env={"RECOVER_TEST_HOLD_AFTER_RUN": "60"})
    job = h.submit(JOB, "-N", "2")
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[-1]
    h.wait_known(job)
    h.inject_xid(bad)
    wait_for("the drain to run", lambda: h.node(bad).drained, 40)
    assert [a[4] for a in h.actions() if a[1] == "drain"] == ["started"]  # ran, result not journaled
    h.stop_controller(signal.SIGKILL)
    h.start_controller()  # no hold this time
    again = wait_for("job running again", lambda: (j := h.running(job)) and j.attempt >= 1 and j, 60)
    assert again.attempt == 1  # requeued exactly once
    drains = [a for a in h.actions() if a[1] == "drain"]
    assert len(drains) == 1 and drains[0][4] == "verified" and drains[0][5] == 1  # not run a second time
    # the isolation ends with a page (issue 10)
    assert {a[1]: a[4] for a in h.actions()} == {
        "drain": "verified",
        "requeue": "verified",
        "exclude": "verified",
        "notify": "verified",
    }


def test_burst_of_xids_stops_draining_at_the_blast_radius(h):
    h.start_agents()
    h.start_controller()
    jobs = [h.submit(JOB) for _ in NODES]
    wait_for("4 jobs running", lambda: all(h.running(j) for j in jobs), 40)
    h.wait_known(*jobs)
    for n in NODES:
        h.inject_xid(n)
    wait_for("4 incidents closed", lambda: len([i for i in h.incidents() if i[3] == "closed"]) >= 4, 60)
    wait_for("their actions done", h.all_handled, 60)
    drained = [n for n in NODES if h.node(n).drained]
    assert len(drained) == 2
    stopped = [i for i in h.incidents() if i[5] == "observe"]
    assert len(stopped) == 2
    assert all(any(g["guard"] == "blast_radius" for g in json.loads(i[7])) for i in stopped)


def test_node_death_is_a_node_failure(h):
    h.start_controller()
    job = h.submit(JOB)
    first = wait_for("job running", lambda: h.running(job), 30)
    victim = first.nodes[0]
    h.wait_known(job)
    h.killed_nodes.append(victim)
    subprocess.run(["bash", str(REPO / "scripts" / "slurm-node.sh"), "kill", victim], check=True, timeout=60)
    rows = wait_for(
        "a node_failure incident",
        lambda: [i for i in h.incidents() if i[4] == "node_failure" and i[3] == "closed"],
        90,
        every=1,
    )
    assert victim in json.loads(rows[0][6])
    assert rows[0][1] == job


#: a two-node job whose batch host (the first node) alone prints NCCL's host prefix and the
#: progress, as rank 0 does; its banner prints the node list before the restart count (``env``'s
#: order). Slurm itself prints the node-failure lines when the second node dies.
TWO_NODE_STEP_JOB = """#!/bin/bash
echo "SLURM_JOB_ID=$SLURM_JOB_ID"
echo "SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST"
echo "SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}"
srun bash -c '
if [ "$SLURM_PROCID" = 0 ]; then
  echo "$SLURMD_NODENAME:$$:$$ [0] NCCL INFO Bootstrap : Using ib0:10.60.0.1<0>"
fi
for i in $(seq 1 900); do
  [ "$SLURM_PROCID" = 0 ] && echo "$(date -u +%Y-%m-%dT%H:%M:%S) [Rank 0] step=$i, skipped=0, lr=[0.0001]"
  sleep 1
done'
"""


def test_a_dead_node_is_the_only_node_named_not_the_step_host(h):
    """Issue 18, item 1, on the real Slurm: n2's slurmd dies under a job on n1,n2. Slurm's own
    lines (srun's "Node failure on n2", slurmstepd's "STEP J.0 ON n1 CANCELLED ... DUE TO NODE
    FAILURE") and the scheduler name n2; n1 printed the NCCL and progress lines. The incident
    names n2 only and n1 is never drained, live and in a replay of the log Slurm wrote."""
    h.start_controller()
    job = h.submit(TWO_NODE_STEP_JOB, "-N", "2", "-w", "n1,n2")
    first = wait_for("job running", lambda: h.running(job), 30)
    assert first.nodes == ("n1", "n2")
    log = h.logs / f"slurm-{job}.out"
    wait_for("rank 0's lines", lambda: log.exists() and b"step=2," in log.read_bytes(), 30)
    h.killed_nodes.append("n2")
    subprocess.run(["bash", str(REPO / "scripts" / "slurm-node.sh"), "kill", "n2"], check=True, timeout=60)
    rows = wait_for(
        "a node_failure incident",
        lambda: [i for i in h.incidents() if i[4] == "node_failure" and i[3] == "closed"],
        90,
        every=1,
    )
    text = log.read_text(errors="replace")
    print(f"\njob log as Slurm wrote it:\n{text[-1500:]}")
    assert "DUE TO NODE FAILURE" in text or "Node failure on n2" in text, text[-2000:]
    assert [(r[1], json.loads(r[6])) for r in rows] == [(job, ["n2"])], rows
    assert all(json.loads(i[6]) in ([], ["n2"]) for i in h.incidents()), h.incidents()
    wait_for("every action done", h.all_handled, 60)  # whatever it does next, it does not touch n1
    assert not h.node("n1").drained
    assert not [a for a in h.actions() if "n1" in json.loads(a[6]) or "NodeName=n1" in a[6]], h.actions()
    assert "n1" not in (h.slurm.job(job).excluded_nodes or ())
    # replay of the same log, without a scheduler: the log's own context lines are all it has
    out = subprocess.run(
        [sys.executable, "-m", "engine.cli", "replay", "--json", "--db", str(h.tmp / "replay.db"), str(log)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    con = sqlite3.connect(str(h.tmp / "replay.db"))
    try:
        replayed = con.execute("SELECT fault_class, nodes FROM incidents").fetchall()
    finally:
        con.close()
    assert [(c, json.loads(n)) for c, n in replayed] == [("node_failure", ["n2"])], replayed
