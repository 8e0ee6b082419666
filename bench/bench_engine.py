"""The rule engine's throughput alone (issue 12): facts/s through the Rete (reference, same run)
and through the whole Engine with an in-memory store, realistic and pathological mixes.

    python bench/bench_engine.py [--facts 20000] [--rounds 3] [--profile realistic|worst]

Prints figures (best of the rounds) and their ratio to the Rete alone, never pass/fail.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_replay import engine_mixes, engine_throughput


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", choices=("realistic", "worst"), help="cProfile one mix instead")
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # a rule's template failing on bench facts is not the figure
    if args.profile:
        from engine.core.incidents import Engine
        from engine.rulebook import require_rulebook
        from engine.store import Store

        compiled = require_rulebook()
        realistic, worst = engine_mixes(compiled, args.facts)
        mix = realistic if args.profile == "realistic" else worst
        eng = Engine(compiled, Store(":memory:"))
        prof = cProfile.Profile()
        prof.enable()
        for f in mix:
            eng.ingest(f)
        eng.finish()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
        return
    best = (0.0, 0.0, 0.0)
    for _ in range(args.rounds):
        r = engine_throughput(args.facts)
        best = tuple(max(a, b) for a, b in zip(best, r))  # type: ignore[assignment]
    rete, whole, worst_rate = best
    print(f"Rete alone (assert+retract)      {rete:>10,.0f} facts/s")
    print(f"engine + store, realistic        {whole:>10,.0f} facts/s   ratio to Rete {whole / rete:.2f}   goal >= 20k")
    print(
        f"engine + store, pathological     {worst_rate:>10,.0f} facts/s   ratio to Rete {worst_rate / rete:.3f}   goal >= 2k"
    )


if __name__ == "__main__":
    main()
