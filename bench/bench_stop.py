"""How fast ``recover run`` stops on SIGTERM and SIGINT, idle and in the middle of a burst of
matching lines: the figure tests/live/test_live_durability.py does not bound (on a loaded machine
a wall-clock bound in a test fails for the machine's sake). The reference, measured in this same
process, is how long a bare ``python -c`` takes to exit on SIGTERM: what no controller can beat.

    python bench/bench_stop.py                 # 5 trials of each kind
    python bench/bench_stop.py --trials 20 --burst 50000
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, percentile

from engine.live import launch

RULES = """
matchers:
  - {id: evt, pattern: 'EVT (?P<n>\\d+)', types: {n: int}}
rules:
  - id: s.evt
    description: an event line
    when: [{as: e, kind: log, where: {matcher: evt}}]
    then: {symptom: {name: evt, n: "{{ e.n }}"}}
policy: {settle: 1s, distinct_lines: 1000000}
"""

TARGET_S = 1.0


def _timed_stop(proc: subprocess.Popen, sig: int) -> float:
    t0 = time.monotonic()
    proc.send_signal(sig)
    proc.wait(60)
    return time.monotonic() - t0


def _facts(db: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT count(*) FROM facts").fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:  # not created yet
        return 0


def reference(trials: int) -> list[float]:
    out = []
    for _ in range(trials):
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        out.append(_timed_stop(proc, signal.SIGTERM))
        proc.stdout.close()
    return out


def controller(trials: int, burst: int, sig: int, work: Path) -> list[float]:
    out = []
    for k in range(trials):
        d = work / f"{sig}-{burst}-{k}"
        (d / "logs").mkdir(parents=True)
        rules = d / "rules.yaml"
        rules.write_text(RULES)
        db = d / "recover.db"
        argv = launch.run_argv(db, rules=[rules], defaults=False, follow=[d / "logs" / "*.out"])
        proc = launch.start(argv, d / "controller.log", cwd=ROOT)
        if burst:
            with open(d / "logs" / "slurm-1.out", "w") as fh:
                fh.writelines(f"2026-11-29T17:00:00 rank0: EVT {i} something happened\n" for i in range(burst))
            end = time.monotonic() + 60
            while _facts(db) == 0 and time.monotonic() < end:  # in the middle of it
                time.sleep(0.01)
        out.append(_timed_stop(proc, sig))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--burst", type=int, default=20000, help="matching lines appended before the mid-burst stops")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="recover-bench-stop-"))
    try:
        rows = [("reference: bare python, SIGTERM", reference(args.trials))]
        rows.append(("idle, SIGTERM", controller(args.trials, 0, signal.SIGTERM, work)))
        rows.append(("mid-burst, SIGTERM", controller(args.trials, args.burst, signal.SIGTERM, work)))
        rows.append(("mid-burst, SIGINT", controller(args.trials, args.burst, signal.SIGINT, work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"time from the signal to the exit, {args.trials} trials each (target: under {TARGET_S:g} s)")
    print(f"{'':<34} {'p50 ms':>8} {'max ms':>8}  verdict")
    ok = True
    for name, times in rows:
        good = name.startswith("reference") or max(times) < TARGET_S
        ok &= good
        print(f"{name:<34} {percentile(times, 0.5) * 1e3:>8.1f} {max(times) * 1e3:>8.1f}  {'OK' if good else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
