"""End to end against the real Slurm: the things a Slurm admin does every day, and what a careful
admin would have left behind (issue 10). Same harness as test_slurm_e2e.py: the real `recover run`
and `recover agent`, real jobs, real drains; every test cleans up after itself.

Settle is short here (3 s) but fatal hardware is isolated at once as shipped; the scenarios that
need the settle path (a person acting between the Xid and Recover) turn `isolate.at_once` off.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from engine.facts import Fact
from test_slurm_e2e import JOB, REPO, Harness, slurm, wait_for  # noqa: F401  (slurm: a fixture)

pytestmark = pytest.mark.slurm
SITE = """
policy:
  settle: 3s
  blast_radius: {max_drains: 3, max_fraction: 1.0, window: 1h}
"""
SETTLE_ONLY = SITE + "  isolate: {at_once: []}\n"
EXIT_1_JOB = """#!/bin/bash
echo "SLURM_JOB_ID=$SLURM_JOB_ID SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}"
sleep 2
echo "srun: error: n1: task 0: Exited with exit code 1"
exit 1
"""


@pytest.fixture
def h(tmp_path, slurm):
    harness = Harness(tmp_path, slurm)
    harness.site.write_text(SITE)
    yield harness
    harness.close()


def watching(h, job, attempt=0):
    """The controller has polled the job running (a loaded machine may start it late)."""
    rows = h.query("SELECT value FROM meta WHERE key = 'job_states'")
    if not rows:
        return False
    state = json.loads(rows[0][0]).get(job)
    return bool(state and state[0] == "RUNNING" and int(state[1]) == attempt)


def ready(h, job):
    wait_for("the controller to watch the job", lambda: watching(h, job), 60)
    time.sleep(0.5)


def act(h, name):
    return [a for a in h.actions() if a[1] == name]


def notes(h, name):
    return h.query("SELECT status, note, argv FROM actions WHERE action = ? ORDER BY id", name)


def guards(h, inc):
    return json.loads(h.query("SELECT guards FROM incidents WHERE id = ?", inc)[0][0] or "[]")


def test_a_requeue_by_an_admin_right_after_the_xid_is_not_repeated(h):
    h.site.write_text(SETTLE_ONLY)
    h.start_agents()
    h.start_controller()
    job = h.submit(JOB, "-N", "2")
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[-1]
    ready(h, job)
    h.inject_xid(bad)
    time.sleep(1.0)
    subprocess.run(["scontrol", "requeue", job], check=True, timeout=30)  # the admin was faster
    wait_for(
        "the requeue to be decided", lambda: [r for r in notes(h, "requeue") if r[0] in ("skipped", "verified")], 40
    )
    status, note, _ = notes(h, "requeue")[0]
    assert status == "skipped" and "already restarted" in note, note
    assert wait_for(f"{bad} drained", lambda: h.node(bad).drained, 20)
    again = wait_for("job running again", lambda: (j := h.running(job)) and j, 60)
    wait_for("every action done", h.all_handled, 60)  # a second requeue would come before that
    assert h.slurm.job(job).attempt == 1  # the admin's requeue, and no second one
    assert bad not in again.nodes


def test_slurms_own_requeue_on_node_death_is_kept_and_the_dead_node_stays_out(h):
    h.start_controller()
    job = h.submit(JOB)
    first = wait_for("job running", lambda: h.running(job), 30)
    victim = first.nodes[0]
    ready(h, job)
    h.killed_nodes.append(victim)
    subprocess.run(["bash", str(REPO / "scripts" / "slurm-node.sh"), "kill", victim], check=True, timeout=60)
    rows = wait_for(
        "a node_failure incident",
        lambda: [i for i in h.incidents() if i[4] == "node_failure" and i[3] == "closed"],
        90,
        every=1,
    )
    assert victim in json.loads(rows[0][6])
    wait_for("the drain of the DOWN node to take", lambda: h.node(victim).drained, 40)
    wait_for("the requeue decided", lambda: [r for r in notes(h, "requeue") if r[0] in ("skipped", "verified")], 30)
    status, note, _ = notes(h, "requeue")[0]
    assert status == "skipped" and "already restarted" in note, note  # Slurm requeued it itself
    # the node comes back: with ReturnToService=1 it would be idle again without the DRAIN flag
    subprocess.run(["bash", str(REPO / "scripts" / "slurm-node.sh"), "start", victim], check=True, timeout=60)
    h.killed_nodes.remove(victim)
    # once it has registered again (no longer down) the DRAIN flag is what keeps it out
    n = wait_for(
        f"{victim} to register again",
        lambda: (n := h.node(victim)) and not n.down and "NOT_RESPONDING" not in n.flags and n,
        90,
        every=1,
    )
    assert n.drained, n
    assert h.slurm.job(job).attempt == 1


def test_the_users_exclusions_are_kept_and_merged(h):
    h.start_agents()
    h.start_controller()
    job = h.submit(JOB, "-N", "2", "--exclude=n4")
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[0]
    ready(h, job)
    h.inject_xid(bad)
    wait_for("exclude verified", lambda: [r for r in notes(h, "exclude") if r[0] == "verified"], 40)
    j = h.slurm.job(job)
    assert {"n4", bad} <= set(j.excluded_nodes), j.excluded_nodes
    again = wait_for("job running again", lambda: (x := h.running(job)) and x, 60)
    assert not {"n4", bad} & set(again.nodes)


def test_a_job_that_requires_the_bad_node_is_held_not_excluded_from_it(h):
    h.start_agents()
    h.start_controller()
    job = h.submit(JOB, "-w", "n1")
    wait_for("job running", lambda: h.running(job), 30)
    ready(h, job)
    h.inject_xid("n1")
    held = wait_for(
        "the job held",
        lambda: (j := h.slurm.job(job)) and j.state == "PENDING" and "held" in j.reason.lower() and j,
        40,
    )
    assert "n1" not in held.excluded_nodes
    assert h.node("n1").drained
    inc = h.incidents()[0][0]
    wait_for("the incident says why", lambda: any(g["guard"] == "required_node" for g in guards(h, inc)), 20)
    (ex,) = notes(h, "exclude")
    assert ex[0] == "skipped" and "requires it" in ex[1], ex


def test_a_no_requeue_job_is_not_requeued_and_its_page_says_so(h):
    h.start_agents()
    h.start_controller()
    job = h.submit(JOB, "--no-requeue")
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[0]
    ready(h, job)
    h.inject_xid(bad)
    wait_for(f"{bad} drained", lambda: h.node(bad).drained, 20)
    wait_for("the requeue refused", lambda: [r for r in notes(h, "requeue") if r[0] == "skipped"], 40)
    assert "opted out of requeue" in notes(h, "requeue")[0][1]
    page = wait_for("the page sent", lambda: [r for r in notes(h, "notify") if r[0] == "verified"], 40)
    assert "opted out of requeue" in json.loads(page[0][2])[-1]
    assert h.slurm.job(job).attempt == 0
    assert len([a for a in h.actions() if a[1] == "requeue"]) == 1  # refused once, never sent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def alertmanager(tmp_path):
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        why = "prometheus-alertmanager is not installed (scripts/test.sh installs it as root)"
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    port, cluster = _free_port(), _free_port()
    cfg = tmp_path / "am.yml"
    cfg.write_text("route: {receiver: none}\nreceivers: [{name: none}]\n")
    with open(tmp_path / "am.log", "ab") as log:
        p = subprocess.Popen(
            [
                binary,
                f"--config.file={cfg}",
                f"--storage.path={tmp_path / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--cluster.listen-address=127.0.0.1:{cluster}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def ready():
        try:
            return urllib.request.urlopen(url + "/-/ready", timeout=2).status == 200
        except OSError:
            return False

    wait_for("alertmanager ready", ready, 30)
    yield url
    p.terminate()
    p.wait(timeout=10)


def test_a_plain_non_zero_exit_is_not_restarted_and_pages_alertmanager(h, alertmanager):
    h.site.write_text(
        SITE
        + f"""  plans:
    stop: [notify, alertmanager]
