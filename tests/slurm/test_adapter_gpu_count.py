"""How many GPUs the scheduler gives a node (``node_gpu_count``): what the node agent expects NVML
to find (``recover agent --expected-gpus gres``). On recorded ``sinfo -h -N -o '%N|%G'`` output of
the scripts/slurm-up.sh cluster (tests/fixtures/slurm/sinfo_gres.txt), through the runner seam,
and on bytes that are not UTF-8 printed by a real child process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scheduler_adapters.base import CommandResult, SchedulerUnavailable
from scheduler_adapters.simulated import SimulatedCluster
from scheduler_adapters.slurm import SlurmAdapter
from scheduler_adapters.slurm.adapter import subprocess_runner
from scheduler_adapters.slurm.text import gres_gpu_count

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def sinfo(node: str) -> tuple[str, ...]:
    return ("sinfo", "-h", "-N", "-n", node, "-o", "%N|%G")


def answering(stdout: str, rc: int = 0, stderr: str = ""):
    calls: list[tuple[str, ...]] = []

    def run(argv, timeout):
        calls.append(tuple(argv))
        return CommandResult(rc=rc, stdout=stdout, stderr=stderr)

    return run, calls


def recorded_for(node: str) -> str:
    """What ``sinfo -n NODE`` prints: the recorded rows of that node (sinfo filters them)."""
    rows = (FIXTURES / "sinfo_gres.txt").read_text().splitlines()
    return "".join(f"{r}\n" for r in rows if r.split("|")[0] == node)


def test_the_gpus_of_a_node_of_the_recorded_cluster():
    run, calls = answering(recorded_for("n2"))
    assert SlurmAdapter(runner=run).node_gpu_count("n2") == 4
    assert calls == [sinfo("n2")]  # slurmctld filters: one node asked for, no shell, no scontrol text


@pytest.mark.parametrize(
    "gres, count",
    [
        ("gpu:8", 8),
        ("gpu:h100:4(S:0),gpu:a100:4(S:1)", 8),
        ("gpu:a100:4(S:0-1),mps:400", 4),
        ("gpu:tesla:no_consume:2", 2),
        ("gpu:100:4", 4),  # a type named like a number is a type, not the count
        ("(null)", 0),
        ("mps:100,nic:2", 0),
        ("xgpu:3", 0),
    ],
)
def test_gres_gpu_count(gres, count):
    assert gres_gpu_count(gres) == count


def test_a_node_in_two_partitions_has_two_rows_and_one_count():
    run, _ = answering("gpu07|gpu:h100:4(S:0),gpu:a100:4(S:1)\ngpu07|gpu:h100:4(S:0),gpu:a100:4(S:1)\n")
    assert SlurmAdapter(runner=run).node_gpu_count("gpu07") == 8


@pytest.mark.parametrize(
    "stdout, count",
    [
        ("", None),  # Slurm does not know the node: sinfo prints nothing and exits 0
        ("gpu070|gpu:8\n", None),  # another node's row is never this node's
        ("gpu07|gpu:8\ngpu07|gpu:4\n", None),  # rows that disagree say nothing
        ("cpu07|(null)\n", None),
    ],
)
def test_no_count_where_slurm_does_not_say_one(stdout, count):
    run, _ = answering(stdout)
    assert SlurmAdapter(runner=run).node_gpu_count("gpu07") is count


def test_a_node_without_gpus_has_none():
    run, _ = answering("cpu07|(null)\n")
    assert SlurmAdapter(runner=run).node_gpu_count("cpu07") == 0


@pytest.mark.parametrize("bad", ["gpu07; reboot", "-n", "", "a" * 64, "gpu07\n"])
def test_a_node_name_is_validated_before_anything_runs(bad):
    run, calls = answering("gpu07|gpu:8\n")
    with pytest.raises(ValueError):
        SlurmAdapter(runner=run).node_gpu_count(bad)
    assert calls == []


@pytest.mark.parametrize(
    "result",
    [
        CommandResult(rc=127, stderr="[Errno 2] No such file or directory: 'sinfo'"),
        CommandResult(rc=1, stderr="slurm_load_node: Unable to contact slurm controller (connect failure)"),
        CommandResult(rc=124, timed_out=True),
    ],
)
def test_slurm_not_answering_is_an_outage(result):
    with pytest.raises(SchedulerUnavailable):
        SlurmAdapter(runner=lambda argv, timeout: result).node_gpu_count("gpu07")


def printing(data: bytes, tmp: Path):
    """The real subprocess_runner, on a child that prints ``data`` as raw bytes."""
    blob = tmp / "out.bin"
    blob.write_bytes(data)
    code = f"import sys; sys.stdout.buffer.write(open({str(blob)!r}, 'rb').read())"
    return lambda argv, timeout: subprocess_runner([sys.executable, "-c", code], timeout)


@pytest.mark.parametrize(
    "data, count",
    [
        (b"gpu07|gpu:4(S:0)\nn\xff7|gpu:99\n", 4),  # another row in bytes that are not UTF-8
        (b"gpu07|gpu:4(S:0),\xfe\xffgres:2\n", 4),  # a GRES entry that is not UTF-8
        (b"gpu07|gpu:\xff4\n", 0),  # no digits where the count is: not a count
    ],
)
def test_bytes_that_are_not_utf8_never_fail_the_count(tmp_path, data, count):
    assert SlurmAdapter(runner=printing(data, tmp_path)).node_gpu_count("gpu07") == count


def test_the_simulated_cluster_gives_its_nodes_gpus():
    assert SimulatedCluster(["a", "b"], gpus=8).node_gpu_count("b") == 8
    assert SimulatedCluster(["a", "b"], gpus=8).node_gpu_count("c") is None
    assert SimulatedCluster(["a", "b"]).node_gpu_count("a") is None  # a simulation that does not say
