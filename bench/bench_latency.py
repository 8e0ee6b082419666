"""Detection latency of the live controller: from the moment a fault line is appended to a
followed file to the moment its incident is committed in the store (seen by another process).

Starts the real ``recover run --dry-run`` on a temporary folder with a small rulebook of its own,
then for each trial appends one fault line (a new job id each time) to one of the followed files
and polls the store read-only (every --probe seconds) until that job's incident is there. Prints
p50/p90/p99/max over the trials, with inotify and with --poll, and checks them against the
targets (inotify: p99 <= 1 s; polling: p99 <= poll interval + 1 s).

    python bench/bench_latency.py                      # both modes, 100 trials each, --poll 1
    python bench/bench_latency.py --mode poll --poll 2 --trials 200
    python bench/bench_latency.py --mode inotify --new-files   # a file that appears, not one appended to
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import FAULT_MATCHER, ROOT, fault_rules, percentile

from engine.live import launch

RULES = (
    "\nmatchers:\n" + FAULT_MATCHER + "  - {id: evt, pattern: 'EVT (?P<n>\\d+)', types: {n: int}}\n" + fault_rules("5s")
)

NOISE = (
    "2026-11-29T17:00:00 [rank{r}]: iteration {i}/100000 | consumed samples: {s} | elapsed time per iteration (ms): 812.3 "
    "| learning rate: 1.2E-04 | lm loss: 2.71E+00 | loss scale: 65536.0 | grad norm: 0.412 |\n"
)


def run_mode(mode: str, args, work: Path) -> dict:
    d = work / mode
    logs = d / "logs"
    logs.mkdir(parents=True)
    rules = d / "rules.yaml"
    rules.write_text(RULES)
    db = d / "recover.db"
    files = [logs / f"train-{i}.out" for i in range(args.files)]
    for f in files:
        f.write_text(NOISE.format(r=0, i=1, s=0))
    cmd = launch.run_argv(
        db, rules=[rules], defaults=False, follow=[logs / "*.out"], poll=args.poll if mode == "poll" else None
    )
    proc = launch.start(cmd, d / "controller.log", cwd=ROOT)
    try:
        while not db.exists():
            time.sleep(0.05)
        time.sleep(1.5)  # the first rescan has opened every file
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        rng = random.Random(args.seed)
        lat, opened = [], []
        for trial in range(args.trials):
            job = 100000 + trial
            # --new-files: each fault in a file of its own, made now (found by an event, or the rescan)
            f = logs / f"train-new-{trial}.out" if args.new_files else files[rng.randrange(len(files))]
            noise = "".join(NOISE.format(r=rng.randrange(8), i=trial, s=trial * 2048) for _ in range(rng.randrange(4)))
            with open(f, "ab") as fh:
                if noise:
                    fh.write(noise.encode())
                fh.write(f"2026-11-29T17:00:01 [rank3]: RuntimeError: FAULT job={job} collective timed out\n".encode())
                fh.flush()
                t_append = time.time()  # the write has returned: the line is in the file
            end = time.monotonic() + args.timeout
            row = None
            while row is None:
                row = con.execute("SELECT detected_wall FROM incidents WHERE job = ?", (str(job),)).fetchone()
                if row is None:
                    if time.monotonic() > end:
                        raise SystemExit(f"trial {trial}: no incident for job {job} after {args.timeout} s")
                    time.sleep(args.probe)
            t_seen = time.time()
            lat.append(t_seen - t_append)
            opened.append(row[0] - t_append)
            time.sleep(rng.uniform(0.0, args.gap))  # land anywhere in the poll cycle
        con.close()
    finally:
        launch.stop(proc)
    target = 1.0 if mode == "inotify" else args.poll + 1.0
    return {
        "mode": mode if mode == "inotify" else f"poll {args.poll:g}s",
        "trials": len(lat),
        "p50": percentile(lat, 0.5),
        "p90": percentile(lat, 0.9),
        "p99": percentile(lat, 0.99),
        "max": max(lat),
        "mean": statistics.fmean(lat),
        "opened_p50": percentile(opened, 0.5),
        "opened_p99": percentile(opened, 0.99),
        "target_p99": target,
        "ok": percentile(lat, 0.99) <= target,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("inotify", "poll", "both"), default="both")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--poll", type=float, default=1.0, help="polling interval for --mode poll (seconds)")
    ap.add_argument("--files", type=int, default=20, help="followed files (the fault goes to a random one)")
    ap.add_argument("--new-files", action="store_true", help="each fault line in a new file, not an appended one")
    ap.add_argument("--gap", type=float, default=0.3, help="random pause up to this long between trials (seconds)")
    ap.add_argument("--probe", type=float, default=0.002, help="how often the store is polled (seconds)")
    ap.add_argument("--timeout", type=float, default=15.0, help="give up on a trial after this long")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="recover-bench-latency-"))
    results = []
    try:
        for mode in ("inotify", "poll") if args.mode == "both" else (args.mode,):
            results.append(run_mode(mode, args, work))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    print(
        f"detection latency: fault line appended -> its incident committed and visible to another process "
        f"(store polled every {args.probe * 1000:g} ms; {args.files} followed files; {os.cpu_count()} CPUs)"
    )
    print(
        f"{'mode':<12} {'trials':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mean ms':>8}   "
        f"{'target p99':>10}  verdict   (incident opened in memory: p50/p99 ms)"
    )
    for r in results:
        print(
            f"{r['mode']:<12} {r['trials']:>6} {r['p50'] * 1e3:>8.1f} {r['p90'] * 1e3:>8.1f} {r['p99'] * 1e3:>8.1f} "
            f"{r['max'] * 1e3:>8.1f} {r['mean'] * 1e3:>8.1f}   {r['target_p99']:>9.1f}s  {'OK' if r['ok'] else 'MISSED':<8}"
            f"  ({r['opened_p50'] * 1e3:.1f}/{r['opened_p99'] * 1e3:.1f})"
        )
    if args.json:
        print(json.dumps(results))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
