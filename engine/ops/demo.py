"""``recover demo``: the real controller and node agents, in monitor mode, against a SIMULATED
cluster (``scheduler_adapters/simulated.py``: not Slurm) with fake GPUs (``fake_nvml``: not NVML).

A handful of training jobs print progress into their logs; failures drawn (seeded) from the
published failure mix in ``shared/reference/failure-mix.csv`` (a copy of its counts is embedded
below, so the demo runs anywhere) are injected as the lines real clusters print — NCCL and CUDA
errors in job logs, NVRM Xid lines in a node's kernel log, a GPU counter bumped in the fake NVML,
a node killed in the simulation. The controller follows the logs, reads the agents' spool and
polls the simulated scheduler, exactly as ``recover run --dry-run`` does; only the rulebook's
``settle`` is shortened (layered over the defaults) so that the demo ends in seconds.
"""

from __future__ import annotations

import logging
import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine.clock import SYSTEM, Clock

logger = logging.getLogger(__name__)

__all__ = ["run_demo", "FAILURE_MIX", "DemoResult"]

#: component -> count, from failure-mix.csv (419 interruptions of a 54-day, 16k-GPU run)
FAILURE_MIX = {
    "faulty_gpu": 148,
    "gpu_hbm3_memory": 72,
    "software_bug": 54,
    "network_switch_cable": 35,
    "host_maintenance_unplanned": 32,
    "gpu_sram_memory": 19,
    "gpu_system_processor": 17,
    "nic": 7,
    "nccl_watchdog_timeout": 7,
    "silent_data_corruption": 6,
    "gpu_thermal": 6,
    "ssd": 3,
    "power_supply": 3,
    "server_chassis": 2,
    "io_expansion_board": 2,
    "dependency": 2,
    "cpu": 2,
    "system_memory": 2,
}
SITE_OVERLAY = """# recover demo: the defaults, with incidents settling in seconds instead of minutes
policy:
  settle: 4s
  cascade: 1m
"""
NODES = [f"gpu-{i:02d}" for i in range(1, 9)]


@dataclass
class DemoResult:
    db: str
    injected: list[tuple[str, str, str]]  # (component, job, node)
    incidents: list
    seconds: float
    #: the measured goodput report of the demo's store (engine.ops.goodput), one GPU per node
    goodput: dict = field(default_factory=dict)


def _stamp(clock: Clock) -> str:
    now = clock.wall()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def _syslog(node: str, clock: Clock) -> str:
    return time.strftime("%b %d %H:%M:%S", time.gmtime(clock.wall())) + f" {node} kernel:"


class _World:
    def __init__(self, root: Path, sim, nvml: dict, clock: Clock):
        self.root, self.sim, self.nvml, self.clock = root, sim, nvml, clock
        self.lock = threading.Lock()

    def job_log(self, job: str, *lines: str) -> None:
        with self.lock, open(self.root / "logs" / f"slurm-{job}.out", "a") as fh:
            for line in lines:
                fh.write(line + "\n")

    def kernel(self, node: str, *lines: str) -> None:
        with self.lock, open(self.root / f"kern-{node}.log", "a") as fh:
            for line in lines:
                fh.write(f"{_syslog(node, self.clock)} {line}\n")


def _nccl_timeout(w: _World, job: str, node: str, rank: int = 0) -> None:
    w.job_log(
        job,
        f"[rank{rank}]:[E{time.strftime('%m%d %H:%M:%S', time.gmtime(w.clock.wall()))}.000000000 ProcessGroupNCCL.cpp:616] "
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4412, OpType=ALLREDUCE, "
        f"NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600083 milliseconds before timing out.",
    )


# each scenario prints what that failure looks like on a real cluster
def _faulty_gpu(w, job, node):
    w.kernel(node, "NVRM: Xid (PCI:0000:3b:00): 79, pid=70011, name=pt_main_thread, GPU has fallen off the bus.")
    w.clock.sleep(0.5)
    for rank in range(4):
        _nccl_timeout(w, job, node, rank)


def _hbm(w, job, node):
    w.nvml[node].gpus[0].bump("ecc_uncorrected_volatile", 2)
    w.kernel(
        node,
        "NVRM: Xid (PCI:0000:3b:00): 48, pid=70011, name=pt_main_thread, An uncorrectable double bit error "
        "(DBE) has been detected on GPU in the framebuffer at physAddr 0x7fdf0de80 partition 5, subpartition 1",
    )
    w.job_log(job, f"{_stamp(w.clock)} [rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered")


