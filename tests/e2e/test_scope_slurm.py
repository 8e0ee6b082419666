"""Issue 22, item 4 (scope) on the real Slurm of scripts/slurm-up.sh, with the real `recover run`:

- a job submitted with ``--comment=recover:off`` whose node gets a fatal Xid: the node is drained
  (the site's decision), the job is neither requeued nor excluded, and the page says why and what
  Recover would have done;
- in one controller run, with ``policy.scope`` {default: recommend, partitions: {canary: act}}:
  a job in partition ``canary`` is requeued, a job in ``debug`` gets the same requeue only as a
  recommendation. The partition is the scheduler's (squeue's), never a log's.

slurm-up.sh makes ``canary`` (n1, n2; debug, the default, keeps every node).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.e2e.test_slurm_e2e import HANG_THEN_TIMEOUT_JOB, JOB, SITE, Harness, h, slurm  # noqa: F401 (fixtures)
from tests.helpers import wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture
def canary(slurm):
    out = subprocess.run(["sinfo", "-h", "-p", "canary", "-o", "%N"], capture_output=True, text=True, timeout=30)
    if not out.stdout.strip():
        pytest.fail("this cluster has no partition canary: run scripts/slurm-up.sh (as root)", pytrace=False)
    return out.stdout.strip()


def _closed(h: Harness, job: str):
    return next((i for i in h.incidents() if i[1] == job and i[3] == "closed"), None)


def test_a_job_that_opted_out_keeps_its_attempt_its_node_is_drained_and_the_page_says_why(h):
    t0 = time.monotonic()
    h.start_agents()
    h.start_controller()
    job = h.submit(JOB, "-N", "2", "--comment=recover:off")
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[-1]
    h.wait_known(job)
    h.inject_xid(bad)
    drained = wait_for(f"{bad} drained", lambda: (n := h.node(bad)).drained and n, 30)
    inc = wait_for("incident closed", lambda: _closed(h, job), 20)
    assert (inc[4], inc[5]) == ("gpu_fell_off_bus", "isolate_and_restart")
    assert f"incident {inc[0]}" in drained.reason
    wait_for("every action done", h.all_handled, 20)
    acts = {a[1]: (a[3], a[4]) for a in h.actions()}
    assert acts == {
        "drain": ("act", "verified"),
        "requeue": ("recommend", "recommended"),
        "exclude": ("recommend", "recommended"),
        "notify": ("act", "verified"),
    }, acts
    j = h.slurm.job(job)
    assert j.attempt == 0 and j.state == "RUNNING" and bad not in j.excluded_nodes  # not requeued, not excluded
    page = json.loads(next(a[6] for a in h.actions() if a[1] == "notify"))[-1]
    assert (
        f"job {job} opted out (its comment says recover:off): recommended, not run: requeue {job}, exclude {job}"
        in page
    )
    assert f"done: drain {bad}" in page
    print(f"\nopted-out job: {bad} drained, job kept, page sent: {time.monotonic() - t0:.1f} s\n  page: {page}")


def test_the_canary_partition_acts_while_debug_only_recommends_in_one_run(h, canary):
    t0 = time.monotonic()
    h.site.write_text(SITE + "  scope: {default: recommend, partitions: {canary: act}}\n")
    h.start_controller()
    acted = h.submit(HANG_THEN_TIMEOUT_JOB, "-p", "canary")
    recommended = h.submit(HANG_THEN_TIMEOUT_JOB, "-p", "debug", "-x", canary)
    first = wait_for(
        "both incidents closed", lambda: (a := _closed(h, acted)) and (b := _closed(h, recommended)) and (a, b), 40
    )
    assert [(i[4], i[5]) for i in first] == [("nccl_timeout", "restart")] * 2
    wait_for(
        "the canary job's requeue verified",
        lambda: [a for a in h.actions() if (a[0], a[1], a[4]) == (first[0][0], "requeue", "verified")],
        20,
    )
    assert h.slurm.job(acted).attempt >= 1
    rows = {(a[0], a[1]): (a[3], a[4]) for a in h.actions() if a[0] in (first[0][0], first[1][0])}
    assert rows[(first[0][0], "requeue")] == ("act", "verified")
    assert rows[(first[1][0], "requeue")] == ("recommend", "recommended")
    guards = json.loads(first[1][7])
    assert {"guard": "scope", "why": "partition debug is recommend (policy.scope.default): recommend only"} in guards
    other = h.slurm.job(recommended)
    assert (other.partition, other.attempt, other.state) == ("debug", 0, "FAILED")  # only recommended
    print(f"\ncanary requeued, debug recommended, one run: {time.monotonic() - t0:.1f} s")
