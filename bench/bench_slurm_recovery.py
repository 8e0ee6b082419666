"""Recovery benchmark against the real Slurm of scripts/slurm-up.sh: the real `recover agent` and
`recover run --scheduler slurm` act on a fatal Xid written into a node's kernel log.

    python bench/bench_slurm_recovery.py [--trials 5] [--settle 1s]

Shipped settings by default (settle 2m, fatal hardware isolated at once); only the blast radius
and retry budgets are widened so that several trials may drain nodes in one hour. For each trial
it prints, from the moment the Xid line is appended, as Slurm itself shows it (polled every 0.05 s):
  drain    the node shows DRAIN                         (goal <= 2 s)
  requeue  the job's restart count went up              (goal <= 5 s)
  running  the job runs again, on other nodes
and the reference measured in the same run: this script draining an idle node itself with one
`scontrol update` and seeing it the same way (the floor any tool has), and the ratio to it.
Run as root on a machine where scripts/slurm-up.sh has started the cluster.
"""

from __future__ import annotations

import argparse
import json
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
    ap.add_argument("--settle", default=None, help="override policy.settle (default: the shipped 2m)")
    args = ap.parse_args()
    from scheduler_adapters.slurm import SlurmAdapter

    slurm = SlurmAdapter(timeout=20)
    tmp = Path(tempfile.mkdtemp(prefix="recover-bench-slurm-"))
    (tmp / "logs").mkdir()
    (tmp / "spool").mkdir()
    site = tmp / "site.yaml"
    site.write_text(
        "policy:\n"
        + (f"  settle: {args.settle}\n" if args.settle else "")
        + "  blast_radius: {max_drains: 100, max_fraction: 1.0}\n"
        "  retry: {max_per_job: 100, max_per_fingerprint: 100}\n"
    )
    db = tmp / "recover.db"
    procs = []
    py = [sys.executable, "-m", "engine.cli"]
    log = open(tmp / "procs.log", "ab")
    for n in NODES:
        (tmp / f"kern-{n}.log").write_text("")
        procs.append(
            subprocess.Popen(
                py
                + [
                    "agent",
                    "--node",
                    n,
                    "--kernel-log",
                    str(tmp / f"kern-{n}.log"),
                    "--no-nvml",
                    "--spool",
                    str(tmp / "spool"),
                ],
                cwd=ROOT,
                stdout=log,
                stderr=log,
            )
        )
    ctl = subprocess.Popen(
        py
        + [
            "run",
            "--scheduler",
            "slurm",
            "--spool",
            str(tmp / "spool"),
            "--db",
            str(db),
            "-r",
            str(site),
            "--scheduler-interval",
            "1",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )
    procs.append(ctl)
    started = wait(
        lambda: ctl.poll() is not None or b"recover run: mode=" in (tmp / "procs.log").read_bytes(), 120, 0.2
    )
    if not started or ctl.poll() is not None:
        print((tmp / "procs.log").read_text()[-2000:], file=sys.stderr)
        for p in procs:
            p.terminate()
        sys.exit("the controller did not start")
    rows = []
    jobs = []
    try:
        for trial in range(args.trials):
            script = tmp / "job.sh"
            script.write_text(JOB)
            r = subprocess.run(
                [
                    "sbatch",
                    "--parsable",
                    "--requeue",
                    "-N",
                    "2",
                    "--open-mode=append",
                    "-o",
                    str(tmp / "logs" / "slurm-%j.out"),
                    str(script),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            job = r.stdout.strip()
            jobs.append(job)
            first = wait(lambda: (j := slurm.job(job)) and j.state == "RUNNING" and j, 60, 0.3)
            if not first:
                print(f"trial {trial}: job {job} never ran")
                continue
            # the controller has polled the job onto its nodes (it may start late on a loaded machine)
            wait(
                lambda: (
                    job in (json.loads((q(db, "SELECT value FROM meta WHERE key = 'job_states'") or [["{}"]])[0][0]))
                ),
                60,
                0.2,
            )
            time.sleep(0.5)
            bad = first.nodes[-1]
            stamp = time.strftime("%b %d %H:%M:%S", time.gmtime())
            t0 = time.time()
            with open(tmp / f"kern-{bad}.log", "a") as fh:
                fh.write(
                    f"{stamp} {bad} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
                )
            drained = wait(lambda: any(n.name == bad and n.drained for n in slurm.nodes()), 30, 0.05)
            drain = time.time() - t0 if drained else float("nan")
            requeued = wait(lambda: (j := slurm.job(job)) and j.attempt >= 1, 30, 0.05)
            requeue = time.time() - t0 if requeued else float("nan")
            inc = q(db, "SELECT detected_wall FROM incidents WHERE job = ? ORDER BY id", job)
            detect = inc[0][0] - t0 if inc else float("nan")
            back = wait(lambda: (j := slurm.job(job)) and j.state == "RUNNING" and j.attempt >= 1 and j, 90, 0.3)
            running = time.time() - t0 if back else float("nan")
            # the reference: one scontrol drain of an idle node, observed the same way
            spare = next((n.name for n in slurm.nodes() if n.name in NODES and n.state == "idle"), None)
            ref = float("nan")
            if spare:
                r0 = time.time()
                subprocess.run(
                    ["scontrol", "update", f"NodeName={spare}", "State=DRAIN", "Reason=bench reference"],
                    capture_output=True,
                )
                if wait(lambda: any(n.name == spare and n.drained for n in slurm.nodes()), 30, 0.05):
                    ref = time.time() - r0
                subprocess.run(["scontrol", "update", f"NodeName={spare}", "State=RESUME"], capture_output=True)
            rows.append((detect, drain, requeue, running, ref, drain / ref))
            print(
                f"trial {trial + 1}: job {job} xid on {bad}: detect {detect:.2f} s, drain {drain:.2f} s, "
                f"requeue {requeue:.2f} s, running again {running:.1f} s on {','.join(back.nodes) if back else '-'}; "
                f"reference drain {ref:.2f} s"
            )
            subprocess.run(["scancel", job], capture_output=True)
            subprocess.run(["scontrol", "update", f"NodeName={bad}", "State=RESUME"], capture_output=True)
            wait(lambda: all(n.state == "idle" for n in slurm.nodes() if n.name in NODES), 60, 0.5)
        if rows:
            cols = list(zip(*rows))
            names = ["detect", "Xid -> drain", "Xid -> requeue", "running again", "reference drain", "drain/reference"]
            print(f"\nmedian over {len(rows)} trials (settle {args.settle or 'shipped'}):")
            for name, col in zip(names, cols):
                unit = "x" if "/" in name else "s"
                print(f"  {name:16} {statistics.median(col):7.2f} {unit}   (max {max(col):.2f} {unit})")
            print(
                f"goals: Xid -> drain <= 2 s: {'met' if statistics.median(cols[1]) <= 2 else 'MISSED'}; "
                f"Xid -> requeue <= 5 s: {'met' if statistics.median(cols[2]) <= 5 else 'MISSED'}"
            )
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
