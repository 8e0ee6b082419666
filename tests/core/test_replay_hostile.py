"""Hostile logs: binary garbage, invalid UTF-8, lines of many megabytes, CRLF, NULs and
interleaved writers are processed without crashing and without losing the lines around them."""

import json
import subprocess
import sys

XID = b"Nov 29 17:04:00 n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
OOM = b"2026-11-29T17:05:00Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def replay_json(tmp_path, *files):
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "replay", "--db", str(tmp_path / "r.db"), "--json", *map(str, files)],
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert b"Traceback" not in proc.stderr
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def test_damage_around_the_fault_lines_loses_nothing(tmp_path):
    log = tmp_path / "slurm-777.out"
    with open(log, "wb") as fh:
        fh.write(b"\x00\xff\xfe garbage \x80\x81\n" * 100)
        fh.write(b"A" * (5 * 1024 * 1024) + b"\n")  # a 5 MiB line
        fh.write(OOM.replace(b"\n", b"\r\n"))  # CRLF
        fh.write(bytes(range(256)) * 50 + b"\n")
        fh.write(b"\xc3")  # half a UTF-8 character at the end of a line
        fh.write(b"\n")
    kern = tmp_path / "kern.log"
    kern.write_bytes(b"\xde\xad\xbe\xef" * 1000 + b"\n" + XID + b"\x00" * 1000 + b"\n")
    incidents = replay_json(tmp_path, log, kern)
    classes = sorted(i["fault_class"] for i in incidents)
    assert classes == ["cuda_oom", "gpu_fell_off_bus"], incidents


def test_interleaved_writers_one_incident_per_job(tmp_path):
    a, b = tmp_path / "slurm-801.out", tmp_path / "slurm-802.out"
    # two ranks writing to one file at once can glue half lines together; each file still yields its fault
    a.write_bytes(
        b"2026-11-29T17:00:00Z [rank0]: step=5 loss=2.0\n2026-11-29T17:00:01Z [rank1]: st" + OOM + b"ep=5 loss=2.0\n"
    )
    b.write_bytes(b"2026-11-29T17:00:00Z [rank0]: step=5 loss=2.0\n" * 1000)
    incidents = replay_json(tmp_path, a, b)
    assert [(i["job"], i["fault_class"]) for i in incidents] == [("801", "cuda_oom")]
