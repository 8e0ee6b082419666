"""Rulebook load + scanner from a cold cache, with the cache off and from a warm cache
(bench_flood's LOAD), this checkout alternately with other checkouts, each in fresh processes;
prints the median and least wall and CPU (user + system of the child) per checkout. ``warm``: a
first process fills the cache (not counted), a second one loads from it. Issue 20 holds the load within 10 % of a
reference commit: give its checkout (a `git worktree add --detach DIR COMMIT`) with --other.

    python bench/bench_rulebook_load.py --other /path/to/ref-checkout[=/path/to/python] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT

LOAD = (
    "import time; t0 = time.perf_counter(); from engine.rulebook import require_rulebook; "
    "from engine.core.scanner import scanner_for; c = require_rulebook(); scanner_for(c, 'any'); "
    "print(time.perf_counter() - t0)"
)


def one(checkout: str, python: str, kind: str) -> tuple[float, float]:
    """(wall seconds the load printed, CPU seconds of the child) of one fresh process."""
    tmp = tempfile.mkdtemp(prefix="recover-load-")
    try:
        cache = os.path.join(tmp, "cache") if kind in ("cold", "warm") else "off"
        env = dict(os.environ, RECOVER_CACHE_DIR=cache)
        if kind == "warm":
            subprocess.run([python, "-c", LOAD], cwd=checkout, env=env, capture_output=True, check=True)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([python, "-c", LOAD], cwd=checkout, env=env, capture_output=True, text=True, check=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return float(out.stdout), r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", action="append", default=[], help="CHECKOUT[=PYTHON] to run alternately")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    sides = [("this", str(ROOT), sys.executable)]
    for spec in args.other:
        path, _, py = spec.partition("=")
        sides.append((Path(path).name, path, py or sys.executable))
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for name, path, py in sides:
            for kind in ("cold", "off", "warm"):
                got.setdefault((name, kind), []).append(one(path, py, kind))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'checkout':16}{'cache':7}{'wall median':>13}{'wall least':>12}{'CPU median':>12}{'CPU least':>11}")
    for (name, kind), runs in got.items():
        wall, cpu = [w for w, _ in runs], [c for _, c in runs]
        print(
            f"{name:16}{kind:7}{statistics.median(wall):13.3f}{min(wall):12.3f}"
            f"{statistics.median(cpu):12.3f}{min(cpu):11.3f}"
        )


if __name__ == "__main__":
    main()
