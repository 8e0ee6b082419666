"""Live flood (issue 12): while job A floods its log with a million NCCL error lines, how long does
a fatal Xid on another node take to reach the controller's store, and how large does the
controller grow? Prints figures, never pass/fail.

    python bench/bench_live_flood.py [--shape cascade|distinct --lines 1000000 --rate 200000 --xids 30 --every 0.3]

A real ``recover run --dry-run`` (default rulebook, no scheduler) follows ``logs/*.out`` and
the agents' spool. Job A's log (``slurm-1001.out``) gets ``--lines`` flood lines at ``--rate``
lines/s: ``cascade`` (the default), 512 ranks each printing one NCCL ``NET/IB`` warning per round,
as bench/gen_flood.py writes them; ``distinct``, every line a different Python exception
(bench/gen_flood.py's ``distinct_lines``, pre-generated), which no flood collapses. Meanwhile, every ``--every`` seconds,
a fatal Xid 79 is printed on another node: its kernel line goes through the node agent's own
line->fact code (``KernelLineFacts``, the rulebook's kernel matchers) and is appended to that
node's spool file as the agent does (``SpoolWriter``); each Xid is on a node of its own, so
each opens an incident. Latency: from the append to the spool until the Xid's fact is in the
store (read from here, read-only, every 10 ms). The agent's own tick (0.25 s, on node B's CPU,
not the controller's) is not part of it.

Reference measured in the same run: the same Xids with no flood (the controller idle).
Controller RSS: the peak (VmHWM) and the largest VmRSS sampled.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from _common import ROOT, cleanup, rss_of, setup
from gen_flood import distinct_lines

from engine.live import launch


def flood_block(ranks: int = 512) -> bytes:
    """One round of the cascade: every rank prints its NET/IB warning once."""
    out = []
    for rank in range(ranks):
        node, local = f"gpu{rank // 8:04d}", rank % 8
        pid = 20000 + rank * 7
        out.append(
            f"{node}:{pid}:{pid + 57 + local} [{local}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion "
            f"from peer 10.{rank % 7}.{rank // 250}.{(rank * 13) % 250}<{40000 + rank}> with "
            f"status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.{local}."
            f"{rank % 200}.7 remoteGids::ffff:10.3.{rank % 100}.7 hca mlx5_{local}\n"
        )
    return "".join(out).encode()


#: per flood shape: the matcher whose facts count its lines in the store
SHAPE_MATCHER = {"cascade": "nccl_ib_completion_error", "distinct": "python_exception_generic"}
BLOCK_LINES = 512


def flood_blocks(shape: str, lines: int) -> list[bytes]:
    """The flood's blocks of BLOCK_LINES lines, written in turn: the one cascade round again and
    again, or as many blocks of different exceptions as ``lines`` needs (made before the clock
    starts, so that generating them takes no CPU from the controller)."""
    if shape == "cascade":
        return [flood_block(BLOCK_LINES)]
    gen = distinct_lines(-(-lines // BLOCK_LINES) * BLOCK_LINES)
    return ["".join(next(gen) for _ in range(BLOCK_LINES)).encode() for _ in range(-(-lines // BLOCK_LINES))]


def write_flood(path: Path, blocks: list[bytes], lines: int, rate: float, done: threading.Event, stats: dict) -> None:
    t0 = time.monotonic()
    written = 0
    with open(path, "ab", buffering=0) as fh:
        while written < lines:
            block = blocks[(written // BLOCK_LINES) % len(blocks)]
            fh.write(block)
            written += block.count(b"\n")
            ahead = written / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        stats["flood_bytes"] = fh.tell()
    stats["flood_lines"] = written
    stats["flood_write_s"] = time.monotonic() - t0
    done.set()


class Store:
    def __init__(self, db: Path):
        self.db = db

    def _query(self, sql: str, *args: object) -> list:
        """The rows of a read-only query; none while the store cannot be read yet."""
        if not self.db.exists():
            return []
        try:
            con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=1)
            try:
                return con.execute(sql, args).fetchall()
            finally:
                con.close()
        except sqlite3.OperationalError:
            return []

    def xid_nodes(self) -> set[str]:
        return {json.loads(a).get("node") for (a,) in self._query("SELECT attrs FROM facts WHERE kind = 'xid'")}

    def flood_count(self, matcher: str) -> int:
        """Lines of ``matcher`` counted on the facts of incidents (a flood is one fact with a count)."""
        rows = self._query(
            "SELECT COALESCE(SUM(count), 0) FROM facts WHERE kind = 'log' AND attrs LIKE ?", f'%"matcher": "{matcher}"%'
        )
        return int(rows[0][0]) if rows else 0

    def committed_lines(self, path: Path) -> int:
        """Lines of ``path`` the controller has read and committed (its stored read position)."""
        rows = self._query("SELECT line_no FROM offsets WHERE source = ?", str(path))
        return int(rows[0][0]) if rows else 0


def xid_round(spool: Path, compiled, store: Store, prefix: str, n: int, every: float, watch=None) -> list[float]:
    """Print ``n`` Xids on nodes ``<prefix>000``..., one every ``every`` s; the latency of each."""
    from engine.sources.kmsg import KernelLineFacts
    from engine.sources.spool import SpoolWriter

    lat: list[float] = []
    for i in range(n):
        node = f"{prefix}{i:03d}"
        now = time.time()
        stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
        line = (
            f"{stamp} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
        )
        facts = KernelLineFacts(compiled, node, f"/var/log/kern-{node}.log").feed(line, now, f"kernel:{node}:1")
        assert facts and facts[0].kind == "xid", f"the agent's matchers did not read the Xid line: {facts}"
        writer = SpoolWriter(str(spool), node, fsync="never")
        t0 = time.monotonic()
        writer.write(facts)
        writer.close()
        while node not in store.xid_nodes():
            if time.monotonic() - t0 > 30:
                break
            if watch is not None:
                watch()
            time.sleep(0.01)
        lat.append(time.monotonic() - t0)
        rest = every - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)
    return lat


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def row(name: str, value: str, goal: str = "", ref: str = "") -> None:
    print(f"{name:52}{value:>30}   {('goal ' + goal) if goal else '':<24}{ref}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPE_MATCHER), default="cascade", help="what the flood's lines are")
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=200_000, help="flood lines per second")
    ap.add_argument("--xids", type=int, default=30)
    ap.add_argument("--every", type=float, default=0.3)
    args, compiled, tmp = setup(ap, "recover-live-flood-")
    (tmp / "logs").mkdir()
    (tmp / "spool").mkdir()
    db = tmp / "recover.db"
    store = Store(db)
    t_start = time.monotonic()
    argv = launch.run_argv(db, follow=[tmp / "logs" / "*.out"], spool=tmp / "spool", scheduler="none")
    proc = launch.start(argv, tmp / "controller.log", cwd=ROOT, timeout=60)
    peak_rss = [0]

    def watch() -> None:
        peak_rss[0] = max(peak_rss[0], rss_of(proc.pid)[0])

    try:
        print(
            f"controller up in {time.monotonic() - t_start:.2f} s (pid {proc.pid}); RSS idle {rss_of(proc.pid)[0] / 1024:.0f} MiB"
        )

        blocks = flood_blocks(args.shape, args.lines)
        matcher = SHAPE_MATCHER[args.shape]
        idle = xid_round(tmp / "spool", compiled, store, "idle", max(5, args.xids // 3), args.every, watch)

        log = tmp / "logs" / "slurm-1001.out"
        log.touch()
        time.sleep(1.5)  # the follower has picked the new file up
        done = threading.Event()
        fstats: dict = {}
        t_flood = time.monotonic()
        writer = threading.Thread(
            target=write_flood, args=(log, blocks, args.lines, args.rate, done, fstats), daemon=True
        )
        writer.start()
        flood = xid_round(tmp / "spool", compiled, store, "gpub", args.xids, args.every, watch)
        done.wait()
        t_written = time.monotonic() - t_flood
        # then until the controller has read and committed the whole flood
        while store.committed_lines(log) < fstats["flood_lines"]:
            watch()
            if time.monotonic() - t_flood > 600:
                break
            time.sleep(0.1)
        t_drained = time.monotonic() - t_flood
        committed, counted = store.committed_lines(log), store.flood_count(matcher)
        rss, hwm = rss_of(proc.pid)
        watch()

        mib = fstats["flood_bytes"] / 2**20
        print(
            f"flood ({args.shape}): {fstats['flood_lines']:,} lines ({mib:.0f} MiB) "
            f"written in {t_written:.1f} s; {committed:,} read and committed after {t_drained:.1f} s "
            f"({committed / t_drained:,.0f} lines/s); {counted:,} counted on incidents' {matcher} facts"
        )
        row(
            "live: Xid on node B while job A floods, p50",
            f"{pct(flood, 50):.3f} s",
            "",
            f"idle controller p50 {pct(idle, 50):.3f} s",
        )
        row(
            "live: Xid on node B while job A floods, p99",
            f"{pct(flood, 99):.3f} s",
            "p99 <= 1 s",
            f"idle p99 {pct(idle, 99):.3f} s, ratio {pct(flood, 99) / max(pct(idle, 99), 1e-3):.1f}x",
        )
        row("live: Xid on node B while job A floods, max", f"{max(flood):.3f} s ({len(flood)} Xids)")
        row(
            "live: controller RSS, peak (VmHWM)",
            f"{max(hwm, peak_rss[0]) / 1024:.0f} MiB",
            "<= 300 MiB",
            f"after the flood {rss / 1024:.0f} MiB",
        )
        row(
            "live: flood lines read and committed per second",
            f"{committed / t_drained:,.0f} lines/s",
            "",
            f"written at {args.rate:,.0f} lines/s",
        )
    finally:
        launch.stop(proc, timeout=15)
        cleanup(args, tmp)


if __name__ == "__main__":
    main()
