"""Floods and throughput (issue 12): every figure of its table, each with a reference measured in
the same run. Prints figures, never pass/fail.

    python bench/bench_flood.py [--ranks 512 --repeat 600] [--replay-mb 400] [--facts 20000]

Figures: the NCCL cascade (incidents, peak RSS, seconds; reference: grep -E -c -f with the
rulebook's patterns over the same file); replay of a generated training log against grep (via
bench_replay); the rule engine with a store, realistic and pathological mixes (reference: the
Rete alone); `recover incidents` / `recover explain` start to finish and rulebook load with a
cold and a warm cache (reference: a bare Python start); `recover rules test` (reference: `rules
check`). The live flood figure is bench/bench_live_flood.py's (a real controller process).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import cleanup, setup
from bench_replay import engine_throughput, timed, to_ere
from gen_flood import cascade, distinct

RECOVER = [sys.executable, "-m", "engine.cli"]
LOAD = (
    "import time; t0 = time.perf_counter(); from engine.rulebook import require_rulebook; "
    "from engine.core.scanner import scanner_for; c = require_rulebook(); scanner_for(c, 'any'); "
    "print(time.perf_counter() - t0)"
)


def best(cmd: list[str], n: int = 3, env: dict | None = None) -> float:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, env=env, check=False)
        out.append(time.perf_counter() - t0)
    return min(out)


def row(name: str, value: str, goal: str, ref: str = "") -> None:
    print(f"{name:52}{value:>28}   goal {goal:<22}{ref}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=600)
    ap.add_argument("--healthy", type=int, default=20000)
    ap.add_argument("--facts", type=int, default=20000)
    ap.add_argument("--distinct", type=int, default=100000, help="lines of the distinct-exceptions log")
    args, compiled, tmp = setup(ap, "recover-flood-")
    env_c = dict(os.environ, LC_ALL="C")
    try:
        pat = tmp / "patterns.ere"
        pat.write_text("\n".join(e for m in compiled.matchers if (e := to_ere(m.pattern))) + "\n")
        log = tmp / "train.log"
        n = cascade(str(log), args.ranks, args.repeat, args.healthy)
        print(
            f"cascade log: {n} NCCL NET/IB warning lines from {args.ranks} ranks after {args.healthy} healthy lines, "
            f"{log.stat().st_size / 2**20:.0f} MiB, no job id\n"
        )
        t_grep, c_grep, _, _ = timed(["grep", "-E", "-c", "-f", str(pat), str(log)], env_c)
        db = tmp / "flood.db"
        t_rep, c_rep, rss, out = timed(RECOVER + ["replay", "--db", str(db), "--json", str(log)])
        incidents = len(out.splitlines())
        row("cascade: incidents", f"{incidents}", "1")
        row("cascade: peak RSS", f"{rss / 1024:.0f} MiB", "<= 200 MiB")
        row(
            "cascade: seconds",
            f"{t_rep:.2f} s ({n / t_rep:,.0f} lines/s)",
            "<= 5 s",
            f"grep -E -f: {t_grep:.2f} s, ratio {t_rep / t_grep:.1f}x",
        )
        row("cascade: CPU seconds (user + system)", f"{c_rep:.2f} s", "", f"grep -E -f: {c_grep:.2f} s")

        # not in the table: every line a different exception, so nothing collapses them
        dlog = tmp / "slurm-778.out"
        nd = distinct(str(dlog), args.distinct)
        t_dgrep, _, _, _ = timed(["grep", "-E", "-c", "-f", str(pat), str(dlog)], env_c)
        t_d, _, rss_d, out_d = timed(RECOVER + ["replay", "--db", str(tmp / "distinct.db"), "--json", str(dlog)])
        row(
            f"{nd:,} distinct exception lines, one job",
            f"{t_d:.2f} s, {rss_d / 1024:.0f} MiB, {len(out_d.splitlines())} incident",
            "(bounded)",
            f"grep -E -f: {t_dgrep:.2f} s, ratio {t_d / t_dgrep:.1f}x",
        )

        rete, whole, worst = engine_throughput(args.facts)
        row(
            "rule engine + store, realistic incidents",
            f"{whole:,.0f} facts/s",
            ">= 20k facts/s",
            f"Rete alone: {rete:,.0f} facts/s, ratio {whole / rete:.2f}",
        )
        row(
            "pathological mix (every failure in every attempt)",
            f"{worst:,.0f} facts/s",
            ">= 2k facts/s",
            f"ratio to the Rete alone {worst / rete:.3f}",
        )
        row("live: Xid on node B while job A floods 1 M lines", "bench/bench_live_flood.py", "p99 <= 1 s, 300 MiB")

        t_py = best([sys.executable, "-c", "pass"])
        t_inc = best(RECOVER + ["incidents", "--db", str(db)])
        t_exp = best(RECOVER + ["explain", "1", "--db", str(db)])
        row("recover incidents, start to finish", f"{t_inc:.2f} s", "<= 0.3 s", f"bare python start {t_py:.2f} s")
        row("recover explain 1, start to finish", f"{t_exp:.2f} s", "<= 0.3 s", f"bare python start {t_py:.2f} s")

        cold_env = dict(os.environ, RECOVER_CACHE_DIR=str(tmp / "cache"))
        cold = float(
            subprocess.run(
                [sys.executable, "-c", LOAD], capture_output=True, text=True, env=cold_env, cwd=HERE.parent, check=True
            ).stdout
        )
        warm = min(
            float(
                subprocess.run(
                    [sys.executable, "-c", LOAD],
                    capture_output=True,
                    text=True,
                    env=cold_env,
                    cwd=HERE.parent,
                    check=True,
                ).stdout
            )
            for _ in range(3)
        )
        off = float(
            subprocess.run(
                [sys.executable, "-c", LOAD],
                capture_output=True,
                text=True,
                env=dict(os.environ, RECOVER_CACHE_DIR="off"),
                cwd=HERE.parent,
                check=True,
            ).stdout
        )
        row(
            "rulebook load + scanner, warm cache",
            f"{warm:.2f} s",
            "<= 0.2 s",
            f"cache off {off:.2f} s, ratio {warm / off:.2f}",
        )
        row("rulebook load + scanner, cold cache", f"{cold:.2f} s", "<= 1.5 s", f"cache off {off:.2f} s")

        t_check = best(RECOVER + ["rules", "check"], 1)
        t_test = best(RECOVER + ["rules", "test"], 1)
        row(
            "recover rules test, shipped rulebook",
            f"{t_test:.2f} s",
            "<= 5 s",
            f"rules check {t_check:.2f} s, ratio {t_test / t_check:.1f}x",
        )
        print("\nreplay of a 400 MB training log against grep: python bench/bench_replay.py --size-mb 400")
    finally:
        cleanup(args, tmp)


if __name__ == "__main__":
    main()
