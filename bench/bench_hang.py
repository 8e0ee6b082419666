"""Hang detection latency of the live controller: a job log prints progress, then stops; how long
after "last progress + bound" is the hang incident committed?

    python bench/bench_hang.py [--trials 10] [--bound 3]

Runs the real `recover run --dry-run --follow` with a site rulebook layered over the defaults
(`hang: {bound: Ns, require_running: false}` so that no scheduler is needed); prints each trial
and p50/p99/max of (incident committed - last progress line - bound). Target: under 1 s.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from _common import ROOT

from engine.live import launch


def opened(db: Path, job: str) -> float | None:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = con.execute(
                "SELECT detected_wall FROM incidents WHERE job = ? ORDER BY id LIMIT 1", (job,)
            ).fetchone()
        finally:
            con.close()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--bound", type=float, default=3.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="recover-bench-hang-"))
    (tmp / "logs").mkdir()
    site = tmp / "site.yaml"
    site.write_text(f"policy:\n  settle: 60s\n  hang: {{bound: {args.bound}s, require_running: false}}\n")
    db = tmp / "recover.db"
    ctl = launch.start(
        launch.run_argv(db, rules=[site], follow=[tmp / "logs" / "*.out"]), tmp / "controller.log", cwd=ROOT
    )
    delays = []
    try:
        time.sleep(2.0)
        for trial in range(args.trials):
            job = str(9000 + trial)
            path = tmp / "logs" / f"slurm-{job}.out"
            last = 0.0
            with open(path, "a") as fh:
                for step in range(1, 11):
                    fh.write(
                        f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())} [Rank 0] step={step}, skipped=0, lr=[0.0001]\n"
                    )
                    fh.flush()
                    last = time.time()
                    time.sleep(0.1)
            deadline = last + args.bound + 10
            t = None
            while time.time() < deadline:
                t = opened(db, job)
                if t:
                    break
                time.sleep(0.01)
            if t is None:
                print(f"trial {trial + 1}: no hang incident within bound + 10 s")
                continue
            delay = t - last - args.bound
            delays.append(delay)
            print(
                f"trial {trial + 1}: job {job}: hang incident {t - last:.2f} s after the last progress line "
                f"(bound {args.bound:g} s, so {delay:+.2f} s past the bound)"
            )
        if delays:
            d = sorted(delays)
            p99 = d[min(len(d) - 1, int(round(0.99 * (len(d) - 1))))]
            print(
                f"\npast the bound over {len(d)} trials: p50 {statistics.median(d):.2f} s, p99 {p99:.2f} s, max {d[-1]:.2f} s "
                f"(target < 1 s)"
            )
    finally:
        launch.stop(ctl)


if __name__ == "__main__":
    main()
