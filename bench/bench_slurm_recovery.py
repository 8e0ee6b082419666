"""Recovery benchmark against the real Slurm of scripts/slurm-up.sh: the real `recover agent` and
`recover run --scheduler slurm` act on a fatal Xid written into a node's kernel log.

    python bench/bench_slurm_recovery.py [--trials 5] [--settle 1s]

For each trial it prints, from the moment the Xid line is appended:
  detect   the incident is committed (opened) in the store
  close    the incident settles and closes with its decision (policy.settle later)
  drain    the drain command was issued (journal: started), and `requeue` likewise
  running  the job runs again, on other nodes
and the action latency on top of detection (issued - close), which is what the action layer adds.
Run as root on a machine where scripts/slurm-up.sh has started the cluster.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

JOB = """#!/bin/bash
echo "SLURM_JOB_ID=$SLURM_JOB_ID SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}"
for i in $(seq 1 900); do echo "$(date -u +%Y-%m-%dT%H:%M:%S) [Rank 0] step=$i, skipped=0, lr=[0.0001]"; sleep 1; done
"""
NODES = ("n1", "n2", "n3", "n4")


def q(db: Path, sql: str, *args):
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError:
        return []


def wait(probe, timeout: float, every: float = 0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = probe()
        if v:
            return v
        time.sleep(every)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--settle", default="1s")
    args = ap.parse_args()
    from scheduler_adapters.slurm import SlurmAdapter

    slurm = SlurmAdapter(timeout=20)
    tmp = Path(tempfile.mkdtemp(prefix="recover-bench-slurm-"))
    (tmp / "logs").mkdir()
    (tmp / "spool").mkdir()
    site = tmp / "site.yaml"
    site.write_text(f"policy:\n  settle: {args.settle}\n  blast_radius: {{max_drains: 100, max_fraction: 1.0}}\n"
                    f"  retry: {{max_per_job: 100, max_per_fingerprint: 100}}\n")
    db = tmp / "recover.db"
    procs = []
    py = [sys.executable, "-m", "engine.cli"]
    log = open(tmp / "procs.log", "ab")
    for n in NODES:
        (tmp / f"kern-{n}.log").write_text("")
        procs.append(subprocess.Popen(py + ["agent", "--node", n, "--kernel-log", str(tmp / f"kern-{n}.log"), "--no-nvml",
                                            "--spool", str(tmp / "spool")], cwd=ROOT, stdout=log, stderr=log))
    ctl = subprocess.Popen(py + ["run", "--scheduler", "slurm", "--spool", str(tmp / "spool"), "--db", str(db), "-r", str(site),
                                 "--scheduler-interval", "1"], cwd=ROOT, stdout=log, stderr=log)
    procs.append(ctl)
    rows = []
    jobs = []
    try:
        for trial in range(args.trials):
            script = tmp / "job.sh"
            script.write_text(JOB)
            r = subprocess.run(["sbatch", "--parsable", "--requeue", "-N", "2", "--open-mode=append",
                                "-o", str(tmp / "logs" / "slurm-%j.out"), str(script)], capture_output=True, text=True, check=True)
            job = r.stdout.strip()
            jobs.append(job)
            first = wait(lambda: (j := slurm.job(job)) and j.state == "RUNNING" and j, 60, 0.3)
            if not first:
                print(f"trial {trial}: job {job} never ran")
                continue
            time.sleep(2.5)  # the controller has polled the job onto its nodes
            bad = first.nodes[-1]
            stamp = time.strftime("%b %d %H:%M:%S", time.gmtime())
            t0 = time.time()
            with open(tmp / f"kern-{bad}.log", "a") as fh:
                fh.write(f"{stamp} {bad} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n")
            inc = wait(lambda: q(db, "SELECT id, detected_wall FROM incidents WHERE job = ? ORDER BY id", job), 30)
            detect = inc[0][1] - t0 if inc else float("nan")
            closed = wait(lambda: q(db, "SELECT closed_wall FROM incidents WHERE job = ? AND status = 'closed'", job), 60)
            close = closed[0][0] - t0 if closed else float("nan")

            def issued(name):
                got = wait(lambda: q(db, "SELECT a.updated_at FROM actions a JOIN incidents i ON a.incident = i.id "
                                         "WHERE i.job = ? AND a.action = ? AND a.status IN ('started','succeeded','verified') "
                                         "ORDER BY a.id LIMIT 1", job, name), 60)
                return got[0][0] - t0 if got else float("nan")

            drain, requeue = issued("drain"), issued("requeue")
            back = wait(lambda: (j := slurm.job(job)) and j.state == "RUNNING" and j.attempt >= 1 and j, 90, 0.3)
            running = time.time() - t0 if back else float("nan")
            rows.append((detect, close, drain, requeue, running, drain - close, requeue - close))
            print(f"trial {trial + 1}: job {job} xid on {bad}: detect {detect:.2f} s, close {close:.2f} s, drain {drain:.2f} s, "
                  f"requeue {requeue:.2f} s, running again {running:.1f} s on {','.join(back.nodes) if back else '-'}")
            subprocess.run(["scancel", job], capture_output=True)
            subprocess.run(["scontrol", "update", f"NodeName={bad}", "State=RESUME"], capture_output=True)
            wait(lambda: all(n.state == "idle" for n in slurm.nodes() if n.name in NODES), 60, 0.5)
        if rows:
            cols = list(zip(*rows))
            names = ["detect", "close", "drain issued", "requeue issued", "running again", "drain - close", "requeue - close"]
            print(f"\nmedian over {len(rows)} trials (settle {args.settle}):")
            for name, col in zip(names, cols):
                print(f"  {name:16} {statistics.median(col):7.2f} s   (max {max(col):.2f} s)")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        for job in jobs:
            subprocess.run(["scancel", job], capture_output=True)
        for n in NODES:
            subprocess.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], capture_output=True)


if __name__ == "__main__":
    main()
