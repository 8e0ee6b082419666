"""Throughput of the file readers built on engine/sources/tail.py, as ratios to a plain read of the
same file measured in the same run (the machine is noisy: compare ratios, not seconds).

    python bench/bench_tail.py [--mb 16]

* reference: the file read in 1 MiB pieces, each split at its newlines (the floor of a line reader)
* kernel file: the agent's kernel-log file reader (LineTail), lines only (no matching)
* follower: Follower.read_ready over one job log (chunks, no lines)
* spool: SpoolReader.read over one node's spool (lines and JSON facts)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())

from engine.facts import Fact
from engine.sources.follow import Follower
from engine.sources.spool import SpoolReader

try:
    from engine.sources.tail import LineTail
except ImportError:  # before engine/sources/tail.py: the kernel-log reader's own copy (for a before/after)
    from engine.sources.kmsg import _FileFollower as LineTail  # type: ignore[no-redef]
LINE = b"Nov 29 17:00:01 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=%d, name=python3, GPU has fallen off the bus.\n"


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def reference(path: str) -> int:
    n = 0
    with open(path, "rb", buffering=0) as fh:
        while data := fh.read(1 << 20):
            n += len(data.split(b"\n"))  # a line object per line, as a line reader makes
    return n


def kernel_file(path: str) -> int:
    tail = LineTail(path, replay=True)  # what KernelLogSource reads a file with, without the matchers
    n = 0
    while got := tail.read():
        n += len(got)
    tail.close()
    return n


def follower(path: str) -> int:
    f = Follower([os.path.join(os.path.dirname(path), "*.log")])
    t = f.add(path)
    n = 0
    while True:
        got = 0
        for t, data in f.read_ready():
            got += len(data)
            t.offset += len(data)
        if not got:
            break
        n += got
        f.rescan()
    f.stop()
    return n


def spool(directory: str) -> int:
    r = SpoolReader(directory)
    n = 0
    while facts := r.read(max_bytes=4 << 20):
        n += len(facts)
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=16.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "kern.log")
        lines = int(args.mb * (1 << 20) / len(LINE % 1000000))
        with open(log, "wb") as fh:
            fh.write(b"".join(LINE % i for i in range(lines)))
        os.mkdir(os.path.join(d, "jobs"))
        job = os.path.join(d, "jobs", "slurm-1.log")
        os.link(log, job)
        sp = os.path.join(d, "spool")
        os.mkdir(sp)
        facts = lines // 4
        with open(os.path.join(sp, "n1.jsonl"), "wb") as fh:
            fh.write(
                b"".join(
                    Fact.make("xid", {"code": 79, "node": "n1", "pid": i}, at=float(i), origin="k").to_json().encode()
                    + b"\n"
                    for i in range(facts)
                )
            )
        size = os.path.getsize(log)
        ref = best(lambda: reference(log))
        rows = [("reference (read + split lines)", ref, size)]
        assert kernel_file(log) == lines
        rows.append(("kernel file (LineTail lines)", best(lambda: kernel_file(log)), size))
        assert follower(job) == size
        rows.append(("follower (read_ready chunks)", best(lambda: follower(job)), size))
        assert spool(sp) == facts
        spool_size = os.path.getsize(os.path.join(sp, "n1.jsonl"))
        spool_ref = best(lambda: reference(os.path.join(sp, "n1.jsonl")))
        rows.append(("spool (lines + facts)", best(lambda: spool(sp), 1), spool_size))
        print(f"{lines} kernel lines ({size / 2**20:.1f} MiB), {facts} spool facts ({spool_size / 2**20:.1f} MiB)")
        for name, secs, nbytes in rows:
            base = spool_ref if name.startswith("spool") else ref
            print(f"{name:36s} {secs * 1000:9.1f} ms {nbytes / secs / 2**20:9.1f} MiB/s  x{secs / base:7.2f} reference")


if __name__ == "__main__":
    main()
