"""What a takeover costs the new leader, with a warm follower and with a cold one (issue 22).

Two ``Controller`` in this process share one SQLite store over the simulated cluster, with N
running jobs whose logs they follow. The leader reads every log; the follower either runs its
warm standby passes (``live.standby``) or, as before warm followers, only looks at the lease.
Lines are then written to every log and the leader dies without reading them (its lease given
up, so that detection costs nothing here: on one host a killed holder is seen at once). Timed:
from the follower's takeover to the moment it, as leader, has committed every log to its end.

    .venv/bin/python bench/bench_takeover.py --jobs 2000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.live.controller import Controller, ControllerConfig
from engine.rulebook import require_rulebook
from scheduler_adapters.simulated import SimJob, SimulatedCluster

LINE = "2026-11-29T17:00:00 [rank0]: iteration {i}/100000 | loss 2.31 | elapsed time per iteration (ms): 812.4\n"


class Placed(SimulatedCluster):
    def place(self, jid: str, node: str, stdout: str) -> None:
        self._jobs[jid] = SimJob(jid, f"train-{jid}", 1, state="RUNNING", nodes=(node,), stdout=stdout)
        self._nodes[node]["state"] = "allocated"


def committed_all(ctl: Controller, logs: list[Path]) -> bool:
    offsets = ctl.store.offsets()
    return all(offsets.get(str(p), (None, -1, 0))[1] == p.stat().st_size for p in logs)


def one(jobs: int, warm: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-takeover-"))
    nodes = [f"n{i:04d}" for i in range(jobs)]
    cluster = Placed(nodes, gpus=8)
    logs = []
    for i, n in enumerate(nodes):
        p = tmp / f"slurm-{1000 + i}.out"
        p.write_text("".join(LINE.format(i=k) for k in range(20)))
        cluster.place(str(1000 + i), n, str(p))
        logs.append(p)
    compiled = require_rulebook()

    def make() -> Controller:
        cfg = ControllerConfig(
            db=str(tmp / "r.db"), scheduler="simulated", adapter=cluster, dry_run=True, scheduler_interval=0.5
        )
        cfg.lease_s = 30.0
        return Controller(cfg, compiled)

    a, b = make(), make()
    if not warm:  # before warm followers: a follower only looked at the lease
        b.standby.step = lambda: None  # type: ignore[method-assign]
    a.startup()
    b.startup()
    deadline = time.monotonic() + 120
    while not committed_all(a, logs) and time.monotonic() < deadline:
        a.step()
        b.step()
    for _ in range(5):  # the follower catches up (warm), or idles (cold)
        b.step()
    for p in logs:  # written while the leader dies: read by nobody yet
        with open(p, "a") as fh:
            fh.write("".join(LINE.format(i=k) for k in range(20, 25)))
    a.leader.release()
    a.follower.stop()
    b.leader._next_renew = 0.0  # its next look at the lease is now (detection is not what is timed)
    t0 = time.perf_counter()
    b.step()  # takes over
    assert b.leader.acting()
    first = time.perf_counter() - t0
    while not committed_all(b, logs):
        b.step()
    done = time.perf_counter() - t0
    b.follower.stop()
    b.leader.release()
    for c in (a, b):
        c.store.close()
    return {"warm": warm, "jobs": jobs, "first_step_s": round(first, 3), "all_committed_s": round(done, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000)
    args = ap.parse_args()
    os.environ.setdefault("RECOVER_CACHE_DIR", tempfile.mkdtemp(prefix="bench-cache-"))
    for warm in (False, True):
        print(one(args.jobs, warm), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