actions:
  alertmanager:
    override: true
    scheduler: any
    per: job
    argv: [curl, -sS, --fail, --max-time, "8", -X, POST, -H, "Content-Type: application/json",
           --data-binary, "{{{{ alert }}}}", "{alertmanager}/api/v2/alerts"]
"""
    )
    h.start_controller()
    job = h.submit(EXIT_1_JOB)
    inc = wait_for("incident closed", lambda: [i for i in h.incidents() if i[3] == "closed" and i[1] == job], 60)[0]
    assert (inc[4], inc[5]) == ("unknown", "stop")
    assert any(g["guard"] == "retry_budget" and "unknown" in g["why"] for g in json.loads(inc[7]))
    wait_for("the alert sent", lambda: [r for r in notes(h, "alertmanager") if r[0] == "verified"], 30)
    alerts = json.loads(urllib.request.urlopen(alertmanager + "/api/v2/alerts", timeout=5).read())
    mine = [a for a in alerts if a["labels"].get("incident") == str(inc[0])]
    assert mine, alerts
    labels = mine[0]["labels"]
    assert (labels["fault_class"], labels["decision"], labels["job"]) == ("unknown", "stop", job)
    time.sleep(3)
    j = h.slurm.job(job)
    assert j.state == "FAILED" and j.attempt == 0
    assert not act(h, "requeue")
    page = json.loads(notes(h, "notify")[0][2])[-1]
    assert f"incident {inc[0]}" in page and "unknown" in page and "stop" in page


def test_two_jobs_on_one_node_with_the_faulty_gpu_unknown_none_is_requeued_blindly(h):
    h.start_agents()
    h.start_controller()
    jobs = [h.submit(JOB, "--gres=gpu:1", "--exclude=n2,n3,n4") for _ in range(2)]
    for job in jobs:
        got = wait_for("both jobs running on n1", lambda job=job: h.running(job), 30)
        assert got.nodes == ("n1",)
    for job in jobs:
        ready(h, job)
    h.inject_xid("n1")  # a kernel-log Xid: the PCI address, not which job's GPU it is
    wait_for("n1 drained", lambda: h.node("n1").drained, 20)
    inc = wait_for(
        "the incident names both jobs",
        lambda: [i[0] for i in h.incidents() if any(g["guard"] == "shared_node" for g in guards(h, i[0]))],
        40,
    )[0]
    why = next(g["why"] for g in guards(h, inc) if g["guard"] == "shared_node")
    assert all(j in why for j in jobs), why
    # the guard is noted before the pages are journaled: the pages are waited for, not read at once
    told = wait_for(
        "a page to each job",
        lambda: (
            len(
                rows := h.query(
                    "SELECT target FROM actions WHERE action = 'notify' AND idem_key LIKE '%notify-shared%'"
                )
            )
            >= len(jobs)
            and rows
        ),
        20,
    )
    assert {t[0] for t in told} == set(jobs)
    time.sleep(4)
    for job in jobs:  # both keep running; the drain lets them finish
        j = h.slurm.job(job)
        assert j.state == "RUNNING" and j.attempt == 0, j
    assert not [r for r in notes(h, "requeue") if r[0] == "verified"]


JOBID_REQUEUE = """
actions:
  requeue:  # a site's own template: the job id inside a key=value element
    override: true
    argv: [scontrol, requeue, "JobId={{ job }}"]
