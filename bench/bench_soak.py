"""Soak: a million facts through the engine with the default rulebook; RSS must stay flat.

    python bench/bench_soak.py [--facts 1000000]

The mix is what a long-running controller sees: mostly facts no rule can use (they are dropped
at once), NCCL warnings of healthy jobs that wait in the Rete for a correlation until their
time-to-live runs out, and a failure in 1% of the job attempts (an incident opens, settles,
closes, and its facts are retracted). Time is virtual: 10 ms per fact. Prints RSS every 10% of
the run and the growth between the second sample and the last.
"""

from __future__ import annotations

import argparse
import time

from _common import rss_mb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts", type=int, default=1_000_000)
    ap.add_argument("--db", default=":memory:")
    args = ap.parse_args()
    from engine.facts import Fact
    from engine.core.incidents import Engine
    from engine.rulebook import require_rulebook
    from engine.store import Store

    compiled = require_rulebook()
    engine = Engine(compiled, Store(args.db))
    engine.fact_ttl = 600.0  # warnings of healthy jobs wait 10 virtual minutes for a correlation
    n, step = args.facts, max(1, args.facts // 10)
    samples = []
    t0 = time.perf_counter()
    for i in range(n):
        at = i * 0.01
        job = str(100000 + i // 2000)  # a job attempt every 20 virtual seconds
        r = i % 100
        if r == 0 and (i // 2000) % 100 == 0:  # 1% of the attempts fail
            f = Fact.make(
                "log",
                {"matcher": "cuda_oom_torch", "job": job, "attempt": 0, "rank": i % 8, "text": "CUDA out of memory"},
                at,
                f"soak:{i}",
            )
        elif r < 5:  # a warning some rule could correlate later
            f = Fact.make(
                "log",
                {"matcher": "nccl_warn", "job": job, "attempt": 0, "node": f"n{i % 64}", "seq": i},
                at,
                f"soak:{i}",
            )
        else:  # noise no rule uses
            f = Fact.make("log", {"matcher": "soak_noise", "job": job, "attempt": 0, "seq": i}, at, f"soak:{i}")
        engine.ingest(f)
        if (i + 1) % step == 0:
            samples.append((i + 1, rss_mb(), len(engine.live), len(engine.session)))
            print(
                f"{i + 1:>9} facts  RSS {samples[-1][1]:7.1f} MiB  live facts {samples[-1][2]:>6}  in the Rete {samples[-1][3]:>6}  "
                f"incidents {engine.stats['incidents']}",
                flush=True,
            )
    engine.finish()
    dt = time.perf_counter() - t0
    print(
        f"\n{n:,} facts in {dt:.0f} s ({n / dt:,.0f} facts/s); RSS {samples[1][1]:.1f} MiB after {samples[1][0]:,} facts, "
        f"{samples[-1][1]:.1f} MiB after {samples[-1][0]:,} (growth {samples[-1][1] - samples[1][1]:+.1f} MiB); "
        f"{engine.stats['unused']:,} facts (read or derived) that no rule could use were dropped at once"
    )


if __name__ == "__main__":
    main()
