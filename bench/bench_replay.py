"""Replay benchmark: `recover replay` against `grep -E -f` over the same generated log, with the
default rulebook's patterns, measured in the same run; peak RSS at two sizes; rule-engine
throughput through the compiled default rulebook.

    python bench/bench_replay.py [--size-mb 400] [--small-mb 100] [--log FILE] [--keep]

Prints figures and ratios, never pass/fail. grep gets the rulebook's patterns translated from
RE2 to POSIX ERE (named groups dropped, \\d \\s \\w spelled out); patterns that cannot be
translated are listed and left out of grep's set (which only makes grep's job easier).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

_ERE_SUBS = [
    (re.compile(r"\(\?P<\w+>"), "("),
    (re.compile(r"\(\?:"), "("),
    (re.compile(r"\\d"), "[0-9]"),
    (re.compile(r"\\D"), "[^0-9]"),
    (re.compile(r"\\s"), "[[:space:]]"),
    (re.compile(r"\\S"), "[^[:space:]]"),
    (re.compile(r"\\w"), "[[:alnum:]_]"),
    (re.compile(r"\\W"), "[^[:alnum:]_]"),
    (re.compile(r"([*+?}])\?"), r"\1"),  # lazy -> greedy: same lines match
]


def to_ere(pattern: str) -> str | None:
    if "(?i" in pattern or "(?s" in pattern or "(?m" in pattern or "\\pL" in pattern or "\\p{" in pattern:
        return None
    out = pattern
    for rx, rep in _ERE_SUBS:
        out = rx.sub(rep, out)
    # a class like [\d.] became [[0-9].]: flatten the nesting grep would misread
    out = re.sub(r"\[([^\]]*)\[0-9\]", r"[\g<1>0-9", out)
    out = re.sub(r"\[([^\]]*)\[\[:space:\]\]", r"[\g<1>[:space:]", out)
    out = re.sub(r"\[([^\]]*)\[\[:alnum:\]_\]", r"[\g<1>[:alnum:]_", out)
    try:
        r = subprocess.run(
            ["grep", "-E", "-c", "-e", out, "/dev/null"], capture_output=True, text=True, env={"LC_ALL": "C"}
        )
    except OSError:
        return None
    return out if r.returncode in (0, 1) else None


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds (user + system: steadier than wall on a shared machine), peak
    RSS (KiB) of the command, its stdout."""
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", *cmd], capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    last = r.stderr.strip().splitlines()[-1].split() if r.stderr.strip() else []
    rss, cpu = (int(last[0]), float(last[1]) + float(last[2])) if len(last) == 3 else (-1, -1.0)
    if r.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed ({r.returncode}): {r.stderr[-500:]}")
    return dt, cpu, rss, r.stdout


#: what a bench fact's own scope replaces in a corpus line's attributes
_CONTEXT = frozenset({"job", "attempt", "node", "rank", "local_rank", "logged_at"})


def matcher_samples(compiled) -> dict[str, dict]:
    """Per log matcher, the attributes of the first line it matched in the shipped rulebook's
    tests or the corpus (tests/corpus: excerpts from public issue trackers), so that the bench facts carry what the
    rules' conditions and templates read (an exception's name, the text)."""
    from engine.core.replay import Input, replay_inputs
    from engine.core.rete import ReteNetwork
    from engine.ops.corpus_eval import CASE_JOB, STREAM_SOURCES, load_cases
    from engine.store import Store

    cases, _ = load_cases([str(ROOT / "tests" / "corpus")])
    network = ReteNetwork(compiled)
    out: dict[str, dict] = {}

    def keep(fact) -> None:
        if fact.kind == "log" and fact.get("matcher") not in out:
            out[str(fact.get("matcher"))] = {k: v for k, v in fact.attrs.items() if k not in _CONTEXT}

    # the rulebook's own tests, then the corpus: each a few lines, replayed alone, until every
    # log matcher has its line (the rest could only give a later line: the first is kept)
    wanted = {m.id for m in compiled.matchers if m.emit == "log"}
    streams = [(i.file, i.source, i.lines) for t in compiled.book.tests for i in t.inputs]
    for case in cases:
        name = "kern.log" if case.stream == "kernel" else f"slurm-{CASE_JOB}.out"
        streams.append((name, STREAM_SOURCES[case.stream], case.text))
    for name, source, text in streams:
        if wanted <= out.keys():
            break
        data = text.encode("utf-8")
        store = Store(":memory:")
        try:
            replay_inputs([Input(name, lambda d=data: [d], source)], compiled, store, network=network, on_fact=keep)
        finally:
            store.close()
    return out


