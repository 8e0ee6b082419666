"""The cost curve (issue 24, item 5): what one controller costs as the cluster grows. Prints
figures, never pass/fail.

    python bench/bench_cluster.py [--sizes 128:100,512:1000,2048:10000] [--quick] [--profile]

Per size (NODES:LOGS), one real controller: the ``Controller`` class (the code ``recover run``
runs: follower, spool reader, scheduler poll on its worker thread, engine, store) in a child
process of its own, so that its CPU time, RSS and descriptors are its own; this process plays the
cluster around it. The scheduler is the **simulated** adapter (``scheduler_adapters.simulated``,
not Slurm), holding NODES nodes of 8 GPUs and LOGS running jobs of 2 nodes each (so jobs share
nodes at the larger sizes), each job's stdout a file the controller follows because the
scheduler names it. Each node has an agent's spool file, written with the agent's own writer
(``engine.sources.spool_writer.SpoolWriter``).

Phases, per size:

1. warm-up: the controller starts, its first scheduler answer names every log, it follows them;
2. idle (the reference of that size): nothing is written for ``--idle`` s;
3. steady: every log gets a Megatron progress line every ``--period`` s (staggered), and every
   node's agent writes a fact every ``--spool-period`` s (a GPU state change back to ``ok``,
   which opens nothing);
4. cascade: a leaf switch fails: the first ``--cascade`` jobs (200; no more than there are
   logs) each print 8 NCCL ``NET/IB ... IBV_WC_RETRY_EXC_ERR`` lines at once. Time: from the
   first of those lines written to the last of their incidents opened (the store's
   ``detected_wall``, the controller's clock when it opened it).

Figures: steady CPU share (process CPU time / wall over the steady window, one core = 100 %), the
idle share of the same size, RSS (now and peak), open descriptors (largest seen, and the
process's limit), the scheduler poll's cost on the loop (ingesting one snapshot: facts of what
changed, every running job's log handed to the follower) and on the worker thread (the adapter's
``jobs()`` + ``nodes()``), and the cascade time. References measured in the same run: each
size's idle controller, and the first (smallest) size. ``--profile``: cProfile of the largest
size's controller loop (steady and cascade phases), its top functions printed.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from _common import ROOT, rss_of

TICKS = os.sysconf("SC_CLK_TCK")
GOAL_CPU, GOAL_RSS_MIB, GOAL_CASCADE_S = 25.0, 1024, 30.0
RANKS_PER_JOB = 8  # lines each cascade job prints


def node_name(i: int) -> str:
    return f"gpu{i:05d}"


def job_id(i: int) -> str:
    return str(100000 + i)


def job_nodes(i: int, nodes: int) -> list[str]:
    return [node_name(i % nodes), node_name((i + 1) % nodes)]


def progress_line(it: int) -> bytes:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return (
        f"[{stamp}] [INFO] [rank0]: iteration {it:8d}/  100000 | consumed samples: {it * 512:12d} | "
        f"elapsed time per iteration (ms): 4012.5 | learning rate: 1.500E-04 | global batch size:   512 | "
        f"lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.812 | number of skipped iterations:   0 | "
        f"number of nan iterations:   0 |\n"
    ).encode()


def cascade_lines(i: int, nodes: int) -> bytes:
    """What one job of the failed switch prints: each of its ranks' NET/IB completion error."""
    out = []
    for rank in range(RANKS_PER_JOB):
        node = job_nodes(i, nodes)[rank * 2 // RANKS_PER_JOB]
        pid = 70000 + rank
        out.append(
            f"{node}:{pid}:{pid + 700} [{rank % 4}] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion "
            f"from peer 10.20.{i % 250}.{rank}<40000> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(1) "
            f"reqSize=524288 vendor_err=129 req_type=Send localGid ::ffff:10.20.0.1 remoteGids::ffff:10.20.0.3 "
            f"hca mlx5_{rank % 4}\n"
        )
    return "".join(out).encode()


# -- the controller's side (the child process) ---------------------------------------------------


def child(cfg_path: str) -> None:
    """Run one controller over the simulated cluster that ``cfg_path`` describes; write its own
    figures (the scheduler poll's cost, what the follower holds) to ``stats`` every second."""
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    cfg = json.loads(Path(cfg_path).read_text())
    from scheduler_adapters.simulated import SimJob, SimulatedCluster

    from engine.live.controller import Controller, ControllerConfig
    from engine.rulebook import require_rulebook

    class PlacedCluster(SimulatedCluster):
        """The simulation with jobs placed by hand: several jobs may share a node."""

        def place(self, jid: str, nodes: list[str], stdout: str) -> None:
            self._jobs[jid] = SimJob(
                jid, f"train-{jid}", len(nodes), state="RUNNING", nodes=tuple(nodes), stdout=stdout
            )
            for n in nodes:
                self._nodes[n]["state"] = "allocated"

    if cfg.get("max_open"):  # a diagnostic: the follower's open-file budget (by default half the limit)
        import engine.sources.openfiles as openfiles

        openfiles.MAX_OPEN = cfg["max_open"]
    nodes = cfg["nodes"]
    cluster = PlacedCluster([node_name(i) for i in range(nodes)], gpus=8)
    for i in range(cfg["logs"]):
        cluster.place(job_id(i), job_nodes(i, nodes), os.path.join(cfg["logs_dir"], f"slurm-{job_id(i)}.out"))

    stats: dict[str, Any] = {
        "snap_polls": 0,
        "snap_s": 0.0,
        "snap_max": 0.0,
        "snap_first": 0.0,
        "adapter_calls": 0,
        "adapter_s": 0.0,
    }
    lock = threading.Lock()
    gc_t0: list[float] = [0.0]

    def gc_timed(phase: str, info: dict) -> None:  # the collector's time, per generation
        if phase == "start":
            gc_t0[0] = time.perf_counter()
        else:
            key = f"gc{info['generation']}"
            stats[key] = stats.get(key, 0.0) + time.perf_counter() - gc_t0[0]

    gc.callbacks.append(gc_timed)
    for name in ("jobs", "nodes"):  # the worker thread's question: the adapter's two calls
        orig = getattr(cluster, name)

        def timed(orig=orig):
            t0 = time.perf_counter()
            try:
                return orig()
            finally:
                with lock:
                    stats["adapter_calls"] += 1
                    stats["adapter_s"] += time.perf_counter() - t0

        setattr(cluster, name, timed)

    ctl = Controller(
        ControllerConfig(
            db=cfg["db"],
            spool=cfg["spool_dir"],
            scheduler="simulated",
            adapter=cluster,
            dry_run=True,
            scheduler_interval=cfg["interval"],
        ),
        require_rulebook(),
    )
    sched = ctl.sched
    assert sched is not None
    take, poll = sched._take, sched.poll
    got: list[bool] = [False]

    def take_timed(now: float):
        r = take(now)
        got[0] = r is not None
        return r

    def poll_timed(now: float, engine) -> None:  # on the loop: one snapshot ingested
        got[0] = False
        t0 = time.perf_counter()
        poll(now, engine)
        dt = time.perf_counter() - t0
        if got[0]:
            with lock:
                if not stats["snap_polls"]:  # the first: every log is new to the follower
                    stats["snap_first"] = dt
                else:
                    stats["snap_max"] = max(stats["snap_max"], dt)
                stats["snap_polls"] += 1
                stats["snap_s"] += dt

    sched._take, sched.poll = take_timed, poll_timed  # type: ignore[method-assign]

    def report() -> None:
        while True:
            with lock:
                out = dict(stats)
            out["followed"] = len(ctl.follower.files)
            out["open_files"] = sum(1 for t in list(ctl.follower.files.values()) if t.fh is not None)
            out["lru_closed"] = ctl.follower.stats["lru_closed"]
            out["emfile"] = ctl.follower.stats["emfile"]
            # which thread is which, for the parent's CPU share per thread (/proc/PID/task)
            out["threads"] = {str(t.native_id): _thread_kind(t) for t in threading.enumerate()}
            tmp = cfg["stats"] + ".tmp"
            Path(tmp).write_text(json.dumps(out))
            os.replace(tmp, cfg["stats"])
            time.sleep(1.0)

    threading.Thread(target=report, daemon=True).start()
    prof = cProfile.Profile() if cfg.get("profile") else None
    if prof is not None:
        signal.signal(signal.SIGUSR1, lambda *_: prof.enable())  # the parent says when steady begins
    try:
        ctl.run()
    finally:
        if prof is not None:
            prof.disable()
            with open(cfg["profile"], "w") as fh:
                pstats.Stats(prof, stream=fh).sort_stats("tottime").print_stats(45)
                pstats.Stats(prof, stream=fh).sort_stats("cumulative").print_stats(45)


# -- the cluster's side (this process) -----------------------------------------------------------


def _thread_kind(t: threading.Thread) -> str:
    """A thread's part in the controller: the loop (main), the scheduler poll's worker, the
    inotify watcher's threads (watchdog's emitter and dispatcher), the bench's own reporter."""
    if t is threading.main_thread():
        return "loop"
    kind = type(t).__name__
    if kind == "Thread":
        return "report" if getattr(t, "_target", None) is not None and "report" in repr(t._target) else t.name  # type: ignore[attr-defined]
    return kind


def task_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of each thread of ``pid``, by its native id."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            out[tid] = cpu_s(pid, tid)
        except (OSError, IndexError, ValueError):
            pass
    return out


def cpu_s(pid: int, tid: str | None = None) -> float:
    with open(f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def fd_limit(pid: int) -> str:
    with open(f"/proc/{pid}/limits") as fh:
        for line in fh:
            if line.startswith("Max open files"):
                return line.split()[3]
    return "?"


class Watch:
    """The controller seen from outside: CPU over a window, largest RSS and descriptor count."""

    def __init__(self, pid: int):
        self.pid, self.max_fds, self.max_rss = pid, 0, 0
        self.per_thread: dict[str, float] = {}  # the last window's share per thread (native id)

    def sample(self) -> None:
        self.max_fds = max(self.max_fds, fds(self.pid))
        self.max_rss = max(self.max_rss, rss_of(self.pid)[0])

    def window(self, seconds: float, during=None) -> float:
        """CPU share (%) over ``seconds`` of wall time, sampling every 0.5 s; ``during`` is called
        as often (the writers' turn)."""
        c0, t0, k0 = cpu_s(self.pid), time.monotonic(), task_cpu(self.pid)
        while time.monotonic() - t0 < seconds:
            if during is not None:
                during()
            self.sample()
            time.sleep(0.05 if during is not None else 0.5)
        wall = time.monotonic() - t0
        k1 = task_cpu(self.pid)
        self.per_thread = {tid: 100.0 * (c - k0.get(tid, 0.0)) / wall for tid, c in k1.items()}
        return 100.0 * (cpu_s(self.pid) - c0) / wall


class Writers:
    """Progress lines to every log, a fact now and then to every node's spool: staggered, at
    their rates, whenever ``turn()`` is called."""

    def __init__(self, logs: list[Path], spool_dir: Path, nodes: int, period: float, spool_period: float):
        from engine.sources.spool_writer import SpoolWriter

        self.fhs = [open(p, "ab", buffering=0) for p in logs]
        self.spools = [SpoolWriter(str(spool_dir), node_name(i), fsync="never") for i in range(nodes)]
        self.period, self.spool_period = period, spool_period
        self.t0 = time.monotonic()
        self.lines = self.facts = 0

    def turn(self) -> None:
        from engine.facts import Fact

        elapsed = time.monotonic() - self.t0
        due = int(elapsed / self.period * len(self.fhs))
        while self.lines < due:
            i = self.lines % len(self.fhs)
            self.fhs[i].write(progress_line(self.lines // len(self.fhs) + 1))
            self.lines += 1
        due = int(elapsed / self.spool_period * len(self.spools))
        while self.facts < due:
            i = self.facts % len(self.spools)
            w = self.spools[i]
            attrs = {"node": w.node, "gpu": 0, "state": "ok", "severity": "ok"}
            w.write([Fact.make("gpu_state", attrs, time.time(), f"nvml:{w.node}:gpu0:ok")])
            self.facts += 1

    def close(self) -> None:
        for fh in self.fhs:
            fh.close()
        for w in self.spools:
            w.close()


def opened(db: Path, jobs: list[str]) -> dict[str, float]:
    """job -> when its first incident opened (wall), for the jobs that have one."""
    if not db.exists():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            rows = con.execute("SELECT job, MIN(detected_wall) FROM incidents GROUP BY job").fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError:
        return {}
    want = set(jobs)
    return {j: w for j, w in rows if j in want}


def run_size(nodes: int, logs: int, args: argparse.Namespace, profile: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"recover-cluster-{nodes}-"))
    (tmp / "logs").mkdir()
    (tmp / "spool").mkdir()
    log_paths = [tmp / "logs" / f"slurm-{job_id(i)}.out" for i in range(logs)]
    for p in log_paths:
        p.write_bytes(b"[2026-12-06 00:00:00] starting training\n")
    cfg = {
        "nodes": nodes,
        "logs": logs,
        "logs_dir": str(tmp / "logs"),
        "spool_dir": str(tmp / "spool"),
        "db": str(tmp / "recover.db"),
        "stats": str(tmp / "stats.json"),
        "interval": args.interval,
        "profile": str(tmp / "profile.txt") if profile else None,
        "max_open": args.max_open,
    }
    (tmp / "cfg.json").write_text(json.dumps(cfg))
    writers = Writers(log_paths, tmp / "spool", nodes, args.period, args.spool_period)  # spool files exist first
    from engine.live import launch

    t_start = time.monotonic()
    proc = launch.start(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(tmp / "cfg.json")],
        tmp / "controller.log",
        cwd=ROOT,
        timeout=300,
    )
    out: dict[str, Any] = {"nodes": nodes, "logs": logs}
    watch = Watch(proc.pid)
    try:

        def stats() -> dict:
            try:
                return json.loads(Path(cfg["stats"]).read_text())
            except (OSError, ValueError):
                return {}

        while stats().get("followed", 0) < logs or stats().get("snap_polls", 0) < 1:
            if time.monotonic() - t_start > 300 or proc.poll() is not None:
                raise SystemExit(
                    f"the controller did not follow every log:\n{(tmp / 'controller.log').read_text()[-3000:]}"
                )
            time.sleep(0.2)
        out["ready_s"] = time.monotonic() - t_start
        time.sleep(args.settle)
        out["idle_cpu"] = watch.window(args.idle)
        if profile:
            proc.send_signal(signal.SIGUSR1)
        writers.t0 = time.monotonic()
        writers.turn()
        s0 = stats()
        time.sleep(0.01)
        out["steady_cpu"] = watch.window(args.steady, writers.turn)
        s1 = stats()
        kinds = s1.get("threads", {})
        by_kind: dict[str, float] = {}
        for tid, share in watch.per_thread.items():
            kind = kinds.get(tid, "other")
            by_kind[kind] = by_kind.get(kind, 0.0) + share
        out["steady_threads"] = by_kind
        out["steady_gc"] = {g: s1.get(g, 0.0) - s0.get(g, 0.0) for g in ("gc0", "gc1", "gc2")}
        out["lines"], out["spool_facts"] = writers.lines, writers.facts
        out["rss"], _ = rss_of(proc.pid)
        out["fds"] = fds(proc.pid)
        out["open_files"] = s1.get("open_files", 0)
        out["lru_closed"] = s1.get("lru_closed", 0) - s0.get("lru_closed", 0)
        polls = s1["snap_polls"] - s0["snap_polls"]
        out["poll_ms"] = 1000 * (s1["snap_s"] - s0["snap_s"]) / max(1, polls)
        out["poll_max_ms"] = 1000 * s1["snap_max"]  # the largest after the first
        out["poll_first_ms"] = 1000 * s1["snap_first"]
        out["polls"] = polls
        calls = s1["adapter_calls"] - s0["adapter_calls"]
        out["adapter_ms"] = 2000 * (s1["adapter_s"] - s0["adapter_s"]) / max(1, calls)  # jobs()+nodes()

        # the cascade: a leaf switch fails, its jobs print their NCCL errors at once
        n = min(args.cascade, logs)
        jobs = [job_id(i) for i in range(n)]
        before = opened(Path(cfg["db"]), jobs)
        t_first = time.time()
        for i in range(n):
            writers.fhs[i].write(cascade_lines(i, nodes))
        t_written = time.time() - t_first
        deadline = time.monotonic() + args.cascade_wait
        got: dict[str, float] = {}
        while time.monotonic() < deadline:
            writers.turn()  # the steady traffic goes on
            watch.sample()
            got = {j: w for j, w in opened(Path(cfg["db"]), jobs).items() if j not in before}
            if len(got) == n:
                break
            time.sleep(0.2)
        out["cascade_jobs"], out["cascade_opened"] = n, len(got)
        out["cascade_s"] = (max(got.values()) - t_first) if got else float("nan")
        out["cascade_first_s"] = (min(got.values()) - t_first) if got else float("nan")
        out["cascade_write_s"] = t_written
        watch.sample()
        out["max_rss"] = max(watch.max_rss, rss_of(proc.pid)[1])
        out["max_fds"] = watch.max_fds
        out["fd_limit"] = fd_limit(proc.pid)
        out["emfile"] = stats().get("emfile", 0)
    finally:
        launch.stop(proc, timeout=30)
        writers.close()
    if profile and Path(cfg["profile"]).exists():
        out["profile"] = Path(cfg["profile"]).read_text()
    if args.keep:
        print(f"kept {tmp}")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return out


def report(rows: list[dict[str, Any]]) -> None:
    ref = rows[0]
    top = rows[-1]
    print()
    print(
        f"{'nodes':>6} {'logs':>6} | {'CPU steady':>10} {'idle':>6} {'x ref':>6} | {'RSS MiB':>7} {'peak':>5} | "
        f"{'fds':>5} {'peak':>5} {'limit':>6} | {'poll ms':>8} {'max':>6} {'adapter':>8} | {'cascade s':>9} {'opened':>8}"
    )
    for r in rows:
        print(
            f"{r['nodes']:>6} {r['logs']:>6} | {r['steady_cpu']:>9.1f}% {r['idle_cpu']:>5.1f}% "
            f"{r['steady_cpu'] / max(ref['steady_cpu'], 0.1):>5.1f}x | {r['rss'] / 1024:>7.0f} {r['max_rss'] / 1024:>5.0f} | "
            f"{r['fds']:>5} {r['max_fds']:>5} {r['fd_limit']:>6} | {r['poll_ms']:>8.1f} {r['poll_max_ms']:>6.0f} "
            f"{r['adapter_ms']:>7.1f} | {r['cascade_s']:>9.2f} {r['cascade_opened']:>4}/{r['cascade_jobs']:<3}"
        )
    print()
    print(f"reference: the first size ({ref['nodes']} nodes, {ref['logs']} logs), and each size's idle controller")
    for r in rows:
        print(
            f"  {r['nodes']} nodes / {r['logs']} logs: ready in {r['ready_s']:.1f} s; steady traffic "
            f"{r['lines']:,} progress lines and {r['spool_facts']:,} spool facts; {r['polls']} snapshots ingested (the first, every log new, "
            f"{r['poll_first_ms']:.0f} ms); "
            f"{r['open_files']} logs open at once ({r['lru_closed']:,} closed for room while steady, "
            f"{r['emfile']} opens refused for want of descriptors); first cascade incident after {r['cascade_first_s']:.2f} s "
            f"(its lines written in {r['cascade_write_s']:.3f} s)"
        )
    print()

    def goal(name: str, value: str, ok: bool, want: str) -> None:
        print(f"  {name:38}{value:>16}   goal {want:<14} {'reached' if ok else 'NOT reached'}")

    print(
        f"goals, at the largest size measured ({top['nodes']} nodes, {top['logs']} logs; the issue's is 2,048 / 10,000):"
    )
    goal(
        "steady CPU share of one core",
        f"{top['steady_cpu']:.1f} %",
        top["steady_cpu"] <= GOAL_CPU,
        f"<= {GOAL_CPU:.0f} %",
    )
    goal("RSS, peak", f"{top['max_rss'] / 1024:.0f} MiB", top["max_rss"] / 1024 <= GOAL_RSS_MIB, "<= 1 GB")
    ok = top["cascade_opened"] == top["cascade_jobs"] and top["cascade_s"] <= GOAL_CASCADE_S
    goal(
        "cascade: last incident opened",
        f"{top['cascade_s']:.2f} s ({top['cascade_opened']}/{top['cascade_jobs']})",
        ok,
        f"<= {GOAL_CASCADE_S:.0f} s, all",
    )
    limit = int(top["fd_limit"]) if str(top["fd_limit"]).isdigit() else 1 << 30
    goal(
        "open descriptors, peak",
        f"{top['max_fds']} of {top['fd_limit']}",
        top["max_fds"] < limit and not top["emfile"],
        "no exhaustion",
    )


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", default="128:100,512:1000,2048:10000", help="NODES:LOGS,... (the first is the reference)"
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run: small sizes, short phases")
    ap.add_argument("--period", type=float, default=4.0, help="seconds between progress lines of one log")
    ap.add_argument("--spool-period", type=float, default=60.0, help="seconds between facts of one node's agent")
    ap.add_argument(
        "--interval", type=float, default=5.0, help="seconds between scheduler polls (recover run's default)"
    )
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of the idle window")
    ap.add_argument("--steady", type=float, default=30.0, help="seconds of the steady window")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds after the warm-up before measuring")
    ap.add_argument("--cascade", type=int, default=200, help="jobs behind the failed leaf switch")
    ap.add_argument("--cascade-wait", type=float, default=90.0, help="give up on the cascade after this")
    ap.add_argument("--profile", action="store_true", help="cProfile the largest size's controller")
    ap.add_argument(
        "--max-open",
        type=int,
        default=0,
        help="a diagnostic: the follower keeps at most this many logs open (shipped: half the limit)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the work folders")
    args = ap.parse_args()
    if args.quick:
        if args.sizes == ap.get_default("sizes"):
            args.sizes = "16:10,32:40"
        args.idle, args.steady, args.settle, args.period, args.interval = 1.0, 2.0, 0.5, 1.0, 1.0
        args.cascade, args.cascade_wait = min(args.cascade, 20), 30.0
    sizes = [tuple(int(x) for x in s.split(":")) for s in args.sizes.split(",")]
    print(
        f"sizes {args.sizes}: a progress line per log every {args.period:g} s, a spool fact per node every "
        f"{args.spool_period:g} s, scheduler polled every {args.interval:g} s; idle {args.idle:g} s, "
        f"steady {args.steady:g} s, cascade of {args.cascade} jobs x {RANKS_PER_JOB} lines (simulated cluster)"
    )
    rows = []
    for i, (nodes, logs) in enumerate(sizes):
        t0 = time.monotonic()
        r = run_size(nodes, logs, args, profile=args.profile and i == len(sizes) - 1)
        rows.append(r)
        print(
            f"{nodes} nodes, {logs} logs: steady CPU {r['steady_cpu']:.1f} % (idle {r['idle_cpu']:.1f} %), "
            f"RSS {r['rss'] / 1024:.0f} MiB, fds {r['max_fds']}, poll {r['poll_ms']:.1f} ms, cascade {r['cascade_s']:.2f} s "
            f"({r['cascade_opened']}/{r['cascade_jobs']}); {time.monotonic() - t0:.0f} s",
            flush=True,
        )
        print(
            "  steady CPU by thread: "
            + ", ".join(f"{k} {v:.1f} %" for k, v in sorted(r["steady_threads"].items(), key=lambda kv: -kv[1]))
            + "; garbage collection "
            + ", ".join(f"{k} {v:.2f} s" for k, v in r["steady_gc"].items()),
            flush=True,
        )
        if "profile" in r:
            print(
                f"\nprofile of the controller loop at {nodes} nodes / {logs} logs (steady + cascade):\n{r['profile']}"
            )
    report(rows)


if __name__ == "__main__":
    main()
