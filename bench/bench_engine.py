"""The rule engine's throughput alone (issues 12, 24): facts/s through the Rete (reference, same
run) and through the whole Engine with an in-memory store: realistic and pathological mixes, and
a cascade (the realistic failures of hundreds of job attempts at once).

    python bench/bench_engine.py [--facts 20000] [--rounds 3] [--batch 500] [--profile realistic|worst|cascade]

The engine ingests its facts in store transactions of ``--batch`` facts, as the live controller
commits its work (``engine.live.batch.BATCH_HITS``) and replay (``REPLAY_TX_ITEMS``); ``--batch
0``: each statement on its own, as this bench measured until issue 24.

Prints figures (best of the rounds) and their ratio to the Rete alone, never pass/fail.
"""

from __future__ import annotations

import argparse
import cProfile
import contextlib
import logging
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_replay import engine_mixes, matcher_samples, rete_alone

#: job attempts failing at once in the cascade mix (a leaf switch fails under a few hundred jobs)
CASCADE_JOBS = 250


def cascade_mix(compiled, n: int) -> list:
    """The realistic mix's failures, ``CASCADE_JOBS`` job attempts at a time, their lines
    interleaved: that many incidents open together (the open ones looked up per derived fact)."""
    from engine.facts import Fact

    ids = [m.id for m in compiled.matchers if m.emit == "log"]
    samples = matcher_samples(compiled)
    out: list = []
    first = 100
    while len(out) < n:
        t = first * 1000.0
        jobs = range(first, first + CASCADE_JOBS)
        out += [
            Fact.make("xid", {"code": 79, "node": f"n{j % 16}", "job": str(j), "attempt": 0}, t, f"kern:{j}")
            for j in jobs
            if j % 5 == 0
        ]
        for rank in range(8):
            for i, j in enumerate(jobs):
                m = ids[j % len(ids)]
                attrs = dict(samples.get(m, {}), matcher=m, job=str(j), attempt=0, node=f"n{rank}", rank=rank)
                out.append(Fact.make("log", attrs, t + 1 + rank * 0.01 + i * 1e-4, f"bench:{j}:{rank}"))
        first += CASCADE_JOBS
    return out[:n]


def ingest(eng, mix: list, batch: int) -> None:
    """All of ``mix`` into ``eng``, in transactions of ``batch`` facts (0: none), then finish."""
    store = eng.store
    step = batch or len(mix) or 1
    for start in range(0, len(mix), step):
        if batch:
            with store.transaction():
                for f in mix[start : start + step]:
                    eng.ingest(f)
        else:
            for f in mix[start : start + step]:
                eng.ingest(f)
    with store.transaction() if batch else contextlib.nullcontext():
        eng.finish()


def engine_throughput(n: int, batch: int) -> tuple[float, ...]:
    """Facts/s through the Rete alone (assert + retract of single facts), and through the whole
    engine (in-memory store) in the two mixes of ``bench_replay.engine_mixes``."""
    from engine.core.incidents import Engine
    from engine.core.rete import ReteNetwork
    from engine.rulebook import require_rulebook
    from engine.store import Store

    compiled = require_rulebook(tests=True)
    net = ReteNetwork(compiled)
    facts, worst = engine_mixes(compiled, n)
    cascade = cascade_mix(compiled, n)
    rete = rete_alone(net, facts)
    rates = []
    for mix in (facts, worst, cascade):
        eng = Engine(compiled, Store(":memory:"), network=net)
        t0, c0 = time.perf_counter(), time.process_time()
        ingest(eng, mix, batch)
        rates.append(len(mix) / (time.perf_counter() - t0))
        rates.append(len(mix) / (time.process_time() - c0))
        eng.close()
    return rete, *rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=500, help="facts per store transaction (0: none)")
    ap.add_argument("--profile", choices=("realistic", "worst", "cascade"), help="cProfile one mix instead")
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # a rule's template failing on bench facts is not the figure
    if args.profile:
        from engine.core.incidents import Engine
        from engine.rulebook import require_rulebook
        from engine.store import Store

        compiled = require_rulebook(tests=True)
        realistic, worst = engine_mixes(compiled, args.facts)
        mix = {"realistic": realistic, "worst": worst}.get(args.profile) or cascade_mix(compiled, args.facts)
        eng = Engine(compiled, Store(":memory:"))
        prof = cProfile.Profile()
        prof.enable()
        ingest(eng, mix, args.batch)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
        return
    best = (0.0,) * 7
    for _ in range(args.rounds):
        r = engine_throughput(args.facts, args.batch)
        best = tuple(max(a, b) for a, b in zip(best, r))
    rete, whole, whole_cpu, worst_rate, worst_cpu, cascade, cascade_cpu = best
    print(f"Rete alone (assert+retract)      {rete:>10,.0f} facts/s")
    print(
        f"engine + store, realistic        {whole:>10,.0f} facts/s   ratio to Rete {whole / rete:.2f}   goal >= 20k"
        f"   (per CPU second {whole_cpu:,.0f})"
    )
    print(
        f"engine + store, pathological     {worst_rate:>10,.0f} facts/s   ratio to Rete {worst_rate / rete:.3f}   goal >= 5k"
        f"   (per CPU second {worst_cpu:,.0f})"
    )
    print(
        f"engine + store, cascade of {CASCADE_JOBS:<5} {cascade:>10,.0f} facts/s   ratio to Rete {cascade / rete:.2f}"
        f"   (per CPU second {cascade_cpu:,.0f}; the realistic mix's failures, {CASCADE_JOBS} job attempts at once)"
    )


if __name__ == "__main__":
    main()