def engine_mixes(compiled, n: int = 20000) -> tuple[list, list]:
    """The two fact streams of ``engine_throughput``: realistic incidents (each job attempt fails
    with one cause, printed by 8 ranks, a fatal Xid in every fifth) and a worst case where every
    failure matcher fires in every job attempt (the correlation rules then join every pair).
    Each log fact carries the attributes a real line of its matcher gave (``matcher_samples``);
    the few matchers no corpus line matched carry only their id."""
    from engine.facts import Fact

    ids = [m.id for m in compiled.matchers if m.emit == "log"]
    samples = matcher_samples(compiled)

    def log(m: str, job: str, node: str, rank: int, at: float, origin: str) -> Fact:
        attrs = dict(samples.get(m, {}), matcher=m, job=job, attempt=0, node=node, rank=rank)
        return Fact.make("log", attrs, at, origin)

    def realistic():
        out, job = [], 100
        while len(out) < n:
            m = ids[job % len(ids)]
            t = job * 1000.0
            if job % 5 == 0:
                out.append(
                    Fact.make(
                        "xid", {"code": 79, "node": f"n{job % 16}", "job": str(job), "attempt": 0}, t, f"kern:{job}"
                    )
                )
            for rank in range(8):
                out.append(log(m, str(job), f"n{rank}", rank, t + 1 + rank * 0.01, f"bench:{job}:{rank}"))
            job += 1
        return out[:n]

    def worst():
        return [
            log(ids[i % len(ids)], str(100 + i // 50), f"n{i % 16}", i % 64, float(i), f"bench:{i}")
            for i in range(max(1, n // 10))
        ]

    return realistic(), worst()


def rete_alone(net, facts: list) -> float:
    """Facts/s through the Rete alone: assert and retract each fact of ``facts`` in one session of
    ``net`` (the reference the engine's figures are divided by), every fact through durable_rules
    (none judged without it: ``engine.core.alpha``)."""
    s = net.session()
    t0 = time.perf_counter()
    for f in facts:
        s.assert_fact(f)
        s.retract_fact(f.id)
    rate = len(facts) / (time.perf_counter() - t0)
    s.close()
    return rate


def hyperscan_alone(path: str) -> tuple[float, float, int]:
    """Wall and CPU seconds of the job scanner's main hyperscan database alone over ``path``, read
    in replay's chunks, every report a no-op (the floor of a scanner built on that database), and
    how many patterns it holds."""
    from engine.core.matching import hs
    from engine.core.replay import CHUNK
    from engine.core.scanner import scanner_for
    from engine.rulebook import require_rulebook

    sc, _ = scanner_for(require_rulebook(), "job")
    if hs is None or sc._hs_main is None:
        return -1.0, -1.0, 0
    db, scratch = sc._hs_main, hs.Scratch(sc._hs_main)
    t0, c0 = time.perf_counter(), time.process_time()
    with open(path, "rb") as fh:
        while data := fh.read(CHUNK):
            db.scan(data, match_event_handler=lambda *a: None, scratch=scratch)
    return time.perf_counter() - t0, time.process_time() - c0, len(sc._in_main)


def engine_throughput(n: int = 20000) -> tuple[float, float, float]:
    """Facts/s through the Rete alone (assert + retract of single facts), and through the whole
    engine (in-memory store) in the two mixes of ``engine_mixes``."""
    from engine.core.incidents import Engine
    from engine.core.rete import ReteNetwork
    from engine.rulebook import require_rulebook
    from engine.store import Store

    compiled = require_rulebook(tests=True)  # (matcher_samples replays its tests)
    net = ReteNetwork(compiled)
    facts, worst = engine_mixes(compiled, n)
    rete = rete_alone(net, facts)
    rates = []
    for mix in (facts, worst):
        eng = Engine(compiled, Store(":memory:"), network=net)
        t0 = time.perf_counter()
        for f in mix:
            eng.ingest(f)
        eng.finish()
        rates.append(len(mix) / (time.perf_counter() - t0))
        eng.close()
    return rete, rates[0], rates[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=400)
    ap.add_argument("--small-mb", type=int, default=100)
    ap.add_argument("--log", help="use this log instead of generating one")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--facts", type=int, default=20000)
    args = ap.parse_args()

    from engine.rulebook import require_rulebook

    compiled = require_rulebook()
    tmp = Path(tempfile.mkdtemp(prefix="recover-bench-"))
    recover = [sys.executable, "-m", "engine.cli"]
    try:
        logs = {}
        for size in sorted({args.small_mb, args.size_mb}):
            if args.log and size == args.size_mb:
                logs[size] = args.log
                continue
            path = tmp / f"slurm-4242-{size}mb.out"
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, str(HERE / "gen_log.py"), "--size-mb", str(size), "--seed", "7", "--out", str(path)],
                check=True,
            )
            print(f"generated {path.name}: {path.stat().st_size / 2**20:.0f} MiB in {time.perf_counter() - t0:.1f} s")
            logs[size] = str(path)
        patterns = [m.pattern for m in compiled.matchers]
        ere = [(p, to_ere(p)) for p in patterns]
        usable = [e for _, e in ere if e]
        skipped = [p for p, e in ere if not e]
        pat_file = tmp / "patterns.ere"
        pat_file.write_text("\n".join(usable) + "\n")
        print(
            f"patterns: {len(patterns)} matchers in the default rulebook, {len(usable)} translated for grep -E"
            + (
                f", {len(skipped)} left out of grep's set: {skipped[:3]}{'...' if len(skipped) > 3 else ''}"
                if skipped
                else ""
            )
        )

        big = logs[args.size_mb]
        size_b = os.path.getsize(big)
        env_c = dict(os.environ, LC_ALL="C")
        t0 = time.perf_counter()
        with open(big, "rb") as fh:
            while fh.read(4 << 20):
                pass
        t_read = time.perf_counter() - t0
        results = []
        for rnd in range(2):  # two rounds, alternating, to see the noise
            t_grep, c_grep, _, out = timed(["grep", "-E", "-c", "-f", str(pat_file), big], env_c)
            db = tmp / f"bench-{rnd}.db"
            t_rep, c_rep, rss_rep, rout = timed(recover + ["replay", "--db", str(db), "--json", big])
            results.append((t_grep, t_rep, rss_rep, int(out.strip() or 0), len(rout.splitlines()), c_grep, c_rep))
            db.unlink(missing_ok=True)
        t_start, _, _, _ = timed(recover + ["rules", "check"])
        t_hs, c_hs, n_hs = hyperscan_alone(big)
        print()
        print(f"{'':34}{'seconds':>10}{'MB/s':>10}{'ratio to grep':>15}{'CPU s':>10}{'CPU ratio':>11}")
        print(f"{'read only (4 MiB chunks)':34}{t_read:10.2f}{size_b / 2**20 / t_read:10.0f}")
        for i, (tg, tr, _rss, _grep_lines, _incidents, cg, cr) in enumerate(results):
            print(
                f"{f'grep -E -c -f (round {i + 1})':34}{tg:10.2f}{size_b / 2**20 / tg:10.0f}{1.0:15.2f}{cg:10.2f}{1.0:11.2f}"
            )
            print(
                f"{f'recover replay (round {i + 1})':34}{tr:10.2f}{size_b / 2**20 / tr:10.0f}{tr / tg:15.2f}"
                f"{cr:10.2f}{cr / max(cg, 0.01):11.2f}"
            )
        print(f"{'recover startup (rules check)':34}{t_start:10.2f}")
        if n_hs:  # the floor of this scanner: its one hyperscan pass, in-process, nothing else
            cg = min(r[5] for r in results)
            print(
                f"{f'hyperscan pass alone ({n_hs} patterns)':34}{t_hs:10.2f}{size_b / 2**20 / t_hs:10.0f}"
                f"{t_hs / min(r[0] for r in results):15.2f}{c_hs:10.2f}{c_hs / max(cg, 0.01):11.2f}"
            )
        tg, tr, rss, grep_lines, incidents, _, _ = results[-1]
        print(
            f"\nfile: {size_b / 2**20:.0f} MiB; grep matched {grep_lines} lines; replay found {incidents} incident(s)"
        )
        print(
            f"replay/grep ratio (best of rounds): {min(r[1] / r[0] for r in results):.2f}; "
            f"CPU seconds: {min(r[6] / max(r[5], 0.01) for r in results):.2f}"
        )

        if args.small_mb != args.size_mb:
            _, _, rss_small, _ = timed(
                recover + ["replay", "--db", str(tmp / "small.db"), "--json", logs[args.small_mb]]
            )
            print(
                f"peak RSS of replay: {rss_small / 1024:.0f} MiB at {args.small_mb} MB, {rss / 1024:.0f} MiB at {args.size_mb} MB"
            )
        rete, whole, worst = engine_throughput(args.facts)
        print(
            f"rule engine ({len(compiled.rules)} rules): {rete:,.0f} facts/s through the Rete alone (assert+retract); "
            f"whole engine with an in-memory store: {whole:,.0f} facts/s on realistic incidents, "
            f"{worst:,.0f} facts/s on the worst case (every failure matcher in every attempt)"
        )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")


if __name__ == "__main__":
    main()
