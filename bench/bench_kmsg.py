"""The agent's kernel-log reader (issue 24, item 2): a read scanned as one buffer, only the hit
lines dated, numbered and given an id, against the line-by-line reading it replaced, both
measured in the same run, each also as a ratio to a plain read of the same file (the machine is
noisy: compare ratios, not seconds).

    python bench/bench_kmsg.py [--lines 200000] [--every 1000]

* reference: ``LineTail`` reading the file into lines (what the reader reads it with, no matching)
* line by line: ``KernelLogSource.poll`` with every read fed one line at a time (the code before
  issue 24: each line decoded, dated, hashed twice and scanned on its own)
* buffered: ``KernelLogSource.poll`` as it is (one scan per read)
* /dev/kmsg: the same lines as kmsg records (a regular file stands in for the device), buffered

The file is a kernel log of syslog lines (network, storage and kernel chatter), one NVIDIA Xid
every ``--every`` lines; both readers must give the same facts (checked).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.sources.kmsg import KernelLogSource, default_rulebook
from engine.sources.tail import LineTail

NOISE = [
    "{stamp} n1 kernel: mlx5_core 0000:{bus:02x}:00.0: mlx5_port_module_event:1130: Port module event: module {bus}, Cable plugged",
    "{stamp} n1 kernel: IPv6: ADDRCONF(NETDEV_CHANGE): ib{bus}: link becomes ready",
    "{stamp} n1 kernel: nfs: server storage{bus} OK",
    '{stamp} n1 kernel: audit: type=1400 audit({i}.123:{bus}): apparmor="STATUS" operation="profile_load" pid={i}',
    "{stamp} n1 kernel: EXT4-fs (nvme0n1p{bus}): mounted filesystem with ordered data mode. Quota mode: none.",
]
XID = "{stamp} n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid={i}, name=python3, GPU has fallen off the bus."


def write_log(path: str, lines: int, every: int) -> int:
    xids = 0
    with open(path, "w") as fh:
        for i in range(lines):
            s = i // 10
            stamp = f"Nov 29 {(s // 3600) % 24:02d}:{(s // 60) % 60:02d}:{s % 60:02d}"
            if i % every == every - 1:
                fh.write(XID.format(stamp=stamp, i=i) + "\n")
                xids += 1
            else:
                fh.write(NOISE[i % len(NOISE)].format(stamp=stamp, bus=i % 200, i=i) + "\n")
    return xids


def write_kmsg(path: str, log: str) -> None:
    with open(log) as src, open(path, "w") as fh:
        for seq, line in enumerate(src, 1):
            msg = line.split("kernel: ", 1)[1]
            fh.write(f"4,{seq},{seq * 1000},-;{msg} SUBSYSTEM=pci\n")


def read_all(src: KernelLogSource) -> list:
    out: list = []
    while True:
        got_before = src.lines_read
        out.extend(src.poll())
        if src.lines_read == got_before:
            return out


def best(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--every", type=int, default=1000, help="one Xid every this many lines")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    compiled = default_rulebook()
    with tempfile.TemporaryDirectory(prefix="recover-kmsg-") as tmp:
        log, dev = os.path.join(tmp, "kern.log"), os.path.join(tmp, "kmsg")
        xids = write_log(log, args.lines, args.every)
        write_kmsg(dev, log)
        mib = os.path.getsize(log) / 2**20

        def plain() -> int:
            tail, n = LineTail(log, replay=True), 0
            while True:
                got = tail.read()
                if not got:
                    return n
                n += len(got)

        def reader(buffered: bool):
            def run() -> list:
                src = KernelLogSource("n1", log, replay=True, rulebook=compiled)
                if not buffered:
                    src.lines.scan = lambda raws: None  # type: ignore[method-assign]
                return read_all(src)

            return run

        def kmsg() -> list:
            src = KernelLogSource("n1", kmsg=True, kmsg_path=dev, replay=True, rulebook=compiled)
            src.open()
            return read_all(src)

        t_ref, n = best(plain, args.repeat)
        t_old, old = best(reader(False), args.repeat)
        t_new, new = best(reader(True), args.repeat)
        t_kmsg, kfacts = best(kmsg, args.repeat)
    same = [(f.id, f.kind, dict(f.attrs), f.at, f.origin) for f in old] == [  # type: ignore[union-attr]
        (f.id, f.kind, dict(f.attrs), f.at, f.origin)
        for f in new  # type: ignore[union-attr]
    ]
    print(f"kernel log: {n:,} lines ({mib:.1f} MiB), {xids} Xids (one every {args.every}); best of {args.repeat}")
    print(f"{'reader':36}{'seconds':>9}{'lines/s':>13}{'x plain read':>14}")
    for name, t in (
        ("reference: plain read (LineTail)", t_ref),
        ("line by line (before)", t_old),
        ("buffered (now)", t_new),
        ("/dev/kmsg records, buffered", t_kmsg),
    ):
        print(f"{name:36}{t:>9.3f}{n / t:>13,.0f}{t / t_ref:>13.1f}x")
    print(
        f"buffered / line by line: {t_new / t_old:.2f} ({t_old / t_new:.1f}x faster); facts "
        f"{len(new)} vs {len(old)}, {'the same' if same else 'DIFFERENT'}; kmsg facts {len(kfacts)}"  # type: ignore[arg-type]
    )


if __name__ == "__main__":
    main()
