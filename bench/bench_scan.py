"""Benchmark of the matching hot path against grep on a synthetic training log.

Measures in one run: reading the file alone, ``grep -E -c -f bench/patterns.txt`` (LC_ALL=C),
and engine.core.scanner.Scanner with each backend fed ``--chunk-mb`` chunks; then the peak RSS of
scans of the first 100 MB and of 400 MB, each in its own child process. Prints figures and
ratios, no verdicts.

    python bench/bench_scan.py [--size-mb 400] [--log FILE] [--chunk-mb 4] [--repeat 2]

The two progress patterns of bench/patterns.txt (iteration summaries, checkpoint saves) are
scanned as sampled matchers; the other lines are failure patterns.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from engine.core.matching import MatcherSpec, hyperscan_available
from engine.core.scanner import Scanner

logger = logging.getLogger(__name__)

PATTERNS = HERE / "patterns.txt"
PROGRESS = (
    "iteration +[0-9]+/ *[0-9]+ [|]",
    "successfully saved checkpoint at iteration +[0-9]+",
)
MB = 1 << 20


def load_specs(path: Path = PATTERNS) -> list[MatcherSpec]:
    patterns = [p for p in path.read_text().splitlines() if p]
    missing = [p for p in PROGRESS if p not in patterns]
    if missing:
        raise SystemExit(f"{path}: progress patterns missing: {missing}")
    return [MatcherSpec(f"p{i:02d}", p, sample=p in PROGRESS) for i, p in enumerate(patterns)]


def read_only(path: str, chunk: int, limit: int | None = None) -> int:
    n = 0
    with open(path, "rb", buffering=0) as f:
        while limit is None or n < limit:
            data = f.read(chunk if limit is None else min(chunk, limit - n))
            if not data:
                break
            n += len(data)
    return n


def scan(path: str, sc: Scanner, chunk: int, limit: int | None = None):
    """Feed the file to ``sc``; return (seconds of reading + scanning, hits)."""
    hits = []
    n = 0
    t = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while limit is None or n < limit:
            data = f.read(chunk if limit is None else min(chunk, limit - n))
            if not data:
                break
            n += len(data)
            hits += sc.feed(data)
    hits += sc.flush()
    return time.perf_counter() - t, hits


def timed(fn, repeat: int):
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def peak_rss_kib() -> tuple[int, int]:
    """(VmHWM, ru_maxrss) in KiB. On Linux ru_maxrss keeps the parent's peak across fork and
    exec, so a child of a big process reports at least that; VmHWM is this image's own peak."""
    hwm = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        pass
    return hwm, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def rss_child(args) -> int:
    sc = Scanner(load_specs(), backend=args.backend)
    limit = int(args.limit_mb * MB)
    if limit:
        scan(args.log, sc, int(args.chunk_mb * MB), limit)
    print(*peak_rss_kib())
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=400.0, help="size of the generated log")
    ap.add_argument("--log", help="use this log instead of generating one")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--chunk-mb", type=float, default=4.0, help="feed size")
    ap.add_argument("--repeat", type=int, default=2, help="runs per measurement; the best counts")
    ap.add_argument("--rss-mb", default="100,400", help="sizes for the peak-RSS child runs")
    ap.add_argument("--rss-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--limit-mb", type=float, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="auto", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rss_child:
        return rss_child(args)

    with tempfile.TemporaryDirectory(prefix="recover-bench-") as tmp:
        log = args.log
        if not log:
            sys.path.insert(0, str(HERE))
            import gen_log

            log = os.path.join(tmp, "train.log")
            t = time.perf_counter()
            with open(log, "wb") as f:
                gen_log.generate(f, args.size_mb, args.seed)
            print(f"generated {log} in {time.perf_counter() - t:.1f} s")
        size = os.path.getsize(log)
        chunk = int(args.chunk_mb * MB)
        specs = load_specs()
        backends = (["hyperscan"] if hyperscan_available() else []) + ["re2"]
        print(
            f"log {size / MB:.0f} MiB, {len(specs)} patterns ({sum(s.sample for s in specs)} sampled), "
            f"feeds of {args.chunk_mb:g} MiB, best of {args.repeat}, {os.cpu_count()} CPUs"
        )

        read_only(log, chunk)  # warm the page cache
        rows = []
        t, _ = timed(lambda: read_only(log, chunk), args.repeat)
        rows.append(("read only", t, ""))
        env = dict(os.environ, LC_ALL="C")
        cmd = ["grep", "-E", "-c", "-f", str(PATTERNS), log]
        t, out = timed(lambda: subprocess.run(cmd, env=env, capture_output=True, check=False), args.repeat)
        grep_s = t
        rows.append(("grep -E -c -f", t, f"{out.stdout.decode().strip()} lines"))
        results = {}
        for backend in backends:
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                sc = Scanner(specs, backend=backend)
                build = time.perf_counter() - t0
                t, hits = scan(log, sc, chunk)
                best = min(best, t)
            results[backend] = [(h.matcher, h.line_no, h.offset, h.line, h.groups) for h in hits]
            failures = sum(1 for h in hits if not specs[h.matcher].sample)
            rows.append(
                (
                    f"Scanner {backend}",
                    best,
                    f"{failures} failure hits, {len(hits) - failures} progress hits, {sc.lines_seen} "
                    f"lines, {sc.long_lines_cut} cut; build {build * 1000:.0f} ms (not counted)",
                )
            )

        print(f"\n{'':18} {'seconds':>8} {'MB/s':>8} {'x grep':>7}  notes")
        for name, t, note in rows:
            print(f"{name:18} {t:8.3f} {size / MB / t:8.0f} {t / grep_s:7.2f}  {note}")
        if len(results) == 2:
            same = results["hyperscan"] == results["re2"]
            print(f"\nhyperscan and re2 hits identical: {'yes' if same else 'NO'}")

        sizes = [float(x) for x in args.rss_mb.split(",") if x]
        print("\npeak RSS, each in a fresh child process: VmHWM (ru_maxrss, inherits this process's peak)")
        for backend in backends:
            cells = []
            for mb in [0.0] + sizes:
                child = [
                    sys.executable,
                    __file__,
                    "--rss-child",
                    "--log",
                    log,
                    "--limit-mb",
                    str(mb),
                    "--backend",
                    backend,
                    "--chunk-mb",
                    str(args.chunk_mb),
                ]
                out = subprocess.run(child, capture_output=True, text=True, check=True).stdout.split()
                hwm, maxrss = int(out[-2]) / 1024, int(out[-1]) / 1024
                label = "build only" if mb == 0 else f"scan {mb:g} MB"
                cells.append(f"{label}: {hwm:.1f} MiB ({maxrss:.1f})")
            print(f"  {backend:10} " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
