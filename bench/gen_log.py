"""Deterministic generator of a synthetic multi-node PyTorch/NCCL training log, for benchmarks.

Mostly healthy output (Megatron, DeepSpeed, HF Trainer and tqdm progress lines, NCCL INFO,
checkpoint saves, dataloader and library warnings), a few very long lines and some bytes that
are not UTF-8, with a handful of failures injected at fixed fractions of the file: an NCCL
watchdog timeout, a CUDA OOM, a Python traceback, NVRM Xid lines in syslog form, an NCCL IB
error and a Slurm cancellation. Same seed and size, same bytes.

    python bench/gen_log.py --size-mb 400 --seed 7 --out /tmp/train.log [--manifest inj.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from datetime import datetime, timedelta

logger = logging.getLogger(__name__)

NODES = [f"node{i:02d}" for i in range(1, 9)]
GPUS_PER_NODE = 8
MB = 1 << 20

# failures injected at these fractions of the output, in this order
FAILURES = (
    (0.13, "nccl_ib_error"),
    (0.31, "cuda_oom"),
    (0.47, "xid_79"),
    (0.62, "traceback_illegal_access"),
    (0.78, "nccl_watchdog_timeout"),
    (0.93, "slurm_cancelled"),
)


class _Log:
    """State of the fake run: clock, iteration, ranks."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.t = datetime(2026, 11, 29, 17, 0, 0)
        self.it = 1000
        self.consumed = self.it * 2048
        self.loss = 2.9
        self.pid = {n: rng.randint(10000, 60000) for n in NODES}

    def stamp(self) -> str:
        self.t += timedelta(microseconds=self.rng.randint(2000, 90000))
        return self.t.strftime("%Y-%m-%d %H:%M:%S,") + f"{self.t.microsecond // 1000:03d}"

    def syslog_stamp(self) -> str:
        return self.t.strftime("%b %d %H:%M:%S")

    def node_rank(self) -> tuple[str, int, int]:
        node = self.rng.choice(NODES)
        local = self.rng.randrange(GPUS_PER_NODE)
        return node, local, NODES.index(node) * GPUS_PER_NODE + local

    # -- healthy lines ------------------------------------------------------------------------

    def megatron_iteration(self) -> str:
        self.it += 1
        self.consumed += 2048
        self.loss = max(1.2, self.loss - self.rng.random() * 1e-4 + self.rng.gauss(0, 2e-3))
        ms = self.rng.gauss(812.0, 25.0)
        lr = 3e-4 * min(1.0, self.it / 2000)
        return (
            f"[{self.stamp()}] [INFO] [rank0]: iteration {self.it:8d}/  100000 | consumed samples: "
            f"{self.consumed:12d} | elapsed time per iteration (ms): {ms:.1f} | learning rate: "
            f"{lr:.6E} | global batch size:  2048 | lm loss: {self.loss:.6E} | loss scale: 1.0 | "
            f"grad norm: {abs(self.rng.gauss(0.8, 0.1)):.3f} | number of skipped iterations:   0 | "
            f"number of nan iterations:   0 |"
        )

    def deepspeed_step(self) -> str:
        r = self.rng.random()
        if r < 0.5:
            return (
                f"[{self.stamp()}] [INFO] [logging.py:96:log_dist] [Rank 0] step={self.it}, "
                f"skipped=0, lr=[{3e-4:.6f}], mom=[(0.9, 0.95)]"
            )
        return (
            f"steps: {self.it} loss: {self.loss:.4f} iter time (s): {self.rng.gauss(0.81, 0.02):.3f} "
            f"samples/sec: {self.rng.gauss(2521.3, 30):.1f}"
        )

    def hf_or_tqdm(self) -> str:
        if self.rng.random() < 0.5:
            return (
                f"{{'loss': {self.loss:.4f}, 'grad_norm': {abs(self.rng.gauss(0.8, 0.1)):.4f}, "
                f"'learning_rate': {3e-4:.2e}, 'epoch': {self.it / 10000:.2f}}}"
            )
        done = self.it % 10000
        pct = done * 100 // 10000
        bar = "\u2588" * (pct // 10) + "\u258c" + " " * (9 - pct // 10)
        return f"Epoch 3:  {pct:2d}%|{bar}| {done}/10000 [1:02:03<1:15:50, 1.21it/s, loss={self.loss:.3f}, v_num=0]"

    def nccl_info(self) -> str:
        node, local, rank = self.node_rank()
        pid = self.pid[node]
        tid = pid + self.rng.randint(1, 400)
        kind = self.rng.randrange(6)
        if kind == 0:
            peer = (rank + 1) % 64
            msg = f"Channel {self.rng.randrange(32):02d}/0 : {rank}[{local}] -> {peer}[{peer % 8}] via P2P/IPC/read"
        elif kind == 1:
            msg = (
                f"comm 0x{self.rng.getrandbits(40):x} rank {rank} nranks 64 cudaDev {local} "
                f"nvmlDev {local} busId {0x4C000 + local * 0x1000:x} commId 0x{self.rng.getrandbits(60):x} "
                f"- Init COMPLETE"
            )
        elif kind == 2:
            msg = "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0:10.0.0.7<0>"
        elif kind == 3:
            msg = "Connected all rings, use ring PXN 0 GDR 1"
        elif kind == 4:
            msg = "NCCL_SOCKET_IFNAME set by environment to ib0"
        else:
            msg = f"ncclCommInitRank comm 0x{self.rng.getrandbits(40):x} rank {rank} nranks 64 - Init START"
        return f"{node}:{pid}:{tid} [{local}] NCCL INFO {msg}"

    def checkpoint(self) -> list[str]:
        path = "/lustre/ckpt/gpt-175b"
        return [
            f"[{self.stamp()}] [INFO] [rank0]: saving checkpoint at iteration {self.it:8d} to {path}",
            f"[{self.stamp()}] [INFO] [rank0]:   successfully saved checkpoint at iteration {self.it:8d} to {path}",
        ]

    def noise(self) -> str:
        node, local, rank = self.node_rank()
        k = self.rng.randrange(8)
        if k == 0:
            return (
                "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:557: UserWarning: This "
                "DataLoader will create 16 worker processes in total. Our suggested max number of "
                "worker in current system is 12, which is smaller than what this DataLoader is going "
                "to create."
            )
        if k == 1:
            return "  warnings.warn(_create_warning_msg("
        if k == 2:
            return (
                f"[rank{rank}]: dataloader worker {self.rng.randrange(16)} prefetched {self.rng.randrange(64)} batches"
            )
        if k == 3:
            return (
                f"{node}: [{self.stamp()}] [WARNING] [stage_1_and_2.py:1956:step] [deepspeed] "
                f"OVERFLOW! Rank {rank} Skipping step. Attempted loss scale: 65536, reducing to 32768"
            )
        if k == 4:
            return f"[{self.stamp()}] [INFO] [rank{rank}]: data shard {self.rng.randrange(4096):05d} opened, {self.rng.randrange(10**6)} tokens"
        if k == 5:
            return (
                f"{self.syslog_stamp()} {node} kernel: [{self.rng.uniform(1e5, 1e6):.6f}] "
                f"mlx5_core 0000:{0x18 + local:02x}:00.0: mlx5_fw_tracer: FW trace event"
            )
        if k == 6:
            return f"{node}:{self.pid[node]}:{self.pid[node] + 3} [{local}] NCCL INFO Channel {local:02d} : using SHARP"
        return f"time to initialize megatron (seconds): {self.rng.uniform(60, 200):.3f}"

    def long_line(self) -> str:
        n = self.rng.choice((3000, 20000, 150000))
        items = ", ".join(f'"layer_{i}.weight": [{i % 97}, {i % 13}]' for i in range(n // 30))
        return f"[{self.stamp()}] [INFO] [rank0]: model state dict shapes: {{{items}}}"

    # -- failures -------------------------------------------------------------------------------

    def failure(self, kind: str) -> list[str]:
        node, local, rank = self.node_rank()
        pid = self.pid[node]
        if kind == "nccl_ib_error":
            return [
                f"{node}:{pid}:{pid + 77} [{local}] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got "
                f"completion from peer 10.0.0.{rank} with error 12, opcode 0, len 0, vendor err 129 "
                f"(Recv) localGid fe80::1 remoteGid fe80::2",
                f"{node}:{pid}:{pid + 77} [{local}] NCCL INFO transport/net.cc:1134 -> 6",
            ]
        if kind == "cuda_oom":
            return [
                f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
                f"GPU {local} has a total capacity of 79.15 GiB of which 1.21 GiB is free. Including "
                f"non-PyTorch memory, this process has 77.93 GiB memory in use."
            ]
        if kind == "xid_79":
            return [
                f"{self.syslog_stamp()} {node} kernel: [1234567.123456] NVRM: Xid (PCI:0000:{0x4C + local:02x}:00): "
                f"79, pid={pid}, name=python, GPU has fallen off the bus.",
                f"{self.syslog_stamp()} {node} kernel: [1234567.123789] NVRM: GPU 0000:{0x4C + local:02x}:00.0: "
                f"GPU has fallen off the bus.",
            ]
        if kind == "traceback_illegal_access":
            return [
                "Traceback (most recent call last):",
                '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 254, in <module>',
                "    pretrain(train_valid_test_datasets_provider,",
                '  File "/workspace/Megatron-LM/megatron/training/training.py", line 1233, in train',
                "    loss_dict, skipped_iter, grad_norm = train_step(forward_step_func,",
                "RuntimeError: CUDA error: an illegal memory access was encountered",
                "CUDA kernel errors might be asynchronously reported at some other API call, so the "
                "stacktrace below might be incorrect.",
            ]
        if kind == "nccl_watchdog_timeout":
            return [
                f"[rank{rank}]:[E ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective "
                f"operation timeout: WorkNCCL(SeqNum=123456, OpType=ALLREDUCE, NumelIn=262144, "
                f"NumelOut=262144, Timeout(ms)=600000) ran for 600091 milliseconds before timing out.",
                f"[rank{rank}]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank {rank}] Exception (either an "
                f"error or timeout) detected by watchdog at work: 123456",
            ]
        if kind == "slurm_cancelled":
            return [
                f"slurmstepd: error: *** STEP 4242.0 ON {node} CANCELLED AT "
                f"{self.t.strftime('%Y-%m-%dT%H:%M:%S')} DUE TO TIME LIMIT ***",
                f"srun: error: {node}: task {rank}: Terminated",
            ]
        raise ValueError(kind)


def generate(out, size_mb: float, seed: int = 7) -> list[dict]:
    """Write about ``size_mb`` MiB of log to the binary file ``out``; return the injected failures."""
    rng = random.Random(seed)
    log = _Log(rng)
    target = int(size_mb * MB)
    todo = list(FAILURES)
    manifest: list[dict] = []
    written = 0
    line_no = 0
    block: list[bytes] = []
    block_len = 0

    def emit(text: str | bytes) -> None:
        nonlocal block_len, line_no
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        block.append(data)
        block_len += len(data) + 1
        line_no += 1

    garbage = bytes(range(0x80, 0x100))
    while written + block_len < target:
        if todo and written + block_len >= todo[0][0] * target:
            _, kind = todo.pop(0)
            manifest.append({"kind": kind, "line_no": line_no + 1, "offset": written + block_len})
            for line in log.failure(kind):
                emit(line)
        r = rng.random()
        if r < 0.55:
            emit(log.megatron_iteration())
        elif r < 0.62:
            emit(log.deepspeed_step())
        elif r < 0.67:
            emit(log.hf_or_tqdm())
        elif r < 0.87:
            emit(log.nccl_info())
        elif r < 0.9988:
            emit(log.noise())
        elif r < 0.9993:
            for line in log.checkpoint():
                emit(line)
        elif r < 0.9997:
            emit(log.long_line())
        else:  # binary junk: a few bytes that are not UTF-8, and a NUL
            k = rng.randrange(4, 40)
            junk = bytes(rng.choice(garbage) for _ in range(k))
            emit(b"[rank3]: tokenizer saw \x00" + junk + b" in sample " + str(rng.randrange(10**6)).encode())
        if block_len >= MB:
            out.write(b"\n".join(block) + b"\n")
            written += block_len
            block.clear()
            block_len = 0
    if block:
        out.write(b"\n".join(block) + b"\n")
        written += block_len
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=100.0, help="approximate size in MiB")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default="-", help="output file, - for stdout")
    ap.add_argument("--manifest", help="write the injected failures (kind, line_no, offset) as JSON")
    args = ap.parse_args(argv)
    if args.out == "-":
        manifest = generate(sys.stdout.buffer, args.size_mb, args.seed)
    else:
        with open(args.out, "wb") as f:
            manifest = generate(f, args.size_mb, args.seed)
    if args.manifest:
        with open(args.manifest, "w") as f:
            json.dump(manifest, f, indent=1)
    for item in manifest:
        print(f"injected {item['kind']} at line {item['line_no']} (offset {item['offset']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
