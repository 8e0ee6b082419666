"""The goodput report reads Slurm's accounting (issue 23, item 2): on the real Slurm with slurmdbd
(scripts/slurm-up.sh), a job whose GPU dies is requeued once by `recover run` in act mode, and the
report's attempt times are sacct's own Submit, Start and End (asked here with sacct itself, apart
from the adapter), to 1 s, and say so; the same store read without the scheduler keeps the
states the controller's polls recorded."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from engine.ops.goodput import report_from_store
from engine.store import Store
from scheduler_adapters.slurm.runner import subprocess_runner
from tests.e2e.test_goodput_slurm import JOB
from tests.e2e.test_slurm_e2e import Harness, slurm  # noqa: F401  (slurm: the module's fixture)
from tests.helpers import wait_for

pytestmark = pytest.mark.slurm


def _sacct(job: str, since: float) -> list[tuple[float | None, float | None, float | None]]:
    """(Submit, Start, End) of each record of the job since ``since``, oldest first, from sacct
    itself (a job id an earlier cluster on this machine gave out is not this test's job)."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
    argv = ["sacct", "-X", "-P", "-n", "--duplicates", "-S", start, "-j", job, "-o", "Submit,Start,End"]
    out = subprocess_runner(argv, 20)
    assert out.rc == 0, out.stderr

    def t(s: str) -> float | None:
        return None if s in ("Unknown", "None") else time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%S"))

    rows = [tuple(t(x) for x in line.split("|")) for line in out.stdout.splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r[0] or 0.0)  # type: ignore[return-value]


@pytest.fixture
def h(tmp_path, slurm):
    off = Path("/run/slurm/accounting-off")
    records = slurm.job_history(time.time() - 60, time.time())
    if records is None:
        why = "no Slurm accounting: " + (off.read_text().strip() if off.exists() else slurm.accounting_unavailable)
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    harness = Harness(tmp_path, slurm)
    yield harness
    harness.close()


def test_a_job_requeued_once_gets_sacct_times(h):
    began = time.time() - 5
    h.start_agents()
    h.start_controller()
    job = h.submit(JOB.replace("DEAD", str(h.tmp)), "-N", "1")
    j = wait_for("attempt 0 running", lambda: (r := h.running(job)) and r.attempt == 0 and r, 60)
    h.wait_known(job)
    wait_for("progress recorded", lambda: h.query("SELECT last_at FROM progress WHERE job = ?", job), 30)
    (h.tmp / f"gpu-dead-{j.nodes[0]}").write_text("")
    h.inject_xid(j.nodes[0])
    wait_for("attempt 1 running", lambda: (r := h.running(job)) and r.attempt == 1 and r, 60)
    wait_for(
        "attempt 1 training, its RUNNING state polled",
        lambda: (
            h.query("SELECT first_at FROM progress WHERE job = ? AND attempt = 1 AND first_at IS NOT NULL", job)
            and h.query("SELECT at FROM job_events WHERE job = ? AND attempt = 1 AND state = 'RUNNING'", job)
        ),
        30,
    )
    # slurmdbd hears of each record from slurmctld a moment later
    sacct = wait_for(
        "sacct has both attempts", lambda: (s := _sacct(job, began)) and len(s) == 2 and s[1][1] and s[0][2] and s, 20
    )

    store = Store(str(h.db), readonly=True)
    try:
        now = time.time()
        records = h.slurm.job_history(began, now, job)
        rep = report_from_store(store, now=now, job=job, gpus_per_node=4, history=(records, ""))
        offline = report_from_store(store, now=now, job=job, gpus_per_node=4)
        polled = store.job_events(job)
    finally:
        store.close()
    (row,) = rep["jobs"]
    assert row["history"] == "sacct" and rep["history"]["jobs_from_sacct"] == [job]
    assert [a["attempt"] for a in row["attempts"]] == [0, 1]
    for a, (submit, start, end) in zip(row["attempts"], sacct):
        s = a["scheduler"]
        assert s["from"] == "sacct"
        assert s["submit_at"] == pytest.approx(submit, abs=1.0) and s["start_at"] == pytest.approx(start, abs=1.0)
        assert (s["end_at"] is None) == (end is None) and (end is None or s["end_at"] == pytest.approx(end, abs=1.0))
    assert row["attempts"][0]["scheduler"]["state"] == "REQUEUED"
    assert row["submitted_at"] == pytest.approx(sacct[0][0], abs=1.0)
    (f,) = rep["failures"]
    assert f["history"] == "sacct" and f["incident"] is not None
    assert f["waiting_at"] == pytest.approx(max(sacct[1][0], f["requeued_at"]), abs=1.0)
    assert f["running_at"] == pytest.approx(sacct[1][1], abs=1.0)
    assert f["lost"]["queue"]["seconds"] == pytest.approx(f["running_at"] - f["waiting_at"])

    # offline: the polls' own states, and they are not sacct's to the second
    (orow,) = offline["jobs"]
    assert orow["history"] == "recorded" and offline["history"]["from"] == "recorded"
    ran = next(e["at"] for e in polled if e["attempt"] == 1 and e["state"] == "RUNNING")
    assert offline["failures"][0]["running_at"] == ran
    assert 0 <= ran - sacct[1][1] < 15  # the poll saw it run after Slurm started it
    print(
        f"\nsacct start of attempt 1 {sacct[1][1]:.0f}, polled {ran:.2f} (+{ran - sacct[1][1]:.2f} s); "
        f"queue {f['lost']['queue']['seconds']:.1f} s from sacct, {offline['failures'][0]['lost']['queue']['seconds']:.1f} s polled"
    )
