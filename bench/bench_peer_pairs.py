"""A hostile pair table (engine.core.peer_table, kind ``pair``): a job prints tens of thousands of
"hostA,hostB  figure" rows. The table is judged as it grows; this measures that against judging
the whole table again at every row from the definition (every host's pairs against the median of
the pairs it is not in), in the same process (the machine is noisy: compare the ratio).

    python bench/bench_peer_pairs.py [--rows 20000] [--hosts 400]

Both must name the same hosts at the same rows (checked).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.core.peer_table import MAX_ROWS, PAIR_MIN, PeerTables
from engine.facts import Fact

FACTOR, MIN_PEERS = 1.5, 3


def by_definition(rows: list[tuple[str, str, float]]) -> list[tuple[int, str]]:
    """(row, host) of every verdict, each table (``MAX_ROWS`` rows) judged whole at every row."""
    out: list[tuple[int, str]] = []
    table: dict[str, float] = {}
    reported = False
    for i, (a, b, v) in enumerate(rows):
        if len(table) >= MAX_ROWS:
            table, reported = {}, False
        table[f"{a}\t{b}"] = 1.0 / v
        if reported:
            continue
        pairs = [(k.split("\t"), c) for k, c in table.items()]
        worst: tuple[str, float] | None = None
        for host in dict.fromkeys(h for hosts, _ in pairs for h in hosts):  # first seen first, as kept
            mine = [c for hosts, c in pairs if host in hosts]
            rest = [c for hosts, c in pairs if host not in hosts]
            if len(mine) < PAIR_MIN or len(rest) < MIN_PEERS:
                continue
            typical = statistics.median(rest)
            if min(mine) >= FACTOR * typical and (worst is None or min(mine) / typical > worst[1]):
                worst = (host, min(mine) / typical)
        if worst is not None:
            reported = True
            out.append((i, worst[0]))
    return out


def as_kept(rows: list[tuple[str, str, float]]) -> list[tuple[int, str]]:
    t = PeerTables(FACTOR, MIN_PEERS)
    out = []
    for i, (a, b, v) in enumerate(rows):
        attrs = {"job": "1", "attempt": 0, "matcher": "peers_pair_row", "table": "pair"}
        attrs.update({"host_a": a, "host_b": b, "value": str(v), "unit": "GB/s"})
        out += [
            (i, str(f.get("peer")))
            for f in t.observe("1", 0, Fact.make("progress", attrs, 0.0, f"slurm-1.out:{i + 1}"))
        ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--hosts", type=int, default=400)
    args = ap.parse_args()
    rng = random.Random(1)
    rows = [
        (f"n{rng.randrange(args.hosts)}", f"n{rng.randrange(args.hosts)}", rng.uniform(10, 90))
        for _ in range(args.rows)
    ]
    rows = [r for r in rows if r[0] != r[1]]
    t0 = time.process_time()
    ref = by_definition(rows)
    t_ref = time.process_time() - t0
    t0 = time.process_time()
    got = as_kept(rows)
    t_got = time.process_time() - t0
    diff = [(x, y) for x, y in zip(got, ref) if x != y]
    assert got == ref, (len(got), len(ref), diff[:3])
    print(f"{len(rows):,} pair rows, {args.hosts} hosts, {len(got)} verdicts (the same from both)")
    print(f"{'whole table judged at every row':40} {t_ref:8.3f} s CPU")
    print(f"{'kept as it grows (PeerTables)':40} {t_got:8.3f} s CPU   ratio {t_got / t_ref:.3f}")


if __name__ == "__main__":
    main()
