"""Fixtures for the tests that use the real cluster of scripts/slurm-up.sh."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

import pytest

from tests.helpers import wait_for as _wait_for

from scheduler_adapters.base import CommandResult
from scheduler_adapters.slurm import SlurmAdapter
from scheduler_adapters.slurm.adapter import subprocess_runner

REPO = Path(__file__).resolve().parents[2]
NODE_HELPER = REPO / "scripts" / "slurm-node.sh"

T = TypeVar("T")


@pytest.fixture(scope="session")
def slurm() -> SlurmAdapter:
    """An adapter on the live cluster. Without one: skipped locally, an error under CI=..."""
    probe = subprocess_runner(["sinfo", "-h", "-o", "%N %T"], 15)
    if probe.rc != 0 or not probe.stdout.strip():
        why = (
            f"no Slurm cluster answers (sinfo rc={probe.rc}: "
            f"{(probe.stderr or probe.stdout).strip()[:300]}); start one with scripts/slurm-up.sh"
        )
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return SlurmAdapter(timeout=20)


def checked(result: CommandResult, argv: list[str]) -> CommandResult:
    assert result.rc == 0, f"{argv} failed rc={result.rc}: {result.stderr.strip()}"
    return result


@pytest.fixture
def wait_for():
    """``wait_for(what, probe, timeout)``: poll until ``probe()`` is truthy, or fail."""
    return _wait_for


@pytest.fixture
def run_ok(slurm):
    """``run_ok(argv)``: run through the adapter and fail the test unless rc is 0."""
    return lambda argv: checked(slurm.run(argv), argv)


class Jobs:
    """Submits test jobs and cancels every one of them afterwards."""

    def __init__(self, adapter: SlurmAdapter, out_dir: Path):
        self.adapter = adapter
        self.out_dir = out_dir
        self.ids: list[str] = []

    def submit(self, script: str, *options: str) -> str:
        argv = [
            "sbatch",
            "--parsable",
            "--requeue",
            "--open-mode=append",
            "-J",
            "recover-test",
            "-o",
            f"{self.out_dir}/%j.out",
            *options,
            "--wrap",
            script,
        ]
        job_id = checked(self.adapter.run(argv), argv).stdout.strip().split(";")[0]
        assert job_id.isdigit(), f"sbatch printed {job_id!r}"
        self.ids.append(job_id)
        return job_id

    def cancel_all(self) -> None:
        if self.ids:
            self.adapter.run(["scancel", *self.ids])


@pytest.fixture
def jobs(slurm, tmp_path) -> Jobs:
    tmp_path.chmod(0o755)
    submitted = Jobs(slurm, tmp_path)
    yield submitted
    submitted.cancel_all()


class Nodes:
    """Drains, kills and brings back nodes, and puts every one back in service afterwards."""

    def __init__(self, adapter: SlurmAdapter):
        self.adapter = adapter
        self.drained: set[str] = set()
        self.killed: set[str] = set()

    def update(self, node: str, *settings: str) -> CommandResult:
        argv = ["scontrol", "update", f"NodeName={node}", *settings]
        return checked(self.adapter.run(argv), argv)

    def drain(self, node: str, reason: str) -> None:
        self.drained.add(node)
        self.update(node, "State=DRAIN", f"Reason={reason}")

    def resume(self, node: str) -> None:
        self.update(node, "State=RESUME")
        self.drained.discard(node)

    def helper(self, action: str, node: str) -> CommandResult:
        argv = [str(NODE_HELPER), action, node]
        return checked(subprocess_runner(argv, 60), argv)

    def kill(self, node: str) -> None:
        self.killed.add(node)
        self.helper("kill", node)

    def start(self, node: str) -> None:
        self.helper("start", node)
        self.killed.discard(node)

    def restore(self) -> None:
        for node in sorted(self.killed):
            self.helper("start", node)
        for node in sorted(self.drained):
            self.adapter.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])


@pytest.fixture
def nodes(slurm) -> Nodes:
    touched = Nodes(slurm)
    yield touched
    touched.restore()
