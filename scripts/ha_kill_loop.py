"""Random kills of the leader among two `recover run` on one store, against the real Slurm (issue 22:
"at least 30 kills"). Each run: two controllers with a short lease, a 2-node job, a fatal Xid on
one of its nodes, and SIGKILL of whichever controller leads at a random moment from the Xid to a
few seconds after; a third controller is started in its place, so two are always there. The run
passes when the plan completes within the lease + 10 s of the kill, every action is journaled once,
the job was requeued exactly once, and no acted row carries a term older than the lease's at the end
for an action the new leader finished. ``--postgres`` puts the store on the test PostgreSQL (its
DSN in /tmp/recover-pg/dsn, or $RECOVER_TEST_PG; a fresh schema per run, dropped after). The
summary counts the kills, the incidents lost (a fatal Xid that left no incident, or a plan that
never completed), the actions doubled (an action journaled twice, or its command run twice by the
controllers together, as their logs say), the actions by a fenced leader (a command a controller ran
after it said it lost the lease, before it took it again) and the longest kill -> plan complete.
Run under the cluster lock:

    flock /tmp/slurm.lock .venv/bin/python scripts/ha_kill_loop.py --runs 30 [--postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler_adapters.slurm import SlurmAdapter
from tests.conftest import _pg_dsn_or_why, pg_schema
from tests.e2e.test_ha_slurm import PgHarness
from tests.e2e.test_slurm_e2e import JOB, Harness
from tests.helpers import wait_for

LEASE_S = 2.0


def start(h: Harness, name: str) -> subprocess.Popen:
    p = h.cli(
        "run", "--scheduler", "slurm", "--spool", str(h.spool), "--db", str(h.db), "-r", str(h.site),
        "--scheduler-interval", "1", "--lease", str(LEASE_S), log=name,
    )  # fmt: skip
    log = h.tmp / f"{name}.log"
    wait_for(f"{name} to start", lambda: p.poll() is not None or b"recover run: mode=" in log.read_bytes(), 90)
    return p


def leader_pid(h: Harness) -> int | None:
    rows = h.query("SELECT holder FROM lease")
    return int(rows[0][0].split(":")[1]) if rows else None


_ACT = re.compile(r"act incident=(\d+) action=(\S+) target=(\S+) rc=")


def commands_and_fenced(h: Harness, incidents: set[str]) -> tuple[dict, int]:
    """From every controller's log: how many times each (incident, action, target) of ``incidents``
    had its command run, and how many commands a controller ran while it had said it no longer led."""
    runs: dict = {}
    fenced = 0
    for log in sorted(h.tmp.glob("[abc].log")):
        leading = False  # a command before "leader lease taken", or after "lost", is a fenced leader's
        for line in log.read_text(errors="replace").splitlines():
            if "leader lease lost" in line:
                leading = False
            elif "leader lease taken" in line:
                leading = True
            elif (m := _ACT.search(line)) is not None and m.group(1) in incidents:
                runs[m.groups()] = runs.get(m.groups(), 0) + 1
                fenced += 0 if leading else 1
    return runs, fenced


def one_run(i: int, slurm: SlurmAdapter, rng: random.Random, pg: str | None) -> dict:
    with pg_schema(pg) if pg else contextlib.nullcontext() as dsn:
        return _one_run(i, slurm, rng, dsn)


def _one_run(i: int, slurm: SlurmAdapter, rng: random.Random, dsn: str | None) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"ha-kill-{i}-"))
    h = PgHarness(tmp, slurm, dsn) if dsn else Harness(tmp, slurm)
    out: dict = {"run": i, "kills": 0}
    try:
        h.start_agents()
        procs = {"a": start(h, "a"), "b": start(h, "b")}
        job = h.submit(JOB, "-N", "2")
        first = wait_for("job running", lambda: h.running(job), 30)
        bad = first.nodes[-1]
        h.wait_known(job)
        h.inject_xid(bad)
        delay = rng.uniform(0.0, 3.0)
        out["kill_after_xid_s"] = round(delay, 2)
        time.sleep(delay)
        pid = leader_pid(h)
        victim = next(n for n, p in procs.items() if p.pid == pid)
        killed, killed_wall = time.monotonic(), time.time()
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(10)
        out["kills"] = 1
        procs["c"] = start(h, "c")  # the service manager restarts it: two controllers again
        try:
            wait_for("the plan to complete", lambda: h.incidents() and h.all_handled(), LEASE_S + 10 + 30)
        finally:
            mine = h.query("SELECT id FROM incidents WHERE job = ?", job)
            out["incidents_lost"] = 0 if mine else 1  # the fatal Xid of this run's job left no incident
        out["complete_after_kill_s"] = round(time.monotonic() - killed, 1)
        first = h.query(
            "SELECT MIN(a.issued_at) FROM actions a JOIN incidents i ON i.id = a.incident "
            "WHERE a.mode = 'act' AND i.job = ? AND a.issued_at > ?",
            job,
            killed_wall,
        )
        if first and first[0][0] is not None:
            out["first_command_after_kill_s"] = round(first[0][0] - killed_wall, 2)
        # this run's job only: the controllers follow every job the scheduler lists, and on a shared
        # cluster another job's incident is not this run's
        rows = h.query(
            "SELECT a.action, a.target FROM actions a JOIN incidents i ON i.id = a.incident "
            "WHERE a.mode = 'act' AND i.job = ?",
            job,
        )
        names = [r[0] for r in rows]
        out["other_jobs_acted_on"] = sorted(
            {r[0] for r in h.query("SELECT DISTINCT i.job FROM incidents i WHERE i.job != ?", job)}
        )
        runs, out["fenced_actions"] = commands_and_fenced(h, {str(r[0]) for r in mine})
        out["doubled"] = sorted({n for n in names if names.count(n) > 1} | {k[1] for k, n in runs.items() if n > 1})
        out["attempt"] = (j := h.slurm.job(job)) and j.attempt
        out["ok"] = (
            not out["doubled"]
            and not out["fenced_actions"]
            and out["attempt"] == 1
            and out["complete_after_kill_s"] <= LEASE_S + 10
        )
    except Exception as exc:  # a run that failed is counted and said, the loop goes on
        out["ok"], out["error"] = False, f"{type(exc).__name__}: {exc}"[:300]
    finally:
        for p in h.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        for job in h.jobs:
            subprocess.run(["scancel", job], capture_output=True, timeout=30)
        for n in ("n1", "n2", "n3", "n4"):
            subprocess.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], capture_output=True, timeout=30)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--postgres", action="store_true", help="the store on the test PostgreSQL (scripts/pg-up.sh)")
    args = ap.parse_args()
    pg = None
    if args.postgres:
        pg, why = _pg_dsn_or_why()
        if pg is None:
            print(why, file=sys.stderr)
            return 2
    rng = random.Random(args.seed)
    slurm = SlurmAdapter(timeout=20)
    results = []
    for i in range(args.runs):
        r = one_run(i, slurm, rng, pg)
        results.append(r)
        print(r, flush=True)
    bad = [r for r in results if not r["ok"]]
    took = [r["complete_after_kill_s"] for r in results if "complete_after_kill_s" in r]
    first = [r["first_command_after_kill_s"] for r in results if "first_command_after_kill_s" in r]
    print(
        f"{'PostgreSQL' if pg else 'SQLite'}: {len(results)} runs, {sum(r.get('kills', 0) for r in results)} kills: "
        f"{len(results) - len(bad)} ok, {len(bad)} failed; "
        f"incidents lost {sum(r.get('incidents_lost', 0) for r in results)}, "
        f"actions doubled {sum(len(r.get('doubled', ())) for r in results)}, "
        f"actions by a fenced leader {sum(r.get('fenced_actions', 0) for r in results)}; "
        f"kill -> plan complete max {max(took, default=0):.1f} s, "
        f"kill -> first command of the new leader max {max(first, default=0):.2f} s (lease {LEASE_S:g} s)"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
