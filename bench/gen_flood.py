"""Deterministic generators of the flood logs of issue 12, for benchmarks.

``cascade``: one job log (no job id in the file or its name) with ``--healthy`` timestamped
iteration lines, then ``--ranks`` ranks (8 per node) each printing one NCCL ``NET/IB`` warning
``--repeat`` times, interleaved as ranks do; the warnings carry no timestamp of their own.

``mix``: ``--attempts`` job logs (``slurm-<job>.out``), each with a few healthy lines and
``--per-attempt`` different failure lines (the pathological mix: 50 different failures per
attempt), drawn from the default rulebook's embedded test lines.

``distinct``: one job log in which every line is a different Python exception (a name of random
letters, so that no flood collapses two of them): what a hostile or broken program can print.

    python bench/gen_flood.py cascade --out /tmp/flood.log [--ranks 512 --repeat 600 --healthy 20000]
    python bench/gen_flood.py mix --out-dir /tmp/mix [--attempts 40 --per-attempt 50]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

GPUS_PER_NODE = 8


def cascade(out: str, ranks: int = 512, repeat: int = 600, healthy: int = 20000, seed: int = 7) -> int:
    """Write the cascade log; return the number of warning lines."""
    rng = random.Random(seed)
    t = datetime(2026, 3, 2, 8, 0, 0)
    nodes = [f"gpu{i:04d}" for i in range((ranks + GPUS_PER_NODE - 1) // GPUS_PER_NODE)]
    pids = [rng.randint(10000, 99999) for _ in range(ranks)]
    with open(out, "w") as fh:
        w = fh.write
        for it in range(healthy):
            t += timedelta(milliseconds=rng.randint(300, 500))
            w(
                f"[{t:%Y-%m-%d %H:%M:%S}.{t.microsecond // 1000:03d}] iteration {it + 1:>8}/  500000 | "
                f"consumed samples: {(it + 1) * 1024:>12} | elapsed time per iteration (ms): {rng.uniform(380, 420):.1f} | "
                f"learning rate: 1.500E-04 | lm loss: {2.5 + rng.random() / 10:.6E} | loss scale: 1.0 | grad norm: 0.{rng.randint(100, 999)} |\n"
            )
        t += timedelta(seconds=2)
        w(
            f"[{t:%Y-%m-%d %H:%M:%S}.000] iteration {healthy + 1:>8}/  500000 | consumed samples: {(healthy + 1) * 1024:>12} |\n"
        )
        n = 0
        for r in range(repeat):
            for rank in range(ranks):
                node = nodes[rank // GPUS_PER_NODE]
                local = rank % GPUS_PER_NODE
                peer = f"10.{rank % 7}.{rank // 250}.{(rank * 13) % 250}<{40000 + rank}>"
                w(
                    f"{node}:{pids[rank]}:{pids[rank] + 57 + local} [{local}] transport/net_ib.cc:1696 NCCL WARN NET/IB : "
                    f"Got completion from peer {peer} with status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 "
                    f"vendor err 129 (Recv) localGid ::ffff:10.{local}.{rank % 200}.{r % 250} remoteGids::ffff:10.3.{rank % 100}.7 hca mlx5_{local}\n"
                )
                n += 1
    return n


def distinct_lines(lines: int, seed: int = 7) -> Iterator[str]:
    """``lines`` different Python exception lines (a name of random letters, so that no flood
    collapses two of them), each with its newline: the body of the ``distinct`` log, and the
    live flood's ``--shape distinct`` (bench/bench_live_flood.py)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(lines):
        name = "".join(rng.choice(letters) for _ in range(10)).capitalize()
        yield f"[rank{i % 64}]: {name}Error: something went wrong\n"


def distinct(out: str, lines: int = 100000, seed: int = 7) -> int:
    """Write a job log of ``lines`` different exception lines; return the number written."""
    with open(out, "w") as fh:
        fh.write("SLURM_JOB_ID=778\n")
        fh.writelines(distinct_lines(lines, seed))
    return lines


def mix(out_dir: str, attempts: int = 40, per_attempt: int = 50, seed: int = 7) -> int:
    """Write ``attempts`` job logs of ``per_attempt`` different failure lines; return lines written."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from engine.rulebook import require_rulebook

    compiled = require_rulebook(tests=True)
    lines: list[str] = []
    seen: set[str] = set()
    for test in compiled.book.tests:
        for inp in test.inputs:
            for text in inp.lines.splitlines():
                if text.strip() and text not in seen and "Xid" not in text:
                    seen.add(text)
                    lines.append(text)
    if not lines:
        raise SystemExit("no test lines found in the rulebook")
    rng = random.Random(seed)
    os.makedirs(out_dir, exist_ok=True)
    n = 0
    t0 = datetime(2026, 3, 2, 8, 0, 0)
    for a in range(attempts):
        job = 700000 + a
        t = t0 + timedelta(minutes=30 * a)
        with open(os.path.join(out_dir, f"slurm-{job}.out"), "w") as fh:
            for i in range(20):
                t += timedelta(seconds=1)
                fh.write(f"[{t:%Y-%m-%d %H:%M:%S}] iteration {i} | lm loss: 2.5 |\n")
            for line in rng.sample(lines, min(per_attempt, len(lines))):
                t += timedelta(milliseconds=200)
                fh.write(f"[{t:%Y-%m-%d %H:%M:%S}] {line}\n")
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cascade")
    c.add_argument("--out", required=True)
    c.add_argument("--ranks", type=int, default=512)
    c.add_argument("--repeat", type=int, default=600)
    c.add_argument("--healthy", type=int, default=20000)
    m = sub.add_parser("mix")
    m.add_argument("--out-dir", required=True)
    m.add_argument("--attempts", type=int, default=40)
    m.add_argument("--per-attempt", type=int, default=50)
    args = ap.parse_args()
    if args.what == "cascade":
        n = cascade(args.out, args.ranks, args.repeat, args.healthy)
        print(f"{args.out}: {n} warning lines after {args.healthy} healthy lines")
    else:
        n = mix(args.out_dir, args.attempts, args.per_attempt)
        print(f"{args.out_dir}: {args.attempts} job logs, {n} failure lines")


if __name__ == "__main__":
    main()