"""


def test_two_jobs_on_one_node_the_other_job_holding_the_faulty_gpu_is_the_one_requeued(h):
    h.site.write_text(SITE + JOBID_REQUEUE)
    h.start_controller()
    first = h.submit(JOB, "--gres=gpu:1", "--exclude=n2,n3,n4")
    assert wait_for("the first job running on n1", lambda: h.running(first), 30).nodes == ("n1",)
    ready(h, first)
    second = h.submit(JOB, "--gres=gpu:1", "--exclude=n2,n3,n4")
    assert wait_for("the second job running on n1", lambda: h.running(second), 30).nodes == ("n1",)
    ready(h, second)  # learned last: a node's Xid is pinned to it, the incident is the second job's
    gpu = h.slurm.job_detail(first).gpus_on("n1")
    assert gpu and h.slurm.job_detail(second).gpus_on("n1") not in (None, gpu)
    # the agent with NVML: an Xid event on the GPU the first job holds
    fact = Fact.make("xid", {"code": 79, "node": "n1", "gpu": gpu[0]}, time.time(), f"nvml-event:n1:gpu{gpu[0]}")
    with open(h.spool / "n1.jsonl", "a") as fh:
        fh.write(fact.to_json() + "\n")
    wait_for("the first job requeued", lambda: h.slurm.job(first).attempt >= 1, 40)
    time.sleep(4)
    j = h.slurm.job(second)
    assert j.state == "RUNNING" and j.attempt == 0, j  # the job named by the incident keeps running
    assert h.slurm.job(first).attempt == 1
    done = h.query("SELECT incident, target, argv FROM actions WHERE action = 'requeue' AND status = 'verified'")
    assert [(t, json.loads(a)) for _, t, a in done] == [(first, ["scontrol", "requeue", f"JobId={first}"])]
    assert h.query("SELECT job FROM incidents WHERE id = ?", done[0][0]) == [(second,)]  # the other job's path


CTLD_PID = "/run/slurm/slurmctld.pid"


def test_a_drain_during_a_90_s_slurmctld_outage_holds_once_slurmctld_is_back(h):
    h.start_agents()
    h.start_controller()
    job = h.submit(JOB, "-N", "2")
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[-1]
    ready(h, job)
    pid = int(Path(CTLD_PID).read_text().strip())
    os.kill(pid, 15)  # slurmctld goes away (a failover that takes its time)
    gone_at = time.monotonic()
    try:
        wait_for(
            "slurmctld gone",
            lambda: (
                subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30).stdout.count("DOWN")
                > 0
            ),
            30,
        )
        h.inject_xid(bad)
        inc = wait_for(
            "the incident says the drain has not taken",
            lambda: [i[0] for i in h.incidents() if any(g["guard"] == "drain_pending" for g in guards(h, i[0]))],
            60,
        )[0]
        page = wait_for(
            "the page says so",
            lambda: h.query(
                "SELECT argv FROM actions WHERE incident = ? AND idem_key LIKE '%notify-drain-pending%' AND status = 'verified'",
                inc,
            ),
            60,
        )
        assert "waits" in json.loads(page[0][0])[-1] or "not taken" in json.loads(page[0][0])[-1]
        time.sleep(max(0.0, 90 - (time.monotonic() - gone_at)))  # the rest of the 90 s outage
        drain = h.query("SELECT status FROM actions WHERE incident = ? AND action = 'drain'", inc)
        assert drain and drain[0][0] not in ("escalated", "verified"), drain  # still trying, not given up
    finally:
        # back with its saved state (SLURM_CLEAN=0: the jobs survive, as after a real failover);
        # slurm-up returns once every node answers (its jobs and the drain kept), not all idle
        back = subprocess.run(
            ["bash", str(REPO / "scripts" / "slurm-up.sh")],
            capture_output=True,
            timeout=120,
            env=dict(os.environ, SLURM_CLEAN="0"),
        )
    assert back.returncode == 0, back.stderr.decode(errors="replace")[-2000:]
    wait_for(
        f"{bad} drained once slurmctld is back",
        lambda: (n := h.node(bad)).drained and f"incident {inc}" in n.reason,
        90,
    )
    again = wait_for("job running again", lambda: (j := h.running(job)) and j.attempt >= 1 and j, 90)
    assert bad not in again.nodes and again.attempt == 1
    assert h.query("SELECT status FROM actions WHERE incident = ? AND action = 'drain'", inc)[0][0] == "verified"