def _sram(w, job, node):
    w.kernel(
        node,
        "NVRM: Xid (PCI:0000:3b:00): 48, pid=70011, name=pt_main_thread, An uncorrectable double bit error "
        "(DBE) has been detected on GPU in SRAM",
    )


def _gsp(w, job, node):
    w.kernel(
        node,
        "NVRM: Xid (PCI:0000:3b:00): 119, pid=2024380, name=pt_main_thread, Timeout after 6s of waiting for "
        "RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
    )


def _software_bug(w, job, node):
    w.job_log(
        job,
        f"{_stamp(w.clock)} [rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/workspace/train.py", line 212, in <module>',
        "[rank0]:     main(cfg)",
        "[rank0]: KeyError: 'lr_schedule'",
    )
    w.sim.fail(job)


def _network(w, job, node):
    for rank in range(3):
        w.job_log(
            job,
            f"{node}:4242:4299 [{rank}] transport/net_ib.cc:1687 NCCL WARN NET/IB : Got completion from peer "
            f"10.1.2.3<45678> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.1.2.4",
        )


def _node_down(w, job, node):
    w.sim.kill_node(node)


def _nccl_watchdog(w, job, node):
    """An attributed timeout: four ranks on the job's node, one of which stopped (it prints
    nothing more); its peers time out on the collective it never joined. Attribution names it,
    and the restart excludes its node (policy.suspects)."""
    w.job_log(
        job,
        *(
            f"{node}:{5100 + r}:{5190 + r} [{r}] NCCL INFO comm 0x55d4a{r} rank {r} nranks 4 cudaDev {r} "
            f"nvmlDev {r} busId {18 + r}000 commId 0x5ae77eb5 - Init COMPLETE"
            for r in range(4)
        ),
    )
    for rank in (0, 1, 2):
        _nccl_timeout(w, job, node, rank)


def _nan(w, job, node):
    w.job_log(job, f"{_stamp(w.clock)} [rank0]: ValueError: NaN or Inf found in input tensor.")
    w.sim.fail(job)


def _thermal(w, job, node):
    w.nvml[node].gpus[0].clocks_event_reasons |= 0x40  # HW thermal slowdown
    _nccl_timeout(w, job, node)


def _ssd(w, job, node):
    w.job_log(
        job,
        f"{_stamp(w.clock)} [rank0]: OSError: [Errno 5] Input/output error: '/checkpoints/run7/iter_0004000/model.pt'",
    )


SCENARIOS: dict[str, Callable] = {
    "faulty_gpu": _faulty_gpu,
    "gpu_hbm3_memory": _hbm,
    "software_bug": _software_bug,
    "network_switch_cable": _network,
    "host_maintenance_unplanned": _node_down,
    "gpu_sram_memory": _sram,
    "gpu_system_processor": _gsp,
    "nic": _network,
    "nccl_watchdog_timeout": _nccl_watchdog,
    "silent_data_corruption": _nan,
    "gpu_thermal": _thermal,
    "ssd": _ssd,
    "power_supply": _node_down,
    "server_chassis": _node_down,
    "io_expansion_board": _faulty_gpu,
    "dependency": _software_bug,
    "cpu": _node_down,
    "system_memory": _node_down,
}


