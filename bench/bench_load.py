"""The live controller under load: N followed files receiving R lines/s in total for a duration.

A separate generator process (this script with --generate; bounded by --seconds; it writes only
into a temporary folder) appends training-log lines to --files files, --writes-per-s times a
second each, and once every --fault-every seconds a fault line with a fresh job id whose append
time it records. The real ``recover run --dry-run`` follows the files (inotify, or --poll) with a
rulebook of ~25 realistic matchers (bench/patterns.txt), a sampled progress matcher and the fault
rule. This script samples the controller's CPU time and RSS from /proc every second, polls the
store (read-only, another process) for the fault incidents, and at the end prints:

- controller CPU (% of one core) and RSS (mean, max, at the end);
- lines written vs. lines the controller read (its metrics), i.e. whether it kept up;
- detection latency under load (fault line appended -> incident committed), p50/p90/p99/max.

    python bench/bench_load.py                    # 500 files, 50,000 lines/s, 10 minutes
    python bench/bench_load.py --seconds 60       # shorter
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import FAULT_MATCHER, ROOT, fault_rules, percentile

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

EXTRA_RULES = (
    "\n"
    + FAULT_MATCHER
    + "  - {id: progress, pattern: 'iteration +(?P<step>\\d+)/', emit: progress, sample: true}\n"
    + fault_rules("10s")
)


def rulebook() -> str:
    out = ["matchers:"]
    pats = (ROOT / "bench" / "patterns.txt").read_text().splitlines()
    for i, p in enumerate(x for x in pats if x.strip() and not x.startswith("#")):
        if "iteration" in p:
            continue  # the progress matcher below takes those lines
        out.append(f"  - {{id: p{i}, pattern: {json.dumps(p)}}}")
    return "\n".join(out) + EXTRA_RULES


# -- the generator (a separate process) ------------------------------------------------------------
def healthy_lines(rng: random.Random, n: int) -> list[bytes]:
    forms = [
        "{t} [rank{r}]: iteration {i:>8}/ 500000 | consumed samples: {s:>12} | elapsed time per iteration (ms): {ms:.1f} | "
        "learning rate: 1.500E-04 | global batch size: 2048 | lm loss: {loss:.6E} | loss scale: 65536.0 | grad norm: {g:.3f} |",
        "{t} node{n:02d}:{pid}:{pid} [{r}] NCCL INFO Channel {c:02d}/32 : {r} -> {r2} via P2P/IPC/read",
        "{t} [rank{r}]: [2026-11-29 17:00:00,000] [INFO] [logging.py:96:log_dist] step={i}, skipped=0, lr=[0.00015], mom=[(0.9, 0.95)]",
        "{t} [rank{r}]: {p}%|{bar}| {i}/500000 [1:02:03<10:00:00, 1.23it/s]",
        "{t} [rank{r}]: /usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:558: UserWarning: This DataLoader will create 8 worker processes",
        "{t} [rank{r}]: tokens/s/gpu: {tok} | mfu: {mfu:.2f} | memory allocated (GB): {mem:.2f}",
    ]
    out = []
    for k in range(n):
        t = f"2026-11-29T17:{(k // 60) % 60:02d}:{k % 60:02d}.{k % 1000:03d}"
        f = forms[rng.randrange(len(forms))]
        out.append(
            (
                f.format(
                    t=t,
                    r=rng.randrange(64),
                    r2=rng.randrange(64),
                    i=1000 + k,
                    s=(1000 + k) * 2048,
                    ms=800 + rng.random() * 30,
                    loss=2.5 + rng.random(),
                    g=rng.random(),
                    n=rng.randrange(1, 9),
                    pid=rng.randrange(10000, 60000),
                    c=rng.randrange(32),
                    p=rng.randrange(100),
                    bar="#" * rng.randrange(10),
                    tok=rng.randrange(3000, 4000),
                    mfu=rng.random(),
                    mem=rng.random() * 80,
                )
                + "\n"
            ).encode()
        )
    return out


def generate(args) -> int:
    """Append lines to the files until --seconds are over; print a JSON summary on stdout."""
    rng = random.Random(args.seed)
    pool = healthy_lines(rng, 20000)
    d = Path(args.dir)
    paths = [d / f"slurm-{1000 + i}.out" for i in range(args.files)]
    fds = [os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) for p in paths]
    faults = open(args.faults_out, "w")
    tick = 1.0 / args.writes_per_s
    per_tick = args.rate * tick  # lines per tick over all files
    start = time.monotonic()
    end = start + args.seconds
    written = 0
    carry = 0.0
    cursor = 0
    next_fault = start + args.fault_every
    job = 500000
    k = 0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        carry += per_tick
        n = int(carry)
        carry -= n
        base, extra = divmod(n, len(fds))
        for idx, fd in enumerate(fds):
            m = base + (1 if idx < extra else 0)
            if not m:
                continue
            chunk = pool[cursor : cursor + m]
            if len(chunk) < m:
                cursor = 0
                chunk = pool[:m]
            cursor += m
            os.write(fd, b"".join(chunk))
        written += n
        if now >= next_fault:
            next_fault += args.fault_every
            job += 1
            i = rng.randrange(len(fds))
            os.write(
                fds[i],
                f"2026-11-29T17:00:01 [rank3]: RuntimeError: FAULT job={job} NCCL collective timed out\n".encode(),
            )
            faults.write(json.dumps({"job": str(job), "t": time.time()}) + "\n")
            faults.flush()
            written += 1
        k += 1
        sleep = start + k * tick - time.monotonic()
        if sleep > 0:
            time.sleep(sleep)
    for fd in fds:
        os.close(fd)
    faults.close()
    took = time.monotonic() - start
    print(json.dumps({"lines": written, "seconds": took, "rate": written / took}))
    return 0


# -- the bench -------------------------------------------------------------------------------------
def proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return None


def proc_rss(pid: int) -> float | None:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return None


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def bench(args) -> int:
    from engine.live import launch  # here: the generator (this script with --generate) needs none of it

    work = Path(args.dir or tempfile.mkdtemp(prefix="recover-bench-load-"))
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rules = work / "rules.yaml"
    rules.write_text(rulebook())
    db = work / "recover.db"
    faults = work / "faults.jsonl"
    for i in range(args.files):  # the files exist before the controller starts (it follows new ones too)
        (logs / f"slurm-{1000 + i}.out").touch()
    port = args.metrics_port
    cmd = launch.run_argv(db, rules=[rules], defaults=False, follow=[logs / "*.out"], poll=args.poll, metrics_port=port)
    ctl = launch.start(cmd, work / "controller.log", cwd=ROOT)
    gen = None
    samples: list[tuple[float, float, float]] = []
    seen: dict[str, float] = {}
    stop = threading.Event()

    def poll_store():
        while not db.exists() and not stop.is_set():
            time.sleep(0.05)
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        last = 0
        while not stop.is_set():
            try:
                rows = con.execute(
                    "SELECT id, job, detected_wall FROM incidents WHERE id > ? ORDER BY id", (last,)
                ).fetchall()
            except sqlite3.OperationalError:
                rows = []
            now = time.time()
            for i, job, _ in rows:
                seen.setdefault(job, now)
                last = max(last, i)
            time.sleep(args.probe)
        con.close()

    try:
        time.sleep(2.0)  # the first rescan has opened every file
        poller = threading.Thread(target=poll_store, daemon=True)
        poller.start()
        gcmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--generate",
            "--dir",
            str(logs),
            "--files",
            str(args.files),
            "--rate",
            str(args.rate),
            "--seconds",
            str(args.seconds),
            "--writes-per-s",
            str(args.writes_per_s),
            "--fault-every",
            str(args.fault_every),
            "--faults-out",
            str(faults),
            "--seed",
            str(args.seed),
        ]
        gen = subprocess.Popen(gcmd, stdout=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        cpu0 = proc_cpu(ctl.pid)
        warm_cpu = None
        while gen.poll() is None:
            time.sleep(1.0)
            el = time.monotonic() - t0
            c, r = proc_cpu(ctl.pid), proc_rss(ctl.pid)
            if c is None or ctl.poll() is not None:
                raise SystemExit("the controller died:\n" + (work / "controller.log").read_text()[-3000:])
            samples.append((el, c, r))
            if warm_cpu is None and el >= args.warmup:
                warm_cpu = (el, c)
            if args.verbose and int(el) % 10 == 0:
                print(f"  t={el:5.0f}s cpu={100 * (c - cpu0) / el:5.1f}% rss={r:6.1f} MB", flush=True)
        gen_out = json.loads(gen.stdout.read().strip().splitlines()[-1])
        t_gen_end = time.monotonic()
        # let the controller catch up, then read its counters
        text = ""
        lines_read = 0.0
        catch_deadline = time.monotonic() + args.drain
        while time.monotonic() < catch_deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
            lines_read = metric(text, "recover_lines_total")
            if lines_read >= gen_out["lines"]:
                break
            time.sleep(0.2)
        caught_up_after = time.monotonic() - t_gen_end
        time.sleep(max(0.0, 2 * args.probe))
        stop.set()
        poller.join(5)
    finally:
        stop.set()
        if gen is not None and gen.poll() is None:
            gen.kill()
        launch.stop(ctl)

    # figures
    end_el, end_cpu, end_rss = samples[-1]
    w_el, w_cpu = warm_cpu or (samples[0][0], samples[0][1])
    cpu_pct = 100 * (end_cpu - w_cpu) / max(1e-9, end_el - w_el)
    cpu_all = 100 * (end_cpu - cpu0) / end_el
    rss = [r for _, _, r in samples if r is not None]
    per_10s = []
    for a, b in zip(samples[::10], samples[10::10]):
        per_10s.append(100 * (b[1] - a[1]) / (b[0] - a[0]))
    lat, opened = [], []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        walls = dict(con.execute("SELECT job, MIN(detected_wall) FROM incidents GROUP BY job").fetchall())
    missing = []
    for line in faults.read_text().splitlines():
        f = json.loads(line)
        if f["job"] in seen:
            lat.append(seen[f["job"]] - f["t"])
            opened.append(walls[f["job"]] - f["t"])
        else:
            missing.append(f["job"])
    facts = metric(text, "recover_facts_total")
    size = sum(p.stat().st_size for p in logs.iterdir())
    print(
        f"load: {args.files} files, {gen_out['rate']:,.0f} lines/s written for {gen_out['seconds']:.0f} s "
        f"({gen_out['lines']:,} lines, {size / 2**20:,.0f} MB; {args.writes_per_s:g} writes/s per file), "
        f"{'poll ' + str(args.poll) + ' s' if args.poll else 'inotify'}; {os.cpu_count()} CPUs"
    )
    print(
        f"controller CPU: {cpu_pct:.1f}% of one core after {args.warmup:g} s warm-up ({cpu_all:.1f}% over the whole run; "
        f"per 10 s: min {min(per_10s, default=float('nan')):.0f}% max {max(per_10s, default=float('nan')):.0f}%)"
    )
    print(
        f"controller RSS: mean {statistics.fmean(rss):.1f} MB, max {max(rss):.1f} MB, at the end {end_rss:.1f} MB "
        f"(first sample {rss[0]:.1f} MB)"
    )
    print(
        f"lines read by the controller: {lines_read:,.0f} of {gen_out['lines']:,} written "
        f"({'caught up' if lines_read >= gen_out['lines'] else 'BEHIND'} {caught_up_after:.1f} s after the generator stopped); "
        f"facts {facts:,.0f}"
    )
    if lat:
        print(
            f"detection latency under load ({len(lat)} faults, store polled every {args.probe * 1000:g} ms): "
            f"p50 {percentile(lat, 0.5) * 1e3:.0f} ms, p90 {percentile(lat, 0.9) * 1e3:.0f} ms, "
            f"p99 {percentile(lat, 0.99) * 1e3:.0f} ms, max {max(lat) * 1e3:.0f} ms "
            f"(incident opened in memory: p50 {percentile(opened, 0.5) * 1e3:.0f} ms, p99 {percentile(opened, 0.99) * 1e3:.0f} ms)"
        )
    if missing:
        print(f"faults without an incident: {len(missing)} (e.g. {missing[:5]})")
    if not args.keep and not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    elif args.keep:
        print(f"kept {work}")
    return 0 if not missing and lines_read >= gen_out["lines"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--rate", type=int, default=50000, help="lines per second over all files")
    ap.add_argument("--seconds", type=float, default=600.0, help="how long the generator writes")
    ap.add_argument("--writes-per-s", type=float, default=10.0, help="appends per second to each file")
    ap.add_argument("--fault-every", type=float, default=1.0, help="one fault line this often (seconds)")
    ap.add_argument("--poll", type=float, default=None, help="run the controller with --poll SECONDS")
    ap.add_argument("--warmup", type=float, default=10.0, help="CPU is reported after this many seconds")
    ap.add_argument("--drain", type=float, default=60.0, help="wait this long at most for the controller to catch up")
    ap.add_argument("--probe", type=float, default=0.02, help="how often the store is polled (seconds)")
    ap.add_argument("--metrics-port", type=int, default=19187)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dir", help="work folder (default: a temporary one, removed afterwards)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--verbose", "-v", action="store_true")
    # generator mode
    ap.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--faults-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.generate:
        return generate(args)
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