def run_demo(
    db: str, jobs: int = 6, seed: int = 7, timeout: float = 50.0, keep: str | None = None, clock: Clock = SYSTEM
) -> DemoResult:
    from scheduler_adapters.registry import get_adapter

    from engine.live.agent import run_agent
    from engine.live.controller import Controller, ControllerConfig
    from engine.rulebook import require_rulebook
    from engine.sources.fake_nvml import FakeGpu, FakeNvml

    t_start = clock.monotonic()
    root = Path(keep or tempfile.mkdtemp(prefix="recover-demo-"))
    (root / "logs").mkdir(parents=True, exist_ok=True)
    (root / "spool").mkdir(exist_ok=True)
    site = root / "demo-site.yaml"
    site.write_text(SITE_OVERLAY)
    for suffix in ("", "-wal", "-shm"):
        Path(db + suffix).unlink(missing_ok=True)
    # by name, like any adapter (engine never imports a concrete one); typed Any because the demo
    # drives the simulation's own controls (submit, fail, kill_node), which no real scheduler has
    sim: Any = get_adapter("simulated", nodes=NODES, gpus=1)  # one fake GPU per node, as its agent expects
    nvml = {
        n: FakeNvml([FakeGpu(uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000", bus_id="00000000:3B:00.0")])
        for i, n in enumerate(NODES)
    }
    for n in NODES:
        (root / f"kern-{n}.log").write_text("")
    world = _World(root, sim, nvml, clock)
    stop = threading.Event()
    agents = [
        threading.Thread(
            target=run_agent,
            name=f"agent-{n}",
            daemon=True,
            kwargs={
                "node": n,
                "spool_dir": str(root / "spool"),
                "kernel_log": str(root / f"kern-{n}.log"),
                "nvml": True,
                "nvml_backend": nvml[n],
                "expected_gpus": "gres",  # asked of the simulated scheduler, as a real agent asks Slurm
                "scheduler": sim,
                "poll_interval": 1.0,
                "stop_event": stop,
                "nvml_events": False,
                "tick": 0.1,
                "clock": clock,
            },
        )
        for n in NODES
    ]
    for a in agents:
        a.start()
    compiled = require_rulebook([site])
    cfg = ControllerConfig(
        rules=[str(site)],
        db=db,
        follow=[str(root / "logs" / "*.out")],
        spool=str(root / "spool"),
        scheduler="simulated",
        dry_run=True,
        adapter=sim,
        scheduler_interval=0.5,
        tick=0.1,
        clock=clock,
    )
    controller = Controller(cfg, compiled)
    ctl = threading.Thread(target=controller.run, name="controller", daemon=True)
    ctl.start()

    job_ids = []
    for i in range(jobs):
        job = sim.submit(f"llm-{i}", nodes=1)
        sim._jobs[job].stdout = str(root / "logs" / f"slurm-{job}.out")
        job_ids.append(job)
    running = {j: sim.job(j).nodes[0] for j in job_ids if sim.job(j) and sim.job(j).nodes}
    for j, node in running.items():
        world.job_log(j, f"SLURM_JOB_ID={j} SLURM_RESTART_COUNT=0 SLURM_JOB_NODELIST={node}")

    rng = random.Random(seed)
    comps = list(FAILURE_MIX)
    weights = [FAILURE_MIX[c] for c in comps]
    victims = list(running.items())
    rng.shuffle(victims)
    plan = [
        (rng.choices(comps, weights)[0], j, n) for j, n in victims[: max(1, len(victims) - 1)]
    ]  # one job stays healthy
    if plan and not any(comp == "nccl_watchdog_timeout" for comp, _, _ in plan):
        plan[-1] = ("nccl_watchdog_timeout", plan[-1][1], plan[-1][2])  # always one attributed timeout

    def workload() -> None:
        step = 0
        while not stop.is_set():
            step += 1
            for j in running:
                if sim.job(j).state == "RUNNING":
                    world.job_log(j, f"{_stamp(clock)} [Rank 0] step={step}, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]")
            clock.wait(stop, 0.25)

    threading.Thread(target=workload, name="workload", daemon=True).start()
    clock.sleep(2.0)  # the controller has seen the jobs running
    for comp, job, node in plan:
        SCENARIOS[comp](world, job, node)
        clock.sleep(1.0)

    from engine.store import Store, StoreError

    def settled() -> bool:
        try:
            rows = Store(db, readonly=True).incidents()
        except StoreError:  # the controller has not created it yet
            return False
        jobs_with_incident = {r.job for r in rows if r.status == "closed"}
        return all(job in jobs_with_incident for _, job, _ in plan) and all(r.status == "closed" for r in rows)

    deadline = clock.monotonic() + timeout
    while clock.monotonic() < deadline and not settled():
        clock.sleep(0.5)
    stop.set()
    controller.stop_event.set()
    controller.follower.wake.set()
    ctl.join(timeout=10)
    for a in agents:
        a.join(timeout=5)
    from engine.ops.goodput import report_from_store

    done = Store(db, readonly=True)
    try:
        rows = done.incidents()
        goodput = report_from_store(done, now=clock.wall(), gpus_per_node=1, gpus_from="the demo: one fake GPU a node")
    finally:
        done.close()
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return DemoResult(db, plan, rows, clock.monotonic() - t_start, goodput)
